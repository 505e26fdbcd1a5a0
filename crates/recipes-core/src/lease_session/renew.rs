//! The renewal loop of a lease session: core's [`renew_on`] over the
//! store's renewal stream (one renewal every TTL/3), the stream re-opened
//! when it breaks, the lease revoked after a loss.

use std::sync::Arc;
use std::time::Duration;

use super::{LeaseSession, LeaseStore, Opened};
use crate::backoff::Backoff;
use crate::lease::LossPolicy;
use crate::loss::LossReason;
use crate::renewal::{renew_on, StreamEnd};
use crate::retry::within;

/// The shortest renewal interval, whatever the TTL.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The first pause before re-opening a broken stream.
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// Renews the lease until the session is stopped or lost.
pub(super) async fn renew<S: LeaseStore>(s: Arc<LeaseSession<S>>) {
    let interval = (s.ttl / 3).max(MIN_INTERVAL);
    // Never wait longer than a fraction of the TTL to re-open a stream.
    let max_pause = (s.ttl / 6).max(FIRST_RETRY_PAUSE);
    let mut backoff = Backoff::new(FIRST_RETRY_PAUSE, max_pause);
    loop {
        if s.stop.is_stopped() {
            return;
        }
        if s.epoch.is_lost() {
            return after_loss(&s).await;
        }
        let Ok(store) = s.store() else { return };
        let sent_at = s.epoch.now();
        let opening = within(
            "open renewals",
            s.rpc_timeout,
            store.renewals(s.id, s.rpc_timeout),
        );
        let opened = tokio::select! {
            r = opening => r,
            () = s.stop.stopped() => return,
        };
        let mut stream = match opened {
            Ok(Opened::Renewed(stream)) => {
                s.epoch.acknowledged(sent_at, s.ttl);
                stream
            }
            Ok(Opened::Ready(stream)) => stream,
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
        backoff.reset();
        // A stream whose oldest renewal went unanswered for an RPC timeout
        // is stuck (its server may be cut off): another may reach another.
        let end = renew_on(
            &s.epoch,
            &s.label,
            &mut stream,
            interval,
            s.rpc_timeout,
            &s.stop,
        );
        match end.await {
            StreamEnd::Broken if s.policy == LossPolicy::OnDisconnect => {
                return disconnected(&s).await
            }
            StreamEnd::Broken => {}
            StreamEnd::Over if s.epoch.is_lost() => return after_loss(&s).await,
            StreamEnd::Over => return,
        }
    }
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
