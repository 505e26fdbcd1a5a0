//! `LeaderSelector`: run a closure while leader (Curator's selector layout,
//! which is its mutex: `<path>/_c_<uuid>-lock-<seq10>`, data = the id).
//!
//! The closure runs on the selector's own thread, never on the runtime. It
//! gets the held [`Leadership`](crate::Leadership) (fence, loss signal, fenced writes, and a
//! `proclaim` that sets our node's data), as on every store; when leadership
//! may be gone — or the selector is closed — the guard's loss signal fires
//! and the closure must stop. After it returns, leadership is released and,
//! with `requeue`, the selector queues again. It is an election whose
//! candidates use the mutex's node names.

use recipes_core::Result;

use crate::client::ZkClient;
use crate::election::ZkElection;
use crate::names::LOCK;

/// Runs a closure while this participant leads (Curator's
/// `LeaderSelector` layout; see [`recipes_core::LeaderSelector`] for the
/// API). The closure gets the held [`Leadership`](crate::Leadership).
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
pub type LeaderSelector = recipes_core::LeaderSelector<ZkElection>;

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
        LeaderSelector::new(ZkElection::new(self, path, LOCK)?, id)
    }
}
