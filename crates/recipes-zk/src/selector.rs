//! `LeaderSelector`: run a closure while leader (Curator's selector layout,
//! which is its mutex: `<path>/_c_<uuid>-lock-<seq10>`, data = the id).
//!
//! The closure runs on the selector's own thread, never on the runtime. It
//! gets the held [`Leadership`] (fence, loss signal, fenced writes, and a
//! `proclaim` that sets our node's data), as on every store; when leadership
//! may be gone — or the selector is closed — the guard's loss signal fires
//! and the closure must stop. After it returns, leadership is released and,
//! with `requeue`, the selector queues again.

use recipes_core::{FencingToken, LossSignal, LossTrigger, Participant, Result, SelectorBackend};

use crate::client::ZkClient;
use crate::driver::NodeDriver;
use crate::election::Leadership;
use crate::latch::{contender, participants};
use crate::node_lease::ZkNodeLease;

/// Runs a closure while this participant leads (Curator's
/// `LeaderSelector` layout; see [`recipes_core::LeaderSelector`] for the
/// API). The closure gets the held [`Leadership`].
///
/// Made by [`ZkClient::leader_selector`].
///
/// # Under pause and partition
///
/// Two closures may run at once if a leader is paused past its session:
/// the old one finds its guard's loss signal fired when it resumes, and its
/// writes fenced with the guard's token (or through the lock's fenced
/// writes) are refused. Do not rely on the closure having stopped; rely on
/// the fence.
pub type LeaderSelector = recipes_core::LeaderSelector<ZkSelector>;

/// The ZooKeeper side of a [`LeaderSelector`].
#[derive(Debug)]
pub struct ZkSelector {
    client: ZkClient,
    driver: NodeDriver,
    id: String,
}

impl SelectorBackend for ZkSelector {
    type Guard = Leadership;

    fn name(&self) -> &str {
        &self.driver.contender.dir
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn contend(&self, closing: &LossSignal) -> Result<Option<Leadership>> {
        let driver = self.driver.clone();
        let closing = closing.clone();
        let acquired =
            self.client
                .runtime()
                .call_until("queue for leadership", None, async move {
                    tokio::select! {
                        r = driver.acquire(None) => r,
                        _ = closing.fired() => Ok(None),
                    }
                })?;
        Ok(acquired.map(|a| Leadership::from_lease(ZkNodeLease::held(self.client.clone(), a))))
    }

    fn trigger(guard: &Leadership) -> &LossTrigger {
        guard.lease().trigger()
    }

    fn token(guard: &Leadership) -> FencingToken {
        guard.token()
    }

    fn release(guard: Leadership) -> Result<()> {
        guard.resign()
    }

    fn participants(&self) -> Result<Vec<Participant>> {
        participants(&self.client, &self.driver.contender.dir)
    }
}

impl ZkClient {
    /// A leader selector at `path` for participant `id` (Curator's
    /// `LeaderSelector` layout: its mutex names). Call
    /// [`start`](recipes_core::LeaderSelector::start) with the closure to
    /// run while leading.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](recipes_core::Error::InvalidArgument) for
    /// a bad path or an empty id.
    pub fn leader_selector(&self, path: &str, id: &str) -> Result<LeaderSelector> {
        Ok(LeaderSelector::from_backend(ZkSelector {
            client: self.clone(),
            driver: NodeDriver::new(self, contender("selector", path, id, "lock-")?),
            id: id.to_owned(),
        }))
    }
}
