//! `LeaderLatch`: Curator's latch layout, with events and fences.
//!
//! Layout: `<path>/_c_<uuid>-latch-<seq10>`, data = the participant id. The
//! participant whose node is first in the queue leads; the others watch
//! their predecessor. Leadership is held while our node exists under our
//! current session and the session's lease deadline has not passed. After
//! any loss the latch starts over with a new node: it never regains
//! leadership on an old one.

use std::future::Future;
use std::time::Duration;

use recipes_core::{
    FencingToken, HeldLease, LatchBackend, LossSignal, Participant, Result, Runtime,
};

use crate::client::ZkClient;
use crate::contenders::read_queue;
use crate::driver::{Contender, NodeDriver};
use crate::names::validate_path;
use crate::node_lease::ZkNodeLease;

/// A leader latch: among all participants on a path, one leads (Curator's
/// `LeaderLatch` layout; see [`recipes_core::LeaderLatch`] for the API).
///
/// Made by [`ZkClient::leader_latch`].
///
/// # Under pause and partition
///
/// Guaranteed (clocks within 500 ppm): a term's loss signal fires before
/// the server can expire the session and let another participant lead;
/// [`has_leadership`](recipes_core::LeaderLatch::has_leadership) reads the
/// session's lease deadline, so after a pause it reports `false` before any
/// event is delivered; fences (node czxids) strictly increase across terms.
/// Not guaranteed: that the old leader stops in time — write with the fence
/// of [`LatchEvent::Gained`](recipes_core::LatchEvent::Gained), and the
/// resource refuses a deposed leader.
pub type LeaderLatch = recipes_core::LeaderLatch<ZkLatch>;

/// The ZooKeeper side of a [`LeaderLatch`].
#[derive(Debug)]
pub struct ZkLatch {
    client: ZkClient,
    driver: NodeDriver,
    id: String,
}

impl LatchBackend for ZkLatch {
    type Term = ZkNodeLease;

    fn name(&self) -> &str {
        &self.driver.contender.dir
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn runtime(&self) -> &Runtime {
        self.client.runtime()
    }

    async fn contend(&self) -> Result<Option<ZkNodeLease>> {
        let acquired = self.driver.acquire(None).await?;
        Ok(acquired.map(|a| ZkNodeLease::held(self.client.clone(), a)))
    }

    fn token(term: &ZkNodeLease) -> FencingToken {
        FencingToken(term.czxid() as u64)
    }

    fn loss_signal(term: &ZkNodeLease) -> LossSignal {
        term.loss_signal().clone()
    }

    fn end(term: ZkNodeLease) -> impl Future<Output = ()> + Send {
        term.release_async()
    }

    fn participants(&self) -> Result<Vec<Participant>> {
        participants(&self.client, &self.driver.contender.dir)
    }

    fn close_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }
}

/// A contender of a latch or selector at `path`: `<path>/_c_<uuid>-<lock_name><seq>`
/// with the id as data.
pub(crate) fn contender(
    what: &str,
    path: &str,
    id: &str,
    lock_name: &'static str,
) -> Result<Contender> {
    validate_path(path)?;
    recipes_core::validate_participant_id(what, id)?;
    Ok(Contender {
        dir: path.to_owned(),
        lock_name,
        data: id.as_bytes().to_vec(),
        max_leases: 1,
    })
}

/// Participants of a latch or selector at `dir`, in queue order.
pub(crate) fn participants(client: &ZkClient, dir: &str) -> Result<Vec<Participant>> {
    let (c, dir) = (client.clone(), dir.to_owned());
    client.call("list participants", async move {
        let session = c.live_session().await?;
        let queue = read_queue(session.zk(), &dir).await?;
        Ok(queue
            .into_iter()
            .enumerate()
            .map(|(i, node)| Participant {
                id: String::from_utf8_lossy(&node.data).into_owned(),
                holder: node.path,
                is_leader: i == 0,
            })
            .collect())
    })
}

impl ZkClient {
    /// A leader latch at `path` for the participant `id` (Curator's
    /// `LeaderLatch` layout). Call [`start`](recipes_core::LeaderLatch::start)
    /// to join.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](recipes_core::Error::InvalidArgument) for a
    /// bad path or an empty id.
    pub fn leader_latch(&self, path: &str, id: &str) -> Result<LeaderLatch> {
        Ok(LeaderLatch::from_backend(ZkLatch {
            client: self.clone(),
            driver: NodeDriver::new(self, contender("latch", path, id, "latch-")?),
            id: id.to_owned(),
        }))
    }
}
