//! A counter's waits on the engine's wait shape
//! ([`wait_until`](crate::engine::wait_until)): a
//! [`CounterWatch`](super::CounterWatch) waits for the next version, the
//! count-down latch for a count of zero. Each check is one read that arms
//! the store's notification ([`CounterBackend::read_armed`]); between
//! checks the waiter holds no thread and sends nothing, until the
//! notification, its epoch's loss or the deadline. The engine owns the
//! deadline, the retries and the epochs; a store supplies the read.

use std::time::Instant;

use super::{CounterBackend, Versioned, WaitEpoch, WaitWatch};
use crate::barrier::blocking;
use crate::engine::{wait_until, Check, Condition};
use crate::error::Result;

/// The counter as read satisfies `holds`.
struct Reads<'b, B, F> {
    backend: &'b B,
    holds: F,
}

impl<B, F> Condition<B::Waits> for Reads<'_, B, F>
where
    B: CounterBackend,
    F: Fn(Versioned) -> bool + Send + Sync,
{
    type Out = Versioned;

    async fn check(
        &mut self,
        _store: &B::Waits,
        epoch: &WaitEpoch<B>,
    ) -> Result<Check<Versioned, WaitWatch<B>>> {
        let (now, watch) = self.backend.read_armed(epoch).await?;
        Ok(if (self.holds)(now) {
            Check::Holds(now)
        } else {
            Check::Wait(watch)
        })
    }
}

/// Block until the counter as read satisfies `holds` (`Some`, what was
/// read) or `deadline` passes (`None`). The first read always happens, so
/// a deadline already passed is a look now.
///
/// # Errors
///
/// As for [`wait_until`](crate::engine::wait_until): what the store
/// returns that cannot be retried.
pub(crate) fn until<B: CounterBackend>(
    backend: &B,
    deadline: Option<Instant>,
    holds: impl Fn(Versioned) -> bool + Send + Sync + 'static,
) -> Result<Option<Versioned>> {
    let b = backend.clone();
    blocking(backend.waits(), "counter wait", deadline, async move {
        let mut reads = Reads { backend: &b, holds };
        let deadline = deadline.map(tokio::time::Instant::from_std);
        wait_until(b.waits(), &mut reads, deadline).await
    })
}
