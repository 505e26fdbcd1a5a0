//! A stop beside the deadline: a latch or a selector being closed stops
//! its campaign, which removes its entry, waits for the store to confirm
//! that, and answers `Ok(None)` as after a deadline — rather than being
//! dropped with the removal left to the background, where others would
//! still list the entry for a moment.
//!
//! The stop reaches the engine as a task-local value of the acquisition's
//! future ([`until_stopped`]), not as a parameter of
//! [`contend`](super::contend): every store's campaign calls the engine
//! with its deadline alone, and each gets the stop without a change of its
//! own. The queue loop looks at it where it looks at its epoch's loss (at
//! the top of each round and in the wait for the entry ahead), and between
//! attempts, where nothing is held; a request in flight is not cut short.
//! The slot loop ([`take`](super::take)), which no election uses, sees it
//! only between attempts.

use std::future::Future;

use crate::loss::LossSignal;

tokio::task_local! {
    static STOP: Option<LossSignal>;
}

/// Run `acquisition` so that the engine in it stops when `stop` fires: the
/// entry of the attempt under way is removed and waited for, and the
/// acquisition answers `Ok(None)` (a win reached first is returned). With
/// `None`, only its deadline ends it.
pub fn until_stopped<F: Future>(
    stop: Option<LossSignal>,
    acquisition: F,
) -> impl Future<Output = F::Output> {
    STOP.scope(stop, acquisition)
}

/// Whether the acquisition being polled is stopped.
pub(super) fn is_stopped() -> bool {
    STOP.try_with(|stop| stop.as_ref().is_some_and(LossSignal::is_lost))
        .unwrap_or(false)
}

/// Resolves when the acquisition being polled is stopped; never if it has
/// no stop.
pub(super) async fn stopped() {
    match STOP.try_with(Option::clone).ok().flatten() {
        Some(stop) => {
            stop.fired().await;
        }
        None => std::future::pending().await,
    }
}

/// `step`, or `None` if the acquisition is stopped first. A step cut short
/// is dropped: only for steps that hold nothing in the store.
pub(super) async fn unless_stopped<T>(step: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        () = stopped() => None,
        done = step => Some(done),
    }
}
