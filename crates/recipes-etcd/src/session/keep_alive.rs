//! The keep-alive loop of a session: core's [`renew_on`] over
//! etcd-client's keep-alive stream (one request every TTL/3), the stream
//! re-opened when it breaks, the lease revoked after a loss.

use std::sync::Arc;
use std::time::Duration;

use recipes_core::{renew_on, Backoff, LossReason, Renewal, RenewalStream, Result, StreamEnd};

use super::{is_lease_not_found, Session};
use crate::rpc::from_etcd;

/// The shortest keep-alive interval, whatever the TTL.
const MIN_KEEP_ALIVE_INTERVAL: Duration = Duration::from_millis(100);
/// The first pause before re-opening a broken keep-alive stream.
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// etcd-client's keep-alive stream as core's renewal stream.
struct KeepAlive(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream);

impl RenewalStream for KeepAlive {
    async fn send(&mut self) -> Result<()> {
        self.0
            .keep_alive()
            .await
            .map_err(|e| from_etcd("send a keep-alive", e))
    }

    async fn reply(&mut self) -> Result<Renewal> {
        match self.1.message().await {
            Ok(Some(reply)) if reply.ttl() <= 0 => Ok(Renewal::Gone),
            Ok(Some(reply)) => Ok(Renewal::Granted(Duration::from_secs(
                reply.ttl().unsigned_abs(),
            ))),
            Ok(None) => Err(recipes_core::Error::ConnectionLoss),
            Err(e) => Err(from_etcd("keep-alive", e)),
        }
    }
}

/// Keeps the lease alive until the session is stopped or lost.
pub(super) async fn keep_alive(s: Arc<Session>) {
    let interval = (s.ttl / 3).max(MIN_KEEP_ALIVE_INTERVAL);
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
        let Ok(etcd) = s.etcd() else { return };
        let mut leases = etcd.lease_client();
        // etcd-client sends the first request itself and swallows its reply
        // (failing if its TTL is 0): count it with the granted TTL, which is
        // what every reply of this lease carries.
        let sent_at = s.epoch.now();
        let opened = tokio::select! {
            r = tokio::time::timeout(s.rpc_timeout, leases.keep_alive(s.lease)) => r,
            () = s.stop.stopped() => return,
        };
        match opened {
            Ok(Ok((keeper, stream))) => {
                s.epoch.acknowledged(sent_at, s.ttl);
                backoff.reset();
                // A stream whose oldest request went unanswered for an RPC
                // timeout is stuck (its member may be cut off): another
                // stream may reach another member.
                let mut stream = KeepAlive(keeper, stream);
                let end = renew_on(
                    &s.epoch,
                    &s.label,
                    &mut stream,
                    interval,
                    s.rpc_timeout,
                    &s.stop,
                );
                match end.await {
                    StreamEnd::Broken => continue,
                    StreamEnd::Over if s.epoch.is_lost() => return after_loss(&s).await,
                    StreamEnd::Over => return,
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
            () = s.stop.stopped() => return,
        }
    }
}

/// The epoch is lost (its deadline passed without an acknowledgement): the
/// lease may still live on the server with our keys, blocking others until
/// it expires. Revoke it; orphaned sessions are left to expire, as asked.
async fn after_loss(s: &Session) {
    if s.stop.is_stopped() {
        return;
    }
    log::info!("[{}] session lost; revoking its lease", s.label);
    s.end(LossReason::DeadlineExpired).await;
}
