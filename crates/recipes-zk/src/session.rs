//! One ZooKeeper session: its heartbeat, its validity epochs and its state.
//!
//! zookeeper-client hides its own pings and declares a session expired only
//! well after the server may have expired it. So each session times its own
//! small request every `timeout / 4` and feeds the send time of every
//! acknowledged request to the current [`SessionLease`] epoch.
//!
//! Known limit: a follower answers our heartbeat locally and passes the
//! session touch to the leader later, at its next ping (every
//! `tickTime / 2`). So a follower cut off from its leader may acknowledge
//! for a short while (at most until it notices the lost quorum, within
//! `syncLimit × tickTime`), and a follower that crashes right after
//! acknowledging never passes that touch on: the leader then expires the
//! session from an earlier touch, up to about `tickTime / 2` before our
//! deadline (less the rounding up of its expiry to a tick). A
//! `lease_slack` of `tickTime / 2` on the client's builder covers that
//! case on an ensemble.

use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use recipes_core::store::{system_clock, LossTrigger, SessionLease, SharedClock};
use recipes_core::{BootInstant, Error, LossPolicy, LossReason, LossSignal, Result};
use zookeeper_client as zk;

use crate::error::read_error;

/// How a session is doing, as the client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionState {
    /// Connected to a server.
    Connected,
    /// The connection is down; the session may still be alive on the server.
    Disconnected,
    /// The server expired the session. The client starts a new one on next
    /// use; nothing held by the old one comes back.
    Expired,
    /// The client was closed.
    Closed,
}

pub(crate) struct Session {
    zk: zk::Client,
    label: String,
    policy: LossPolicy,
    clock: SharedClock,
    slack: Duration,
    loss_parent: LossTrigger,
    epoch: Mutex<Arc<SessionLease>>,
    // Nodes held by guards of this session. A node whose guard was lost
    // while the session survived (a deadline passed during a disconnect, a
    // pause) is deleted once the session answers again, so it does not
    // block other contenders until the session ends.
    held: Mutex<Vec<(String, LossSignal)>>,
    acls: zk::Acls<'static>,
}

impl Session {
    /// Establish a session; `sent_at` is when the connect request left.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        zk: zk::Client,
        acls: zk::Acls<'static>,
        sent_at: BootInstant,
        policy: LossPolicy,
        slack: Duration,
        loss_parent: LossTrigger,
        handle: &tokio::runtime::Handle,
    ) -> Result<Arc<Session>> {
        let (id, timeout, clock) = (zk.session_id().0, zk.session_timeout(), system_clock());
        let label = format!("session={id:#x}");
        let epoch = SessionLease::start(&label, &loss_parent, clock.clone(), slack)?;
        epoch.acknowledged(sent_at, timeout);
        let states = zk.state_watcher();
        let session = Arc::new(Session {
            zk,
            label,
            policy,
            clock,
            slack,
            loss_parent,
            epoch: Mutex::new(Arc::new(epoch)),
            held: Mutex::new(Vec::new()),
            acls,
        });
        handle.spawn(heartbeat(Arc::downgrade(&session)));
        handle.spawn(follow_state(Arc::downgrade(&session), states));
        log::debug!("[{}] session started, timeout {timeout:?}", session.label);
        Ok(session)
    }

    pub(crate) fn zk(&self) -> &zk::Client {
        &self.zk
    }

    /// Options for the nodes this session creates, with the client's ACL.
    pub(crate) fn options(&self, mode: zk::CreateMode) -> zk::CreateOptions<'static> {
        mode.with_acls(self.acls)
    }

    pub(crate) fn id(&self) -> i64 {
        self.zk.session_id().0
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.zk.session_timeout()
    }

    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// zookeeper-client's state, which it publishes before it fails the
    /// requests of a session that ended.
    pub(crate) fn state(&self) -> SessionState {
        match self.zk.state() {
            zk::SessionState::Disconnected => SessionState::Disconnected,
            zk::SessionState::Expired => SessionState::Expired,
            zk::SessionState::Closed | zk::SessionState::AuthFailed => SessionState::Closed,
            _ => SessionState::Connected,
        }
    }

    pub(crate) fn is_expired(&self) -> bool {
        self.zk.state().is_terminated()
    }

    /// The current epoch, whatever its state.
    pub(crate) fn current_epoch(&self) -> Arc<SessionLease> {
        self.epoch.lock().clone()
    }

    /// An epoch that is valid now. After a loss (a deadline that passed
    /// during a disconnect, or any disconnect under `OnDisconnect`) while the
    /// session itself survived, a new epoch starts, anchored by a fresh round
    /// trip: nothing held in the old epoch is carried over.
    pub(crate) async fn live_epoch(&self) -> Result<Arc<SessionLease>> {
        let current = self.current_epoch();
        if !current.is_lost() {
            return Ok(current);
        }
        if self.is_expired() {
            return Err(Error::SessionExpired);
        }
        let sent_at = self.clock.now();
        self.zk
            .check_stat("/")
            .await
            .map_err(|e| read_error("renew the session lease", e))?;
        let mut epoch = self.epoch.lock();
        if epoch.is_lost() {
            let fresh = SessionLease::start(
                &self.label,
                &self.loss_parent,
                self.clock.clone(),
                self.slack,
            )?;
            fresh.acknowledged(sent_at, self.timeout());
            log::debug!("[{}] new lease epoch after a loss", self.label);
            *epoch = Arc::new(fresh);
        }
        Ok(epoch.clone())
    }

    fn acknowledged(&self, sent_at: BootInstant) {
        self.current_epoch().acknowledged(sent_at, self.timeout());
    }

    /// Remember a node held by a guard whose loss is `signal`.
    pub(crate) fn track(&self, node: &str, signal: LossSignal) {
        self.held.lock().push((node.to_owned(), signal));
    }

    /// Forget a node (its guard released it).
    pub(crate) fn untrack(&self, node: &str) {
        self.held.lock().retain(|(n, _)| n != node);
    }

    /// Delete the nodes of lost guards; those that fail stay for the next
    /// heartbeat.
    async fn reap_lost_nodes(&self) {
        let held = self.held.lock().clone();
        for (node, _) in held.into_iter().filter(|(_, lost)| lost.is_lost()) {
            match self.zk.delete(&node, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {
                    log::info!("[{}] deleted {node}, whose guard was lost", self.label);
                    self.untrack(&node);
                }
                Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => return,
                Err(e) => log::debug!("[{}] delete {node} failed: {e}; will retry", self.label),
            }
        }
    }
}

/// Times a small request every `timeout / 4` and feeds acknowledgements to
/// the current epoch. Holds the session weakly: it ends with the session.
async fn heartbeat(session: Weak<Session>) {
    loop {
        let Some((request, sent_at, interval, timeout)) = session.upgrade().and_then(|s| {
            if s.is_expired() {
                return None;
            }
            let sent_at = s.clock.now();
            Some((s.zk.check_stat("/"), sent_at, s.timeout() / 4, s.timeout()))
        }) else {
            return;
        };
        let next = tokio::time::Instant::now() + interval;
        match tokio::time::timeout(timeout, request).await {
            Ok(Ok(_)) => {
                if let Some(s) = session.upgrade() {
                    s.acknowledged(sent_at);
                    s.reap_lost_nodes().await;
                }
            }
            Ok(Err(zk::Error::SessionExpired | zk::Error::ClientClosed)) => return,
            Ok(Err(e)) => log::debug!("heartbeat failed: {e}"),
            Err(_) => log::debug!("heartbeat unanswered after {timeout:?}"),
        }
        tokio::time::sleep_until(next).await;
    }
}

/// Follows zookeeper-client's session state and fires the epoch's loss
/// signal as the loss policy says.
async fn follow_state(session: Weak<Session>, mut states: zk::StateWatcher) {
    loop {
        let state = states.changed().await;
        let Some(s) = session.upgrade() else { return };
        log::debug!("[{}] {state}", s.label);
        let reason = match state {
            zk::SessionState::Disconnected if s.policy == LossPolicy::OnDisconnect => {
                LossReason::Disconnected
            }
            zk::SessionState::Expired => LossReason::SessionExpired,
            zk::SessionState::Closed | zk::SessionState::AuthFailed => LossReason::Closed,
            _ => continue,
        };
        s.current_epoch().fire(reason);
        if state.is_terminated() {
            return;
        }
    }
}
