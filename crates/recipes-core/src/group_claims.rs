//! The member ids this client holds, by group ([`Claims`]): a join of an
//! id that a membership of this same client holds, or is joining with, is
//! refused at once, before anything is sent. The store cannot tell two
//! memberships of one session apart: a join whose first try failed before
//! its create was sent would find the other's member on its retry, take
//! it for its own (a create whose reply was lost), and the two would share
//! one entry — releasing either would remove the other's member.
//!
//! A membership's claim ends when its member's removal ended (a drop's
//! removal in the background, a release's leave), or when its loss
//! fired: a client may join with the id again after a loss while the lost
//! membership lives. What is left open: a release whose leave was not
//! confirmed in time goes on in the background without the claim, and on
//! ZooKeeper a loss may leave the session, and our member, in place; a
//! join of the id in those windows whose first try fails before it is
//! sent may still take that member for its own (the later removal then
//! deletes it, and the new membership is told it is lost).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::loss::LossSignal;
use crate::runtime::Runtime;

/// The ids the client's memberships hold, by (group, id): each with the
/// claim's serial and, once joined, its membership's loss signal (a claim
/// whose membership was lost no longer holds the id).
pub(crate) type Claims = Mutex<HashMap<(String, String), Claimed>>;

/// A claim in its client's bookkeeping.
pub(crate) struct Claimed {
    serial: u64,
    lost: Option<LossSignal>,
}

/// Tells claims apart, so that a lost membership's late drop never
/// removes the claim of the join that replaced it.
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// Our claim of an id in a group, held by a join and then by its
/// membership; dropped, the id is free for this client again.
pub(crate) struct Claim {
    runtime: Runtime,
    key: (String, String),
    serial: u64,
}

impl Claim {
    /// Claim `id` in `group`; `None` when a membership of this client holds
    /// it (not lost) or is joining with it.
    pub(crate) fn take(runtime: &Runtime, group: &str, id: &str) -> Option<Claim> {
        let key = (group.to_owned(), id.to_owned());
        let mut claims = runtime.claims().lock();
        if claims
            .get(&key)
            .is_some_and(|c| !c.lost.as_ref().is_some_and(LossSignal::is_lost))
        {
            return None;
        }
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        claims.insert(key.clone(), Claimed { serial, lost: None });
        Some(Claim {
            runtime: runtime.clone(),
            key,
            serial,
        })
    }

    /// Our join succeeded: the claim lasts while `lost` has not fired.
    pub(crate) fn joined(&self, lost: &LossSignal) {
        let mut claims = self.runtime.claims().lock();
        if let Some(c) = claims
            .get_mut(&self.key)
            .filter(|c| c.serial == self.serial)
        {
            c.lost = Some(lost.clone());
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claims = self.runtime.claims().lock();
        if claims
            .get(&self.key)
            .is_some_and(|c| c.serial == self.serial)
        {
            claims.remove(&self.key);
        }
    }
}
