//! The engine's second shape, written once for every store: **wait until
//! a condition on the store holds**. A store supplies its session epochs
//! and a change notification armed by each read (a ZooKeeper watch, an
//! etcd watch, a PostgreSQL `NOTIFY`, a Redis pub/sub message — a poll
//! only where the store has none); the engine owns the loop: the
//! deadline, reconnect backoff, epoch loss and the cleanup of what a
//! recipe created for the wait (see [`gather`](super::gather)).
//!
//! ```text
//!   Barrier::wait ─────────┐
//!   DoubleBarrier::enter ──┼──► wait_until(store, condition, deadline)
//!   Member::leave ─────────┘        epoch · check (read + arm) · changed
//! ```

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::contend::passed;
use crate::backoff::Backoff;
use crate::error::Result;
use crate::loss::LossSignal;

/// What every store supplies to the wait shape: session epochs and change
/// notifications. A recipe's own reads and writes are in its own trait
/// ([`BarrierStore`](crate::store::BarrierStore),
/// [`DoubleBarrierStore`](crate::store::DoubleBarrierStore)); none of
/// them loops, backs off or looks at a deadline.
pub trait WaitStore: Send + Sync + 'static {
    /// A session epoch: what the recipe creates lives under it, and the
    /// notifications a read arms fire within it.
    type Epoch: Send + Sync + 'static;
    /// A change notification a read armed.
    type Watch: Send + 'static;

    /// The recipe's name (path or key).
    fn name(&self) -> &str;

    /// Run `task` on the client's runtime without blocking (cleanups run
    /// there so that they finish when a caller's future is dropped).
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static);

    /// How long one request may take.
    fn rpc_timeout(&self) -> Duration;

    /// A live epoch, waiting for the session if need be.
    fn epoch(&self) -> impl Future<Output = Result<Self::Epoch>> + Send;

    /// Fires when `epoch` is lost.
    fn epoch_signal(&self, epoch: &Self::Epoch) -> LossSignal;

    /// Resolve when what `watch` was armed on may have changed. The engine
    /// reads again; a spurious wake-up costs one read.
    fn changed(
        &self,
        epoch: &Self::Epoch,
        watch: Self::Watch,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// What one check of a condition found.
#[derive(Debug)]
pub enum Check<T, W> {
    /// It holds: the wait ends with this.
    Holds(T),
    /// Not yet: wait for this notification, then check again.
    Wait(W),
    /// What the wait stands on is gone (our entry vanished): take a new
    /// epoch and check again.
    Restart,
}

/// A condition on the store, checked under an epoch: one read that also
/// arms the notification of the next change.
pub trait Condition<S: WaitStore>: Send {
    /// What the wait ends with.
    type Out: Send;

    /// Read and decide.
    fn check(
        &mut self,
        store: &S,
        epoch: &S::Epoch,
    ) -> impl Future<Output = Result<Check<Self::Out, S::Watch>>> + Send;
}

/// Wait until `condition` holds (`Some`) or `deadline` passes (`None`).
///
/// The first check always runs, so a timed wait of zero on a condition
/// that holds succeeds. Between checks the engine waits for the
/// notification the last check armed, the epoch's loss (then it checks
/// again under a new epoch) or the deadline. Retryable errors are retried
/// with [`Backoff::RETRY`] until the deadline; a check still stuck
/// [`rpc_timeout`](WaitStore::rpc_timeout) after the deadline is cut off.
/// Dropping the future abandons the wait; the store keeps nothing of a
/// check (its notifications end with the future or the epoch).
///
/// # Errors
///
/// What the store returns that cannot be retried, or a retryable error
/// once the deadline has passed.
pub async fn wait_until<S: WaitStore, C: Condition<S>>(
    store: &S,
    condition: &mut C,
    deadline: Option<Instant>,
) -> Result<Option<C::Out>> {
    let hard = deadline.and_then(|d| d.checked_add(store.rpc_timeout()));
    let waited = async {
        let mut backoff = Backoff::RETRY;
        loop {
            let epoch = match store.epoch().await {
                Ok(epoch) => epoch,
                Err(e) if e.is_retryable() && !passed(deadline) => {
                    log::debug!("wait {}: no epoch: {e}; retrying", store.name());
                    backoff.pause_within(deadline).await;
                    continue;
                }
                Err(_) if passed(deadline) => return Ok(None),
                Err(e) => return Err(e),
            };
            let lost = store.epoch_signal(&epoch);
            match under_epoch(store, condition, &epoch, &lost, deadline, &mut backoff).await? {
                Some(out) => return Ok(Some(out)),
                None if passed(deadline) => return Ok(None),
                None => {
                    log::debug!("wait {}: checking again under a new epoch", store.name());
                    backoff.pause_within(deadline).await;
                }
            }
        }
    };
    match hard {
        Some(hard) => tokio::time::timeout_at(hard, waited)
            .await
            .unwrap_or(Ok(None)),
        None => waited.await,
    }
}

/// Checks under one epoch: `Some` when the condition holds, `None` when
/// the epoch ended, the check asked to restart or the deadline passed.
async fn under_epoch<S: WaitStore, C: Condition<S>>(
    store: &S,
    condition: &mut C,
    epoch: &S::Epoch,
    lost: &LossSignal,
    deadline: Option<Instant>,
    backoff: &mut Backoff,
) -> Result<Option<C::Out>> {
    loop {
        if lost.is_lost() {
            return Ok(None);
        }
        let watch = match condition.check(store, epoch).await {
            Ok(Check::Holds(out)) => return Ok(Some(out)),
            Ok(Check::Restart) => return Ok(None),
            Ok(Check::Wait(watch)) => watch,
            Err(e) if e.is_retryable() && !passed(deadline) => {
                log::debug!("wait {}: check failed: {e}; retrying", store.name());
                backoff.pause_within(deadline).await;
                continue;
            }
            Err(_) if lost.is_lost() => return Ok(None),
            Err(e) => return Err(e),
        };
        if passed(deadline) {
            return Ok(None);
        }
        let until = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        // Biased, as the contend loop: a seed replays one schedule.
        tokio::select! {
            biased;
            changed = store.changed(epoch, watch) => match changed {
                Ok(()) => backoff.reset(),
                Err(e) if e.is_retryable() => {
                    log::debug!("wait {}: notification failed: {e}; reading again", store.name());
                    backoff.pause_within(deadline).await;
                }
                Err(_) if lost.is_lost() => return Ok(None),
                Err(e) => return Err(e),
            },
            _ = lost.fired() => return Ok(None),
            () = until => return Ok(None),
        }
    }
}

/// Run a one-shot idempotent request under a live epoch, retried after a
/// retryable failure until [`rpc_timeout`](WaitStore::rpc_timeout)
/// passes: a barrier's `set` and `remove`.
///
/// # Errors
///
/// The request's last error, or [`Error::Timeout`](crate::Error::Timeout).
pub async fn once<S, T, F, Fut>(store: &S, what: &str, mut request: F) -> Result<T>
where
    S: WaitStore,
    F: FnMut(S::Epoch) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let timeout = store.rpc_timeout();
    let deadline = Instant::now() + timeout;
    let sending = async {
        let mut backoff = Backoff::RETRY;
        loop {
            let tried = match store.epoch().await {
                Ok(epoch) => request(epoch).await,
                Err(e) => Err(e),
            };
            let e = match tried {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            // Idempotent: a lost reply is sent again.
            let again = e.is_retryable() || matches!(e, crate::Error::Indeterminate { .. });
            let pause = backoff.next_pause();
            if !again || Instant::now() + pause >= deadline {
                return Err(e);
            }
            log::debug!("{what} failed: {e}; retrying");
            tokio::time::sleep(pause).await;
        }
    };
    crate::retry::within(what, timeout, sending).await
}
