//! The etcd election (and so the latch and the selector, whose id is the
//! value): the mutex's layout, rule and wait with values; Go's
//! `concurrency.Election` and `etcdctl elect` campaign against it.
//!
//! The fencing token is the revision at which none was ahead of us, as for
//! the mutex (the read that found none, or the deletion heard on the watch
//! that left none): no earlier than the previous leader's key's deletion,
//! so after every write of the previous term, and the hand-over costs no
//! request between the wake and the win. Our key's `mod_revision`
//! is no fence: it moves with every proclaim and, across a hand-over, can
//! be lower than the previous leader's.

use std::future::Future;
use std::time::Duration;

use recipes_core::store::{ElectionStore, QueueElection};
use recipes_core::{Client, LeaderInfo, LeaderObserver, Result};
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::contend::Claim;
use crate::lock::{EtcdKey, EtcdLock};
use crate::mutex::NameHandle;
use crate::observe::Following;

/// An election in etcd's `concurrency` layout (keys `<name>/<lease id>`
/// holding the candidates' values), shared with Go's
/// `concurrency.Election` and `etcdctl elect <name>`; see
/// [`recipes_core::Election`] for the API and what holds under pause and
/// partition. Made by [`Client::election`](crate::Client::election).
///
/// Handles take turns as a mutex's do (see [`EtcdClient`]); each latch and
/// selector is a handle of its own. Leaders elected by
/// `etcdctl elect` or Go's package have no fence of ours. Go's package lets
/// the elections `/a` and `/a/b` block each other (its `Leader()` may name
/// a key of `/a/b` as the leader of `/a`); ours does not, and mixing the
/// two is still never unsafe.
pub type Election = recipes_core::Election<EtcdElection>;

/// A won etcd election; see [`recipes_core::Leadership`].
pub type Leadership = recipes_core::Leadership<EtcdLock>;

/// A leader latch on an etcd election (the id as the value); see
/// [`recipes_core::LeaderLatch`] for the API and what holds under pause
/// and partition. After a lost session its next term is on a new lease.
/// Made by [`Client::leader_latch`](crate::Client::leader_latch).
pub type LeaderLatch = recipes_core::LeaderLatch<EtcdElection>;

/// Runs a closure while this participant leads an etcd election (the id as
/// the value); see [`recipes_core::LeaderSelector`] for the API and what
/// holds under pause and partition. Made by
/// [`Client::leader_selector`](crate::Client::leader_selector).
pub type LeaderSelector = recipes_core::LeaderSelector<EtcdElection>;

/// The etcd election backend: core's election over this client's verbs
/// (below); use it through [`Election`],
/// [`LeaderLatch`](crate::LeaderLatch) or
/// [`LeaderSelector`](crate::LeaderSelector).
pub type EtcdElection = QueueElection<EtcdClient>;

/// An election's handle, as [`ElectionStore::Candidacy`].
#[derive(Debug, Clone)]
pub struct EtcdCandidacy(NameHandle);

impl ElectionStore for EtcdClient {
    type Candidacy = EtcdCandidacy;

    fn candidacy(&self, name: &str, _selector: bool) -> Result<EtcdCandidacy> {
        NameHandle::new(self.clone(), "election", name).map(EtcdCandidacy)
    }

    /// The mutex's contention with a win confirmed by a write; every way
    /// out but a win deletes our key.
    fn campaign(
        &self,
        candidacy: &EtcdCandidacy,
        value: Vec<u8>,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Option<EtcdLock>>> + Send + 'static {
        let this = candidacy.0.clone();
        async move {
            let won = this.contend(Claim::Campaign(&value), deadline).await?;
            Ok(won.map(|a| EtcdKey::held(this.client.clone(), a, "leadership")))
        }
    }

    fn candidates(&self, candidacy: &EtcdCandidacy) -> Result<Vec<LeaderInfo>> {
        let queue = self.contenders(&candidacy.0.name)?;
        Ok(queue.into_iter().map(LeaderInfo::from).collect())
    }

    /// Resigning retries until the key is deleted or the session is lost,
    /// which its deadline bounds by a TTL; the delete in flight then gives
    /// up within an RPC timeout, and one more covers the retry pause and
    /// the latch's last step. Taken from the settings, not the live
    /// session: after the client closed there is none.
    fn election_close_timeout(&self) -> Duration {
        self.leases().lease_span() + 2 * self.rpc_timeout()
    }

    /// A synced watch on the prefix, opened again (and the leader read
    /// again) when its stream breaks.
    fn observe(&self, candidacy: &EtcdCandidacy) -> Result<LeaderObserver> {
        let watch = Following {
            client: self.clone(),
            prefix: candidacy.0.prefix.clone(),
            watch: None,
        };
        recipes_core::store::follow_leader(self.runtime(), self.rpc_timeout(), watch)
    }
}
