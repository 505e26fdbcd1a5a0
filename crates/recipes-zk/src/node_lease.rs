//! A node held under a session: the lease behind a lock, a permit, a
//! latch's or a selector's leadership.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use recipes_core::{
    Backoff, Error, FencedLease, FencingToken, HeldLease, LeadershipLease, LossReason, LossSignal,
    LossTrigger, Result,
};
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::driver::Acquired;
use crate::error::{connection_trouble, from_zk};
use crate::session::Session;

/// A held ephemeral node: its loss signal fires when the session's lease
/// deadline passes, the session expires, or the node is deleted.
///
/// Writes through it are fenced in the store: each runs as
/// `multi(check(our node), op)`, so it lands only while the node exists —
/// while no other holder can exist.
pub struct ZkNodeLease {
    client: ZkClient,
    session: Arc<Session>,
    node: String,
    czxid: i64,
    trigger: LossTrigger,
    signal: LossSignal,
}

impl ZkNodeLease {
    pub(crate) fn held(client: ZkClient, a: Acquired) -> ZkNodeLease {
        let trigger = a.epoch.trigger().child();
        let signal = trigger.signal();
        a.session.track(&a.node, signal.clone());
        client.runtime().spawn(watch_own_node(
            Arc::downgrade(&a.session),
            a.node.clone(),
            trigger.clone(),
        ));
        log::debug!(
            "[{}] holds {} (czxid {})",
            a.session.label(),
            a.node,
            a.czxid
        );
        ZkNodeLease {
            client,
            session: a.session,
            node: a.node,
            czxid: a.czxid,
            trigger,
            signal,
        }
    }

    /// The zxid that created our node.
    pub fn czxid(&self) -> i64 {
        self.czxid
    }

    /// The node's path.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Release from a task on the runtime (where the blocking `release`
    /// must not be called).
    pub(crate) async fn release_async(self) {
        self.trigger.fire(LossReason::Released);
        delete_until_done(self.session.clone(), self.node.clone()).await;
    }

    /// Set the data of `path`, only while our node exists: one
    /// `multi(check(our node), setData)`.
    ///
    /// # Errors
    ///
    /// [`Error::FenceRejected`] if our node or its session is gone;
    /// [`Error::Indeterminate`] if the connection dropped before the reply;
    /// backend errors (such as a missing `path`).
    pub fn set_data(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<()> {
        let (path, data) = (self.outside_our_layout(path)?.to_owned(), data.to_vec());
        self.fenced("set data", move |w| w.add_set_data(&path, &data, version))
    }

    /// Set the data of `path`, creating it (persistent) if missing, only
    /// while our node exists: like a key-value put, in at most two fenced
    /// multis.
    ///
    /// # Errors
    ///
    /// As for [`set_data`](ZkNodeLease::set_data).
    pub fn put(&self, path: &str, data: &[u8]) -> Result<()> {
        match self.set_data(path, data, None) {
            Err(e) if is(&e, &zk::Error::NoNode) => match self.create(path, data) {
                Err(e) if is(&e, &zk::Error::NodeExists) => self.set_data(path, data, None),
                other => other,
            },
            other => other,
        }
    }

    /// Create a persistent node at `path`, only while our node exists.
    ///
    /// # Errors
    ///
    /// As for [`set_data`](ZkNodeLease::set_data).
    pub fn create(&self, path: &str, data: &[u8]) -> Result<()> {
        let (path, data) = (self.outside_our_layout(path)?.to_owned(), data.to_vec());
        let options = self.session.options(zk::CreateMode::Persistent);
        self.fenced("create", move |w| w.add_create(&path, &data, &options))
    }

    /// Delete `path`, only while our node exists.
    ///
    /// # Errors
    ///
    /// As for [`set_data`](ZkNodeLease::set_data).
    pub fn delete(&self, path: &str, version: Option<i32>) -> Result<()> {
        let path = self.outside_our_layout(path)?.to_owned();
        self.fenced("delete", move |w| w.add_delete(&path, version))
    }

    /// Delete `path` if it exists, only while our node exists.
    ///
    /// # Errors
    ///
    /// As for [`set_data`](ZkNodeLease::set_data).
    pub fn delete_if_exists(&self, path: &str) -> Result<()> {
        match self.delete(path, None) {
            Err(e) if is(&e, &zk::Error::NoNode) => Ok(()),
            other => other,
        }
    }

    /// `path`, unless it lies inside the recipe's own nodes: writing there
    /// could delete our node, forge a contender or change a semaphore's
    /// size.
    fn outside_our_layout<'p>(&self, path: &'p str) -> Result<&'p str> {
        let dir = &self.node[..self.node.rfind('/').unwrap_or(0)];
        let name = &self.node[dir.len()..];
        // A permit `<path>/leases/_c_…-lease-<seq>`: the semaphore's size,
        // internal mutex and permits all live at and under `<path>`.
        let root = match dir.strip_suffix("/leases") {
            Some(sem) if name.contains("-lease-") => sem,
            _ => dir,
        };
        let inside = path == root
            || path
                .strip_prefix(root)
                .is_some_and(|rest| rest.starts_with('/'));
        if inside {
            let shown: String = path.chars().take(80).collect();
            return Err(Error::invalid(format!(
                "a fenced write to {shown:?} would land among the recipe's own nodes ({root}), \
                 which would break it; write to a path outside {root}"
            )));
        }
        Ok(path)
    }

    fn fenced<F>(&self, what: &'static str, add: F) -> Result<()>
    where
        F: FnOnce(&mut zk::CheckWriter<'_>) -> Result<(), zk::Error> + Send + 'static,
    {
        let (session, node) = (self.session.clone(), self.node.clone());
        self.client.call(what, async move {
            let mut writer = session
                .zk()
                .new_check_writer(&node, None)
                .map_err(|e| from_zk(what, e))?;
            add(&mut writer).map_err(|e| from_zk(what, e))?;
            match writer.commit().await {
                Ok(_) => Ok(()),
                Err(zk::CheckWriteError::CheckFailed { source }) => Err(Error::FenceRejected {
                    what: format!("{what}: our node {node} is gone ({source})"),
                }),
                Err(zk::CheckWriteError::RequestFailed {
                    source: zk::Error::SessionExpired,
                }) => Err(Error::FenceRejected {
                    what: format!("{what}: the session holding {node} expired"),
                }),
                Err(zk::CheckWriteError::RequestFailed { source })
                    if connection_trouble(&source) =>
                {
                    Err(Error::Indeterminate {
                        what: format!("{what}: the connection dropped before the reply"),
                    })
                }
                Err(zk::CheckWriteError::RequestFailed { source }) => Err(from_zk(what, source)),
                Err(zk::CheckWriteError::OperationFailed { source, .. }) => {
                    Err(from_zk(what, source))
                }
            }
        })
    }
}

/// Whether `e` carries this ZooKeeper error code.
fn is(e: &Error, code: &zk::Error) -> bool {
    matches!(e, Error::Backend { source: Some(s), .. }
        if s.downcast_ref::<zk::Error>() == Some(code))
}

/// Watch our own node: its deletion, or the session's end, is loss.
async fn watch_own_node(session: Weak<Session>, node: String, trigger: LossTrigger) {
    loop {
        if trigger.is_fired() {
            return;
        }
        let Some(s) = session.upgrade() else { return };
        let watched = s.zk().get_and_watch_data(&node).await;
        let id = s.id();
        drop(s);
        let watcher = match watched {
            Ok((_, stat, w)) if stat.ephemeral_owner == id => w,
            Ok(_) | Err(zk::Error::NoNode) => {
                trigger.fire(LossReason::Deleted);
                return;
            }
            Err(zk::Error::SessionExpired) => {
                trigger.fire(LossReason::SessionExpired);
                return;
            }
            Err(zk::Error::ClientClosed) => {
                trigger.fire(LossReason::Closed);
                return;
            }
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let event = watcher.changed().await;
        match event.event_type {
            zk::EventType::NodeDeleted => {
                trigger.fire(LossReason::Deleted);
                return;
            }
            zk::EventType::Session => {
                let reason = match event.session_state {
                    zk::SessionState::Expired => LossReason::SessionExpired,
                    _ => LossReason::Closed,
                };
                trigger.fire(reason);
                return;
            }
            _ => {} // data changed: watch again
        }
    }
}

/// Delete our node on our session; done when it is gone or the session is.
async fn delete_node(session: &Session, node: &str) -> Result<()> {
    match session.zk().delete(node, None).await {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        // The session is gone, and its ephemeral node with it.
        Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => Ok(()),
        Err(e) => Err(from_zk(&format!("release {node}"), e)),
    }
}

/// Delete `node` on `session`, retrying until it or the session is gone.
pub(crate) async fn delete_until_done(session: Arc<Session>, node: String) {
    let mut backoff = Backoff::RECOVER;
    while let Err(e) = delete_node(&session, &node).await {
        log::warn!(
            "[{}] release of {node} failed: {e}; retrying",
            session.label()
        );
        backoff.pause().await;
    }
    session.untrack(&node);
}

/// A held node's fence is its czxid: a node is created after every node
/// that held (or led) before it.
impl FencedLease for ZkNodeLease {
    fn token(&self) -> FencingToken {
        FencingToken(self.czxid as u64)
    }
}

impl LeadershipLease for ZkNodeLease {
    /// Set our node's data to `value`, only while the node exists (one
    /// `multi(check(our node), setData(our node))`). Observers see the new
    /// value; the fence does not change.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when our node or its session is gone (the loss
    /// signal fires too); [`Error::Indeterminate`] when no reply came.
    fn proclaim(&self, value: &[u8]) -> Result<()> {
        // Our own node: the one write inside the recipe's nodes there is.
        let (node, value) = (self.node.clone(), value.to_vec());
        let set = self.fenced("proclaim", move |w| w.add_set_data(&node, &value, None));
        match set {
            Err(Error::FenceRejected { what }) => {
                self.trigger.fire(LossReason::Deleted);
                Err(Error::NotHeld {
                    what: format!("leadership of {}: {what}", self.node),
                })
            }
            other => other,
        }
    }

    fn trigger(&self) -> &LossTrigger {
        &self.trigger
    }

    fn resign_async(self) -> impl std::future::Future<Output = ()> + Send {
        self.release_async()
    }
}

impl HeldLease for ZkNodeLease {
    fn loss_signal(&self) -> &LossSignal {
        &self.signal
    }

    fn holder(&self) -> &str {
        &self.node
    }

    fn release(self) -> Result<()> {
        let (session, node) = (self.session.clone(), self.node.clone());
        let r = self
            .client
            .call("release", async move { delete_node(&session, &node).await });
        self.trigger.fire(LossReason::Released);
        match r {
            Ok(()) => {
                self.session.untrack(&self.node);
                Ok(())
            }
            Err(e) => {
                // Keep trying in the background; the session bounds it.
                self.release_in_background();
                Err(e)
            }
        }
    }

    fn release_in_background(self) {
        self.trigger.fire(LossReason::Released);
        let started = self
            .client
            .runtime()
            .spawn(delete_until_done(self.session.clone(), self.node.clone()));
        if !started {
            log::warn!(
                "[{}] client closed: {} stays until its session ends",
                self.session.label(),
                self.node
            );
        }
    }
}

impl fmt::Debug for ZkNodeLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkNodeLease")
            .field("node", &self.node)
            .field("czxid", &self.czxid)
            .field("lost", &self.signal.reason())
            .finish()
    }
}
