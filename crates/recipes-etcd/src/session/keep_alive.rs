//! The keep-alive loop of a session: one request every TTL/3 on
//! etcd-client's keep-alive stream, replies matched to send times in order,
//! the stream re-opened when it breaks, the lease revoked after a loss.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::{Backoff, BootInstant, LossReason};
use tokio::time::Instant;

use super::{is_lease_not_found, Session};

/// The shortest keep-alive interval, whatever the TTL.
const MIN_KEEP_ALIVE_INTERVAL: Duration = Duration::from_millis(100);
/// The first pause before re-opening a broken keep-alive stream.
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// How one keep-alive stream ended.
enum StreamEnd {
    /// Broken or silent: open another.
    Broken,
    /// The session is over (stopped, lost): keep-alives end.
    Over,
}

/// Keeps the lease alive until the session is stopped or lost.
pub(super) async fn keep_alive(s: Arc<Session>) {
    let interval = (s.ttl / 3).max(MIN_KEEP_ALIVE_INTERVAL);
    // Never wait longer than a fraction of the TTL to re-open a stream.
    let max_pause = (s.ttl / 6).max(FIRST_RETRY_PAUSE);
    let mut backoff = Backoff::new(FIRST_RETRY_PAUSE, max_pause);
    loop {
        if s.stopped.load(Ordering::SeqCst) {
            return;
        }
        if s.epoch.is_lost() {
            return after_loss(&s).await;
        }
        let Ok(etcd) = s.etcd() else { return };
        let mut leases = etcd.lease_client();
        // etcd-client sends the first request itself and swallows its reply
        // (failing if its TTL is 0): count it with the granted TTL, which is
        // what every reply of this lease carries.
        let sent_at = s.epoch.now();
        let opened = tokio::select! {
            r = tokio::time::timeout(s.rpc_timeout, leases.keep_alive(s.lease)) => r,
            _ = s.stop.notified() => return,
        };
        match opened {
            Ok(Ok((keeper, stream))) => {
                s.epoch.acknowledged(sent_at, s.ttl);
                backoff.reset();
                match run_stream(&s, keeper, stream, interval).await {
                    StreamEnd::Broken => continue,
                    StreamEnd::Over => {
                        if s.epoch.is_lost() {
                            return after_loss(&s).await;
                        }
                        return;
                    }
                }
            }
            Ok(Err(e)) if is_lease_not_found(&e) => {
                log::info!("[{}] the lease is gone on the server", s.label);
                s.epoch.fire(LossReason::Revoked);
                return;
            }
            Ok(Err(e)) => log::debug!("[{}] keep-alive stream failed: {e}", s.label),
            Err(_) => log::debug!(
                "[{}] keep-alive stream not opened within {:?}",
                s.label,
                s.rpc_timeout
            ),
        }
        tokio::select! {
            () = backoff.pause() => {}
            _ = s.stop.notified() => return,
        }
    }
}

/// Send a keep-alive every `interval` on one stream and match the replies
/// to their send times in order.
async fn run_stream(
    s: &Session,
    mut keeper: etcd_client::LeaseKeeper,
    mut stream: etcd_client::LeaseKeepAliveStream,
    interval: Duration,
) -> StreamEnd {
    let mut sent: VecDeque<BootInstant> = VecDeque::new();
    let mut tick = tokio::time::interval_at(Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = s.stop.notified() => return StreamEnd::Over,
            _ = tick.tick() => {
                if s.stopped.load(Ordering::SeqCst) || s.epoch.is_lost() {
                    return StreamEnd::Over;
                }
                let now = s.epoch.now();
                // A stream whose oldest request went unanswered for an RPC
                // timeout is stuck (its member may be cut off): open another,
                // which may reach another member.
                if sent.front().is_some_and(|&oldest| now - oldest > s.rpc_timeout) {
                    log::debug!("[{}] keep-alive unanswered for {:?}; re-opening the stream",
                        s.label, s.rpc_timeout);
                    return StreamEnd::Broken;
                }
                sent.push_back(now);
                if let Err(e) = keeper.keep_alive().await {
                    log::debug!("[{}] keep-alive send failed: {e}", s.label);
                    return StreamEnd::Broken;
                }
            }
            reply = stream.message() => match reply {
                Ok(Some(reply)) => {
                    let sent_at = sent.pop_front();
                    if reply.ttl() <= 0 {
                        log::info!("[{}] keep-alive reply says the lease is gone", s.label);
                        s.epoch.fire(LossReason::Revoked);
                                return StreamEnd::Over;
                    }
                    match sent_at {
                        Some(sent_at) => {
                            let ttl = Duration::from_secs(reply.ttl().unsigned_abs());
                            s.epoch.acknowledged(sent_at, ttl);
                        }
                        None => log::warn!("[{}] a keep-alive reply without a request", s.label),
                    }
                }
                Ok(None) => {
                    log::debug!("[{}] keep-alive stream closed by the server", s.label);
                    return StreamEnd::Broken;
                }
                Err(e) => {
                    log::debug!("[{}] keep-alive stream broke: {e}", s.label);
                    return StreamEnd::Broken;
                }
            }
        }
    }
}

/// The epoch is lost (its deadline passed without an acknowledgement): the
/// lease may still live on the server with our keys, blocking others until
/// it expires. Revoke it, trying for a TTL; orphaned sessions are left to
/// expire, as asked.
async fn after_loss(s: &Session) {
    if s.stopped.load(Ordering::SeqCst) {
        return;
    }
    log::info!("[{}] session lost; revoking its lease", s.label);
    let give_up = Instant::now() + s.ttl;
    let mut backoff = Backoff::RETRY;
    while let Err(e) = s.revoke_once().await {
        if Instant::now() >= give_up {
            log::debug!(
                "[{}] revoke failed: {e}; the server expires the lease",
                s.label
            );
            return;
        }
        backoff.pause().await;
    }
}
