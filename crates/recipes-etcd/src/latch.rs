//! `LeaderLatch`: the election layout, with events and fences.
//!
//! Each participant campaigns in the background with its id as the value
//! (`<name>/<lease id in hex>` = id); the oldest candidate leads. A term is
//! held while our key exists and the client's lease deadline has not passed.
//! After any loss the latch starts over with a new key — and a new lease if
//! the session was lost: it never regains leadership on an old one.

use std::future::Future;
use std::time::Duration;

use recipes_core::{
    ElectionBackend, FencedLease, FencingToken, HeldLease, LatchBackend, LossSignal, Participant,
    Result, Runtime,
};

use crate::client::EtcdClient;
use crate::election::{EtcdElection, EtcdLeadership};
use crate::observe::read_candidates;

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
pub type LeaderLatch = recipes_core::LeaderLatch<EtcdLatch>;

/// The etcd side of a [`LeaderLatch`].
#[derive(Debug)]
pub struct EtcdLatch {
    election: EtcdElection,
    id: String,
}

impl LatchBackend for EtcdLatch {
    type Term = EtcdLeadership;

    fn name(&self) -> &str {
        self.election.name()
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn runtime(&self) -> &Runtime {
        self.election.client().runtime()
    }

    async fn contend(&self) -> Result<Option<EtcdLeadership>> {
        self.election.campaign_until(self.id.as_bytes(), None).await
    }

    fn token(term: &EtcdLeadership) -> FencingToken {
        FencedLease::token(term)
    }

    fn loss_signal(term: &EtcdLeadership) -> LossSignal {
        term.loss_signal().clone()
    }

    fn end(term: EtcdLeadership) -> impl Future<Output = ()> + Send {
        term.resign_on_runtime()
    }

    fn participants(&self) -> Result<Vec<Participant>> {
        participants(&self.election)
    }

    /// Resigning retries until the key is deleted or the session is lost:
    /// within a TTL either way.
    fn close_timeout(&self) -> Duration {
        self.election.client().session_ttl()
    }
}

/// The participants of `election`, oldest first.
pub(crate) fn participants(election: &EtcdElection) -> Result<Vec<Participant>> {
    let (client, prefix) = (election.client().clone(), election.key_prefix().to_owned());
    election.client().call("list participants", async move {
        let session = client.live_session().await?;
        let candidates = read_candidates(&session.etcd()?, session.rpc_timeout(), &prefix).await?;
        Ok(candidates
            .into_iter()
            .enumerate()
            .map(|(i, c)| Participant {
                id: String::from_utf8_lossy(&c.info.value).into_owned(),
                holder: c.info.holder,
                is_leader: i == 0,
            })
            .collect())
    })
}

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
        let election = EtcdElection::new(self.clone(), name)?;
        recipes_core::validate_participant_id("latch", id)?;
        Ok(LeaderLatch::from_backend(EtcdLatch {
            election,
            id: id.to_owned(),
        }))
    }
}
