//! Undoing what an acquisition left in the store, on every way out but a
//! win, written once for both shapes of the engine: a queue entry to
//! remove ([`contend`](super::contend)), a taken slot to give back
//! ([`take`](super::take)).

use std::future::Future;
use std::time::Duration;

/// Where the undo runs and what it is: a driver, seen by one shape.
pub(super) trait Undoer {
    /// What names what is to be undone.
    type Ticket: Send + 'static;

    /// Run `task` on the driver's runtime.
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static);

    /// Undo what `ticket` names.
    fn undo(ticket: Self::Ticket) -> impl Future<Output = ()> + Send + 'static;
}

/// Undoes its ticket unless disarmed, always from a task on the driver's
/// runtime, so that the undo finishes even when the acquisition's future
/// is dropped (a cut-off attempt, a cancelled caller) while it runs.
/// [`run`](Undo::run) also waits for it, on a timeout or a restart, so
/// that the next try finds it done; an error only drops it.
pub(super) struct Undo<U: Undoer> {
    by: U,
    ticket: Option<U::Ticket>,
}

impl<U: Undoer> Undo<U> {
    pub(super) fn new(by: U, ticket: U::Ticket) -> Undo<U> {
        Undo {
            by,
            ticket: Some(ticket),
        }
    }

    pub(super) fn ticket(&mut self) -> &mut U::Ticket {
        self.ticket
            .as_mut()
            .expect("the ticket is present until it is undone or disarmed")
    }

    pub(super) async fn run(&mut self) {
        self.run_within(None).await;
    }

    /// As [`run`](Undo::run), waiting at most `bound` (`None`: until it is
    /// done): a store that does not answer holds the caller no longer than
    /// that, and the undo goes on meanwhile. Whether it was done in time
    /// (also when the runtime is gone: the session's end undoes it).
    pub(super) async fn run_within(&mut self, bound: Option<Duration>) -> bool {
        let Some(t) = self.ticket.take() else {
            return true;
        };
        let (done, undone) = tokio::sync::oneshot::channel();
        self.by.spawn(async move {
            U::undo(t).await;
            let _ = done.send(());
        });
        match bound {
            None => {
                let _ = undone.await;
                true
            }
            Some(bound) => tokio::time::timeout(bound, undone).await.is_ok(),
        }
    }

    pub(super) fn disarm(&mut self) -> U::Ticket {
        self.ticket
            .take()
            .expect("the ticket is present until it is undone or disarmed")
    }
}

impl<U: Undoer> Drop for Undo<U> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            self.by.spawn(U::undo(t));
        }
    }
}
