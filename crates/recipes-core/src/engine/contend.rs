//! The contend loop, written once: enter our entry, read the queue, wait
//! for the one entry ahead, confirm, and remove our entry on every other
//! way out.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::decide::{decide, Decision};
use super::driver::{ContendDriver, Listing};
use super::stop::{is_stopped, stopped, unless_stopped};
use super::undo::{Undo, Undoer};
use crate::backoff::Backoff;
use crate::error::Result;

/// How one attempt (one entry or slot, one epoch) ended.
pub(super) enum Attempt<W> {
    Won(W),
    TimedOut,
    /// The epoch was lost or our entry vanished: start over.
    Restart,
}

/// One way of contending, as the shared loop ([`run`]) sees it: an epoch,
/// then attempts under it until one wins, times out or must start over.
pub(super) trait Contest: Sync {
    type Epoch: Send;
    type Won: Send;

    /// How long a stuck attempt may run past the deadline.
    fn rpc_timeout(&self) -> Duration;

    /// A live epoch; `None` when the deadline passed first.
    fn epoch(
        &self,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Option<Self::Epoch>>> + Send;

    /// One attempt under `epoch`; its cleanup runs on every way out.
    fn attempt(
        &self,
        epoch: Self::Epoch,
        deadline: Option<Instant>,
        backoff: &mut Backoff,
    ) -> impl Future<Output = Result<Attempt<Self::Won>>> + Send;
}

/// The loop both shapes share: an epoch (retried while none can be had),
/// one attempt under it cut off [`rpc_timeout`](Contest::rpc_timeout)
/// after the deadline, and a new attempt under a new epoch after a
/// restart, until a win or the deadline.
pub(super) async fn run<C: Contest>(c: C, deadline: Option<Instant>) -> Result<Option<C::Won>> {
    let mut backoff = Backoff::RETRY;
    loop {
        // Nothing is held between attempts: a stop ends it at once. On the
        // heap: a store's epoch can take a deep stack (a lease grant), and
        // held inline it would be copied into each frame that wraps it.
        let Some(epoch) = unless_stopped(Box::pin(c.epoch(deadline))).await else {
            return Ok(None);
        };
        let epoch = match epoch {
            Ok(Some(epoch)) => epoch,
            Ok(None) => return Ok(None),
            // No session yet (an outage, a restart): nothing is held, so
            // try again until the deadline.
            Err(e) if e.is_retryable() && !passed(deadline) => {
                log::debug!("contend: no epoch: {e}; retrying");
                if unless_stopped(backoff.pause_within(deadline))
                    .await
                    .is_none()
                {
                    return Ok(None);
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        let hard = deadline.and_then(|d| d.checked_add(c.rpc_timeout()));
        let one = c.attempt(epoch, deadline, &mut backoff);
        let outcome = match hard {
            Some(hard) => match tokio::time::timeout_at(hard, one).await {
                Ok(r) => r?,
                // The attempt was dropped: its cleanup runs in the background.
                Err(_) => Attempt::TimedOut,
            },
            None => one.await?,
        };
        match outcome {
            Attempt::Won(w) => return Ok(Some(w)),
            Attempt::TimedOut => return Ok(None),
            Attempt::Restart if passed(deadline) => return Ok(None),
            Attempt::Restart => {
                log::debug!("contend: starting over");
                if unless_stopped(backoff.pause_within(deadline))
                    .await
                    .is_none()
                {
                    return Ok(None);
                }
            }
        }
    }
}

/// A [`ContendDriver`] as a [`Contest`], and as the [`Undoer`] that
/// removes our entry.
struct Queue<'d, D>(&'d D);

impl<D> Clone for Queue<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D> Copy for Queue<'_, D> {}

impl<D: ContendDriver> Undoer for Queue<'_, D> {
    type Ticket = D::Ticket;

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.spawn(task);
    }

    fn undo(ticket: D::Ticket) -> impl Future<Output = ()> + Send + 'static {
        D::remove(ticket)
    }
}

impl<D: ContendDriver> Contest for Queue<'_, D> {
    type Epoch = D::Epoch;
    type Won = D::Won;

    fn rpc_timeout(&self) -> Duration {
        self.0.rpc_timeout()
    }

    fn epoch(
        &self,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Option<D::Epoch>>> + Send {
        self.0.epoch(deadline)
    }

    fn attempt(
        &self,
        epoch: D::Epoch,
        deadline: Option<Instant>,
        backoff: &mut Backoff,
    ) -> impl Future<Output = Result<Attempt<D::Won>>> + Send {
        attempt(self.0, epoch, deadline, backoff)
    }
}

/// Queue reads this process's engine made, every recipe and client
/// together.
static QUEUE_READS: AtomicU64 = AtomicU64::new(0);

/// How many times this process's engine has read a queue
/// ([`ContendDriver::list`]), over every client and recipe. A release
/// should cost one read — the woken waiter's — however many wait: what
/// the no-herd tests count, and a number worth exporting.
///
/// A slot driver ([`take`](super::take)) has no queue to read: what it
/// counts is a take that waited at the server and was granted — the one
/// waiter a release woke (slices that end without a grant are not
/// counted: they are a steady poll, not a herd).
pub fn queue_reads() -> u64 {
    QUEUE_READS.load(Ordering::Relaxed)
}

/// Count one read (or one woken take).
pub(super) fn count_read() {
    QUEUE_READS.fetch_add(1, Ordering::Relaxed);
}

pub(super) fn passed(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// Contend until ours holds (`Some`) or `deadline` passes (`None`).
///
/// The deadline bounds the *wait* for the entries ahead of ours: the create
/// and the first read always run, as in Curator, so a try-lock of a free
/// lock succeeds. An attempt still stuck in a request
/// [`rpc_timeout`](ContendDriver::rpc_timeout) after the deadline is cut
/// off. After an epoch loss, or when our entry vanishes, the engine removes
/// what is left and starts over with a new entry (never regaining a lease
/// on an old one) until the deadline. Retryable errors of reads and waits
/// are retried with [`Backoff::RETRY`] until the deadline; other errors end
/// the acquisition.
///
/// Dropping the future abandons the acquisition; our entry is removed in
/// the background. Under [`until_stopped`](super::until_stopped) a stop
/// ends it instead: our entry is removed before it answers `Ok(None)`.
///
/// # Errors
///
/// Whatever the driver returns that cannot be retried, or a retryable one
/// once the deadline has passed. Our entry's removal is then handed to the
/// runtime, not awaited: an error often means the store is out of reach,
/// and waiting for the removal would hold the caller as long (and end as a
/// timeout, hiding the error).
pub fn contend<D: ContendDriver>(
    driver: &D,
    deadline: Option<Instant>,
) -> impl Future<Output = Result<Option<D::Won>>> + Send + '_ {
    run(Queue(driver), deadline)
}

async fn attempt<D: ContendDriver>(
    driver: &D,
    epoch: D::Epoch,
    deadline: Option<Instant>,
    backoff: &mut Backoff,
) -> Result<Attempt<D::Won>> {
    let lost = driver.epoch_signal(&epoch);
    let mut cleanup = Undo::new(Queue(driver), driver.ticket(&epoch));
    let (mut entry, mut listing) = match driver.enter(&epoch, cleanup.ticket()).await {
        Ok(entered) => entered,
        // The connection failed under the create, or the epoch ended (the
        // session went): an attempt holds nothing yet, so it removes what
        // may have landed and starts over.
        Err(e) if starts_over(&e, lost.is_lost(), deadline) => {
            log::debug!("contend: entering failed: {e}; starting over");
            cleanup.run().await;
            return Ok(Attempt::Restart);
        }
        // The create may have been applied before it failed: `cleanup`
        // removes it in the background (see `contend`'s errors).
        Err(e) => return Err(e),
    };
    let ours = driver.ours(&entry).clone();
    loop {
        if lost.is_lost() {
            cleanup.run().await;
            return Ok(Attempt::Restart);
        }
        // Stopped (a latch closing): gone from the queue before returning.
        if is_stopped() {
            cleanup.run().await;
            return Ok(Attempt::TimedOut);
        }
        let read = match listing.take() {
            Some(read) => read,
            None => match read_queue(driver, &epoch, &mut entry).await {
                Ok(read) => read,
                Err(e) if e.is_retryable() && !passed(deadline) => {
                    log::debug!("contend: reading the queue failed: {e}; retrying");
                    backoff.pause_within(deadline).await;
                    continue;
                }
                // The loop's top starts over on a new epoch.
                Err(_) if lost.is_lost() => continue,
                Err(e) => return Err(e),
            },
        };
        let role = |id: &D::Id| driver.role(id);
        let ahead = match decide(driver.rule(), &read.contenders, role, &ours) {
            // The read may have taken long enough for the epoch to end.
            Decision::Acquired if lost.is_lost() => continue,
            Decision::Acquired => {
                return match confirm(driver, epoch, &mut cleanup, entry, &read).await {
                    Err(e) if starts_over(&e, lost.is_lost(), deadline) => {
                        log::debug!("contend: confirming failed: {e}; starting over");
                        cleanup.run().await;
                        Ok(Attempt::Restart)
                    }
                    other => other,
                };
            }
            Decision::Gone => {
                log::debug!("contend: our entry {ours:?} vanished");
                cleanup.run().await;
                return Ok(Attempt::Restart);
            }
            Decision::WaitFor(ahead) => ahead.clone(),
        };
        if passed(deadline) {
            cleanup.run().await;
            return Ok(Attempt::TimedOut);
        }
        let until = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        // Biased: branches are polled in this order, not at random, so a
        // schedule replays exactly from its seed (the simulation's tests).
        tokio::select! {
            biased;
            waited = driver.wait(&epoch, &mut entry, &ahead) => match waited {
                Ok(()) => backoff.reset(),
                Err(e) if e.is_retryable() => {
                    log::debug!("contend: waiting for {ahead:?} failed: {e}; reading again");
                    backoff.pause_within(deadline).await;
                }
                Err(_) if lost.is_lost() => {}
                Err(e) => return Err(e),
            },
            _ = lost.fired() => {}
            () = stopped() => {}
            () = until => {
                cleanup.run().await;
                return Ok(Attempt::TimedOut);
            }
        }
    }
}

async fn read_queue<D: ContendDriver>(
    driver: &D,
    epoch: &D::Epoch,
    entry: &mut D::Entry,
) -> Result<Listing<D::Id>> {
    count_read();
    driver.list(epoch, entry).await
}

/// Whether an attempt that failed with `e` starts over with a new entry
/// rather than failing the acquisition: it holds nothing yet, so a failed
/// connection (within the deadline) or an ended epoch costs it only time.
/// A write whose reply was lost (`Indeterminate`) counts as failed: the
/// ticket names the entry, so the removal finds it if it landed.
pub(super) fn starts_over(e: &crate::Error, epoch_lost: bool, deadline: Option<Instant>) -> bool {
    let transient = e.is_retryable() || matches!(e, crate::Error::Indeterminate { .. });
    epoch_lost || (transient && !passed(deadline))
}

async fn confirm<D: ContendDriver>(
    driver: &D,
    epoch: D::Epoch,
    cleanup: &mut Undo<Queue<'_, D>>,
    mut entry: D::Entry,
    read: &Listing<D::Id>,
) -> Result<Attempt<D::Won>> {
    // On an error the caller starts over or drops `cleanup`: the removal
    // then runs in the background.
    match driver.confirm(&epoch, &mut entry, read).await? {
        Some(fence) => {
            let ticket = cleanup.disarm();
            Ok(Attempt::Won(driver.won(epoch, ticket, entry, fence)))
        }
        None => {
            cleanup.run().await;
            Ok(Attempt::Restart)
        }
    }
}
