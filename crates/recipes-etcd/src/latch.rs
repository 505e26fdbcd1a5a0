//! `LeaderLatch`: the election layout, with events and fences.
//!
//! Each participant campaigns in the background with its id as the value
//! (`<name>/<lease id in hex>` = id); the oldest candidate leads. A term is
//! held while our key exists and the client's lease deadline has not passed.
//! After any loss the latch starts over with a new key — and a new lease if
//! the session was lost: it never regains leadership on an old one.

use recipes_core::Result;

use crate::client::EtcdClient;
use crate::election::EtcdElection;

/// A leader latch: among all participants of an election name, one leads
/// (etcd's election layout, with the id as the value; see
/// [`recipes_core::LeaderLatch`] for the API).
///
/// Made by [`EtcdClient::leader_latch`]; the same API and events as the
/// ZooKeeper latch.
///
/// # Under pause and partition
///
/// Guaranteed (clocks within 500 ppm): a term's loss signal fires before
/// etcd can expire the client's lease and let another participant lead;
/// [`has_leadership`](recipes_core::LeaderLatch::has_leadership) reads the
/// lease deadline itself, so after a pause it says `false` before any event
/// is delivered; fences strictly increase across terms; after a loss the
/// latch campaigns again with a new key (a new lease after a lost session),
/// so its next term has a higher fence. Not guaranteed: that the old leader
/// stops in time — a pause right after checking outlives the lease; write
/// with the fence of [`LatchEvent::Gained`](recipes_core::LatchEvent::Gained)
/// and the resource refuses a deposed leader. A partitioned leader loses its
/// term at the local deadline even if etcd still keeps the lease.
pub type LeaderLatch = recipes_core::LeaderLatch<EtcdElection>;

impl EtcdClient {
    /// A leader latch on the election `name` for the participant `id` (the
    /// value of its key). Call [`start`](recipes_core::LeaderLatch::start) to
    /// join.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](recipes_core::Error::InvalidArgument) for a
    /// bad name (as for
    /// [`election`](EtcdClient::election)) or an empty id.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), recipes_etcd::Error> {
    /// use std::time::Duration;
    /// let client = recipes_etcd::EtcdClient::connect(["127.0.0.1:2379"])?;
    /// let latch = client.leader_latch("/elections/scheduler", "host-a")?;
    /// latch.start();
    /// if latch.await_leadership(Duration::from_secs(10)) {
    ///     let (fence, lost) = latch.leadership().expect("leads");
    ///     println!("leading with fence {fence}; lost: {}", lost.is_lost());
    /// }
    /// latch.close()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn leader_latch(&self, name: &str, id: &str) -> Result<LeaderLatch> {
        // Each latch or selector is a handle of its own (see `EtcdClient`).
        LeaderLatch::new(EtcdElection::new(self.clone(), name)?, id)
    }
}
