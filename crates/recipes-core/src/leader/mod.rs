//! The leader latch and the leader selector, written once over the
//! election trait ([`ElectionBackend`](crate::ElectionBackend)): a latch
//! campaigns with its id as the value on the client's runtime; a selector
//! campaigns on its own thread and runs a closure while it leads. The
//! stores export these types under their own names, with what holds under
//! pause and partition there.

mod latch;
mod selector;

pub use latch::LeaderLatch;
pub use selector::LeaderSelector;

use crate::backend::{ElectionBackend, LeaderInfo};
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::loss::{LossReason, LossSignal};

/// What happened to a latch participant's leadership.
///
/// Events arrive on a channel after the fact: under a pause a `Lost` event
/// can come late, so check the `lost` signal of `Gained` (it reads the
/// clock) rather than waiting for `Lost`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LatchEvent {
    /// This participant leads, with this fence, until `lost` fires.
    Gained {
        /// The fencing token of this term.
        token: FencingToken,
        /// Fires when this term may be over.
        lost: LossSignal,
    },
    /// This participant's term ended.
    Lost {
        /// Why.
        reason: LossReason,
    },
    /// Campaigning failed with an error that retrying will not mend by
    /// itself (the name holds another recipe, the credentials or the TLS
    /// setup were refused, the store is out of space). The latch goes on
    /// campaigning, every few seconds, in case an operator mends it; this
    /// event comes once per such stretch of failures.
    Failed {
        /// The first error of the stretch.
        error: Error,
    },
}

/// A participant of a latch or selector as the store shows it at the moment
/// of the read — under partition or pause, possibly no longer so.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Participant {
    /// The participant id (its node's data, or its key's value).
    pub id: String,
    /// Where it lives in the store: its node path (ZooKeeper) or its key
    /// (etcd).
    pub holder: String,
    /// Whether it is first in line: the leader.
    pub is_leader: bool,
}

/// Check a latch or selector participant id (`what` names which): it must
/// not be empty, nor over [`MAX_VALUE_BYTES`](crate::MAX_VALUE_BYTES).
///
/// # Errors
///
/// [`Error::InvalidArgument`] for an empty or oversized id.
pub fn validate_participant_id(what: &str, id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::invalid(format!(
            "a {what} participant id must not be empty; use e.g. the host name"
        )));
    }
    crate::limits::check_value(&format!("{what} participant id"), id.as_bytes())
}

/// The candidates of `election` as participants, first in line first.
fn participants<E: ElectionBackend>(election: &E) -> Result<Vec<Participant>> {
    Ok(election
        .candidates()?
        .into_iter()
        .enumerate()
        .map(|(i, LeaderInfo { holder, value })| Participant {
            id: String::from_utf8_lossy(&value).into_owned(),
            holder,
            is_leader: i == 0,
        })
        .collect())
}
