//! `LeaderSelector`: run a closure while leader, over the election layout
//! (`<name>/<lease id in hex>` = the participant id).
//!
//! The closure runs on the selector's own thread, never on the runtime. It
//! gets the held [`Leadership`](crate::Leadership) (fence, loss signal, proclaim, fenced
//! writes); when leadership may be gone — or the selector is closed — its
//! loss signal fires and the closure must stop. After it returns, the
//! selector resigns and, with `requeue`, campaigns again with a new key.

use recipes_core::Result;

use crate::client::EtcdClient;
use crate::election::EtcdElection;

/// Runs a closure while this participant leads (etcd's election layout;
/// see [`recipes_core::LeaderSelector`] for the API). The closure gets the
/// held [`Leadership`](crate::Leadership).
///
/// Made by [`EtcdClient::leader_selector`]; the same API as the ZooKeeper
/// selector.
///
/// # Under pause and partition
///
/// Guaranteed (clocks within 500 ppm): the closure's [`Leadership`](crate::Leadership) loss
/// signal fires before etcd can expire the client's lease and let another
/// participant lead, and fences strictly increase from one closure run to
/// the next, across participants. Not guaranteed: that only one closure
/// runs at a time — a leader paused past its lease resumes inside its
/// closure while another runs; it finds its loss signal fired, and its
/// writes fenced with the token (or through the leadership's fenced writes)
/// are refused. Do not rely on the closure having stopped; rely on the
/// fence.
pub type LeaderSelector = recipes_core::LeaderSelector<EtcdElection>;

impl EtcdClient {
    /// A leader selector on the election `name` for participant `id` (the
    /// value of its key). Call [`start`](recipes_core::LeaderSelector::start)
    /// with the closure to run while leading.
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
    /// let selector = client.leader_selector("/elections/compactor", "host-a")?;
    /// selector.start(true, |leadership| {
    ///     // Work until leadership may be gone; fence every write.
    ///     while leadership.lost().wait_timeout(Duration::from_secs(1)).is_none() {
    ///         let _ = leadership.put("/compactor/last-run", leadership.token().to_string().as_bytes());
    ///     }
    /// })?;
    /// // … later:
    /// selector.close();
    /// # Ok(())
    /// # }
    /// ```
    pub fn leader_selector(&self, name: &str, id: &str) -> Result<LeaderSelector> {
        // Each latch or selector is a handle of its own (see `EtcdClient`).
        LeaderSelector::new(EtcdElection::new(self.clone(), name)?, id)
    }
}
