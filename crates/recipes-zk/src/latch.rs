//! `LeaderLatch`: Curator's latch layout, with events and fences.
//!
//! Layout: `<path>/_c_<uuid>-latch-<seq10>`, data = the participant id. The
//! participant whose node is first in the queue leads; the others watch
//! their predecessor. Leadership is held while our node exists under our
//! current session and the session's lease deadline has not passed. After
//! any loss the latch starts over with a new node: it never regains
//! leadership on an old one. The latch is a candidate of the election at
//! the same path ([`ZkClient::election`]), with its id as the value.

use recipes_core::Result;

use crate::client::ZkClient;
use crate::election::ZkElection;
use crate::names::LATCH;

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
pub type LeaderLatch = recipes_core::LeaderLatch<ZkElection>;

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
        LeaderLatch::new(ZkElection::new(self, path, LATCH)?, id)
    }
}
