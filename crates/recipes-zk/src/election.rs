//! The ZooKeeper election — campaign, proclaim, observe, resign — in
//! Curator's latch layout, contended by the same engine driver as every
//! other recipe; and the latch and the selector, which are candidates of it
//! with their id as the value (the selector with its mutex's node names).
//!
//! A candidate owns `<path>/_c_<uuid>-latch-<seq10>`, ephemeral-sequential,
//! with its value as the node's data. The leader is the first node in queue
//! order; a waiting candidate watches only the node ahead of its own. A
//! [`LeaderLatch`](crate::LeaderLatch) on the same path is a candidate of
//! the same election (its value is its id), and Curator's `LeaderLatch`
//! too. The fence is the leader node's czxid: it is created after every
//! node that led before it, and a proclaim (a fenced `setData` on our own
//! node) does not move it.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use recipes_core::store::engine::Rule;
use recipes_core::store::{ElectionStore, QueueElection};
use recipes_core::{Client, LeaderInfo, LeaderObserver, Result};

use crate::client::ZkClient;
use crate::driver::{Contender, NodeDriver};
use crate::names::{is_contender_of, validate_path, LATCH, LOCK};
use crate::node_lease::{ZkNode, ZkNodeLease};
use crate::observe::{read_leader, watch_leader};

/// A leader election among every process that campaigns on the same path
/// (Curator's `LeaderLatch` layout: candidates
/// `<path>/_c_<uuid>-latch-<seq10>`, the value as data; latches on the same
/// path are candidates too); see [`recipes_core::Election`] for the API and
/// what holds under pause and partition. Made by
/// [`Client::election`](crate::Client::election).
pub type Election = recipes_core::Election<ZkElection>;

/// A won ZooKeeper election; see [`recipes_core::Leadership`].
pub type Leadership = recipes_core::Leadership<ZkNodeLease>;

/// A leader latch (Curator's `LeaderLatch` layout:
/// `<path>/_c_<uuid>-latch-<seq10>`, data = the participant id); see
/// [`recipes_core::LeaderLatch`] for the API and what holds under pause and
/// partition. Made by [`Client::leader_latch`](crate::Client::leader_latch).
pub type LeaderLatch = recipes_core::LeaderLatch<ZkElection>;

/// Runs a closure while this participant leads (Curator's
/// `LeaderSelector` layout, which is its mutex's:
/// `<path>/_c_<uuid>-lock-<seq10>`, data = the id); see
/// [`recipes_core::LeaderSelector`] for the API and what holds under pause
/// and partition. Made by
/// [`Client::leader_selector`](crate::Client::leader_selector).
pub type LeaderSelector = recipes_core::LeaderSelector<ZkElection>;

/// The ZooKeeper election backend: core's election over this client's
/// verbs (below); use it through [`Election`] (and
/// [`LeaderLatch`](crate::LeaderLatch), [`LeaderSelector`](crate::LeaderSelector)).
pub type ZkElection = QueueElection<ZkClient>;

/// An election's folder and its candidates' node name, as
/// [`ElectionStore::Candidacy`].
#[derive(Debug, Clone)]
pub struct ZkCandidacy {
    path: String,
    /// Curator's node name: `latch-` for elections and latches, `lock-` for
    /// selectors (Curator's selector is its mutex).
    lock_name: &'static str,
}

impl ElectionStore for ZkClient {
    type Candidacy = ZkCandidacy;

    /// Curator's latch and election queue `latch-` nodes, its selector
    /// `lock-` nodes (an `InterProcessMutex`).
    fn candidacy(&self, path: &str, selector: bool) -> Result<ZkCandidacy> {
        validate_path(path)?;
        Ok(ZkCandidacy {
            path: path.to_owned(),
            lock_name: if selector { LOCK } else { LATCH },
        })
    }

    fn campaign(
        &self,
        candidacy: &ZkCandidacy,
        value: Vec<u8>,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Option<ZkNodeLease>>> + Send + 'static {
        let contender = Contender {
            dir: candidacy.path.clone(),
            lock_name: candidacy.lock_name,
            data: value,
            rule: Rule::Latch,
            outside_semaphores: true,
        };
        let driver = NodeDriver::new(self, contender);
        async move {
            let won = driver.acquire(deadline).await?;
            Ok(won.map(|a| ZkNode::held(driver.client.clone(), a)))
        }
    }

    fn candidates(&self, candidacy: &ZkCandidacy) -> Result<Vec<LeaderInfo>> {
        let queue = self.contenders(&candidacy.path)?;
        let ours = |c: &recipes_core::Contender| {
            let name = &c.holder[c.holder.rfind('/').map_or(0, |i| i + 1)..];
            is_contender_of(name, candidacy.lock_name)
        };
        Ok(queue
            .into_iter()
            .filter(ours)
            .map(LeaderInfo::from)
            .collect())
    }

    fn election_close_timeout(&self) -> Duration {
        // The term's end: one delete, retried within an RPC timeout.
        2 * self.rpc_timeout()
    }

    fn leader(&self, candidacy: &ZkCandidacy) -> Result<Option<LeaderInfo>> {
        let (client, path) = (self.clone(), candidacy.path.clone());
        let lock_name = candidacy.lock_name;
        self.call("read the leader", async move {
            let session = client.live_session().await?;
            Ok(read_leader(&session, &path, lock_name)
                .await?
                .map(|(info, _)| info))
        })
    }

    fn observe(&self, candidacy: &ZkCandidacy) -> Result<LeaderObserver> {
        watch_leader(self, &candidacy.path, candidacy.lock_name)
    }
}
