//! Renewing a session's lease on a stream: one renewal every interval,
//! replies matched to send times first-in first-out (a server answers the
//! requests of one stream in order, or ends it), and each acknowledged one
//! moving the [`SessionLease`] deadline to its send time plus the lease it
//! grants. The store opens the stream and re-opens it when it breaks.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::clock::BootInstant;
use crate::error::Result;
use crate::lease::SessionLease;
use crate::loss::LossReason;

/// What the server answered to one renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Renewed: the lease now runs this long from the request's send time.
    Granted(Duration),
    /// The lease is gone on the server.
    Gone,
}

/// A store's renewal stream.
pub trait RenewalStream: Send {
    /// Send one renewal.
    fn send(&mut self) -> impl Future<Output = Result<()>> + Send;

    /// The next reply, in the order the renewals were sent. An error means
    /// the stream broke or ended. Cancel-safe.
    fn reply(&mut self) -> impl Future<Output = Result<Renewal>> + Send;
}

/// How a renewal stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// Broken, or stuck: open another.
    Broken,
    /// Renewals end: stopped, or the lease is lost.
    Over,
}

/// Tells a session's renewals to stop (the lease is orphaned or revoked).
/// One task waits on it: the renewal loop.
#[derive(Debug, Default)]
pub struct StopFlag {
    stopped: AtomicBool,
    notify: Notify,
}

impl StopFlag {
    /// Stop; `true` the first time.
    pub fn stop(&self) -> bool {
        let first = !self.stopped.swap(true, Ordering::SeqCst);
        self.notify.notify_one();
        first
    }

    /// Whether [`stop`](StopFlag::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Resolves once stopped (at once if it was, unless an earlier wait
    /// already saw it).
    pub async fn stopped(&self) {
        self.notify.notified().await;
    }
}

/// Send a renewal on `stream` every `interval`, the first `first` from
/// now, and feed the replies to `lease`, until the stream breaks, is stuck
/// (its oldest renewal went unanswered for `stuck_after`: its server may
/// be cut off, another may answer), `stop` is set, or the lease is lost (a
/// [`Renewal::Gone`] fires it with [`LossReason::Revoked`]).
pub async fn renew_on<R: RenewalStream>(
    lease: &SessionLease,
    label: &str,
    stream: &mut R,
    (first, interval): (Duration, Duration),
    stuck_after: Duration,
    stop: &StopFlag,
) -> StreamEnd {
    let mut sent: VecDeque<BootInstant> = VecDeque::new();
    let mut tick = tokio::time::interval_at(Instant::now() + first, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // When the oldest renewal unanswered becomes stuck.
        let stuck_in = sent
            .front()
            .map(|&oldest| (oldest + stuck_after).saturating_duration_since(lease.now()));
        let stuck = async move {
            match stuck_in {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        // Biased: a reply that came is counted before the stream is
        // judged stuck.
        tokio::select! {
            biased;
            () = stop.stopped() => return StreamEnd::Over,
            reply = stream.reply() => match reply {
                Ok(Renewal::Gone) => {
                    log::info!("[{label}] renewal reply says the lease is gone");
                    lease.fire(LossReason::Revoked);
                    return StreamEnd::Over;
                }
                Ok(Renewal::Granted(granted)) => match sent.pop_front() {
                    Some(sent_at) => {
                        lease.acknowledged(sent_at, granted);
                    }
                    None => log::warn!("[{label}] a renewal reply without a request"),
                },
                Err(e) => {
                    log::debug!("[{label}] renewal stream ended: {e}");
                    return StreamEnd::Broken;
                }
            },
            () = stuck => {
                log::debug!("[{label}] renewal unanswered for {stuck_after:?}; re-opening");
                return StreamEnd::Broken;
            }
            _ = tick.tick() => {
                if stop.is_stopped() || lease.is_lost() {
                    return StreamEnd::Over;
                }
                sent.push_back(lease.now());
                if let Err(e) = stream.send().await {
                    log::debug!("[{label}] renewal send failed: {e}");
                    return StreamEnd::Broken;
                }
            }
        }
    }
}
