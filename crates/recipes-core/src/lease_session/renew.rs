//! The renewal loop of a lease session: core's [`renew_on`] over the
//! store's renewal stream (one renewal every TTL/3), the stream re-opened
//! when it breaks, the lease revoked after a loss.

use std::sync::Arc;
use std::time::Duration;

use super::{LeaseSession, LeaseStore, Opened};
use crate::backoff::Backoff;
use crate::lease::LossPolicy;
use crate::loss::LossReason;
use crate::owned::AUDIT_EVERY;
use crate::renewal::{renew_on, StreamEnd};
use crate::retry::within;

/// The shortest renewal interval, whatever the TTL.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The first pause before re-opening a broken stream.
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// Renews the lease until the session is stopped or lost.
///
/// A stream that broke is opened again after a short pause, and renews at
/// once if opening it renewed nothing: a store that fails a renewal or two
/// in a row (a restart, a reset connection) costs no lease while it comes
/// back before the deadline. A renewal unanswered for an interval (a third
/// of the TTL) makes the stream stuck (its server may be cut off; another
/// may answer), with a third of the TTL left to renew on another.
pub(super) async fn renew<S: LeaseStore>(s: Arc<LeaseSession<S>>) {
    let interval = (s.ttl / 3).max(MIN_INTERVAL);
    let stuck_after = s.rpc_timeout.min(interval);
    // Never wait longer than a fraction of the TTL to re-open a stream.
    let max_pause = (s.ttl / 6).max(FIRST_RETRY_PAUSE);
    let mut backoff = Backoff::new(FIRST_RETRY_PAUSE, max_pause);
    // The lease was just granted (or acknowledged): the first renewal is
    // due an interval from now.
    let mut broke = false;
    // The audits' clock, kept across re-opened streams: a stream that
    // breaks more often than an audit is due must not put it off for good.
    let every = interval * AUDIT_EVERY;
    let mut audit_due = S::AUDITS.then(|| {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick
    });
    loop {
        if s.stop.is_stopped() {
            return;
        }
        if s.epoch.is_lost() {
            return after_loss(&s).await;
        }
        let Ok(store) = s.store() else { return };
        let sent_at = s.epoch.now();
        let open_for = s.rpc_timeout.min(interval * 2);
        let opening = within(
            "open renewals",
            open_for,
            store.renewals(s.id, s.rpc_timeout),
        );
        let opened = tokio::select! {
            r = opening => r,
            () = s.stop.stopped() => return,
        };
        let (mut stream, first) = match opened {
            Ok(Opened::Renewed(stream)) => {
                s.epoch.acknowledged(sent_at, s.ttl);
                (stream, interval)
            }
            Ok(Opened::Ready(stream)) if broke => (stream, backoff.next_pause()),
            Ok(Opened::Ready(stream)) => (stream, interval),
            Ok(Opened::Gone) => {
                log::info!("[{}] the lease is gone in the store", s.label);
                s.epoch.fire(LossReason::Revoked);
                return;
            }
            Err(e) => {
                log::debug!("[{}] renewal stream not opened: {e}", s.label);
                if s.policy == LossPolicy::OnDisconnect {
                    return disconnected(&s).await;
                }
                tokio::select! {
                    () = backoff.pause() => {}
                    () = s.stop.stopped() => return,
                }
                continue;
            }
        };
        let acknowledged = s.epoch.last_acknowledged_send();
        let end = renew_on(
            &s.epoch,
            &s.label,
            &mut stream,
            (first, interval),
            stuck_after,
            &s.stop,
        );
        // The audits run while renewals do (never when the loop ended).
        let end = tokio::select! {
            end = end => end,
            never = audits(&s, &store, audit_due.as_mut()) => match never {},
        };
        // Pauses grow while renewals keep failing, and start small again
        // once one was acknowledged.
        if s.epoch.last_acknowledged_send() != acknowledged {
            backoff.reset();
        }
        match end {
            StreamEnd::Broken if s.policy == LossPolicy::OnDisconnect => {
                return disconnected(&s).await
            }
            StreamEnd::Broken => broke = true,
            StreamEnd::Over if s.epoch.is_lost() => return after_loss(&s).await,
            StreamEnd::Over => return,
        }
    }
}

/// At each tick of `due` (every [`AUDIT_EVERY`] renewal intervals) while
/// the lease lives, the store's [`audit`](LeaseStore::audit) of its
/// entries, in a task of its own; never resolves (nothing at all for a
/// store that does not audit: no `due`).
async fn audits<S: LeaseStore>(
    s: &LeaseSession<S>,
    store: &S,
    due: Option<&mut tokio::time::Interval>,
) -> std::convert::Infallible {
    if let Some(tick) = due {
        loop {
            tick.tick().await;
            if !s.epoch.is_lost() {
                s.handle.spawn(store.audit(s.id, s.rpc_timeout));
            }
        }
    }
    std::future::pending().await
}

/// The renewal stream broke (or could not be opened) under
/// [`LossPolicy::OnDisconnect`]: the lease is lost at once, and revoked so
/// that its entries go as soon as the store answers again.
async fn disconnected<S: LeaseStore>(s: &LeaseSession<S>) {
    if s.stop.is_stopped() {
        return;
    }
    log::info!("[{}] disconnected; the loss policy makes it loss", s.label);
    s.end(LossReason::Disconnected).await;
}

/// The epoch is lost (its deadline passed without an acknowledgement): the
/// lease may still live in the store with our entries, blocking others
/// until it expires. Revoke it; orphaned sessions are left to expire, as
/// asked.
async fn after_loss<S: LeaseStore>(s: &LeaseSession<S>) {
    if s.stop.is_stopped() {
        return;
    }
    log::info!("[{}] session lost; revoking its lease", s.label);
    s.end(LossReason::DeadlineExpired).await;
}

#[cfg(test)]
#[path = "renew_tests.rs"]
mod tests;
