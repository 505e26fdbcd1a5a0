//! `InterProcessMutex`: Curator's mutex layout, fenced by the lock node's
//! czxid.
//!
//! Layout: `<path>/_c_<uuid>-lock-<seq10>`, ephemeral-sequential, under
//! container parents, a fresh uuid per acquisition. The holder is the node
//! with the lowest sequence; a waiter watches only its predecessor.
//!
//! # Under pause and partition
//!
//! The guard's loss signal fires when the session's local deadline passes
//! without an acknowledged heartbeat, when the server expires the session,
//! when our node is deleted, and (with `LossPolicy::OnDisconnect`) on any
//! disconnect. A process paused past the session timeout finds its signal
//! fired when it resumes; anything it writes after that must carry the
//! fence, which the store ([`ZkLock::set_data`] and friends) or the resource
//! ([`recipes_core::FenceGate`]) refuses once a newer holder wrote.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use recipes_core::{
    Error, FencedLease, FencingToken, HeldLease, LossReason, LossSignal, LossTrigger, MutexBackend,
    Result,
};
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::error::from_zk;
use crate::lock_internals::{acquire, Acquired, Contender};
use crate::names::validate_path;
use crate::session::Session;

/// A mutex shared with every process, Java (Curator) ones included, that
/// locks the same path.
pub type InterProcessMutex = recipes_core::Mutex<ZkMutex>;

/// The ZooKeeper mutex backend; use it through [`InterProcessMutex`], made
/// by [`ZkClient::mutex`].
#[derive(Debug, Clone)]
pub struct ZkMutex {
    client: ZkClient,
    contender: Contender,
}

impl ZkMutex {
    pub(crate) fn new(client: ZkClient, path: &str) -> Result<ZkMutex> {
        validate_path(path)?;
        Ok(ZkMutex {
            client,
            contender: Contender {
                dir: path.to_owned(),
                lock_name: "lock-",
                data: Vec::new(),
                max_leases: 1,
            },
        })
    }
}

impl MutexBackend for ZkMutex {
    type Lease = ZkLock;

    fn name(&self) -> &str {
        &self.contender.dir
    }

    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<ZkLock>> {
        let (client, contender) = (self.client.clone(), self.contender.clone());
        let acquired = self.client.runtime().call_until("lock", None, async move {
            let deadline = deadline.map(tokio::time::Instant::from_std);
            acquire(&client, &contender, deadline).await
        })?;
        Ok(acquired.map(|a| ZkLock::held(self.client.clone(), a)))
    }
}

/// A held ZooKeeper lock node: the lease behind a
/// [`MutexGuard`](recipes_core::MutexGuard).
pub struct ZkLock {
    client: ZkClient,
    session: Arc<Session>,
    node: String,
    token: FencingToken,
    trigger: LossTrigger,
    signal: LossSignal,
}

impl ZkLock {
    pub(crate) fn held(client: ZkClient, a: Acquired) -> ZkLock {
        let trigger = a.epoch.trigger().child();
        let signal = trigger.signal();
        a.session.track(&a.node, signal.clone());
        client.runtime().spawn(watch_own_node(
            Arc::downgrade(&a.session),
            a.node.clone(),
            trigger.clone(),
        ));
        log::debug!(
            "[{}] holds {} (fence {})",
            a.session.label(),
            a.node,
            a.czxid
        );
        ZkLock {
            token: FencingToken(a.czxid as u64),
            client,
            session: a.session,
            node: a.node,
            trigger,
            signal,
        }
    }

    /// Set the data of `path`, only if this lock is still held: one
    /// `multi(check(our node), setData)`.
    ///
    /// # Errors
    ///
    /// [`Error::FenceRejected`] if our node is gone (the lock was lost);
    /// backend errors.
    pub fn set_data(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<()> {
        let (path, data) = (path.to_owned(), data.to_vec());
        self.fenced("set data", move |w| w.add_set_data(&path, &data, version))
    }

    /// Set the data of `path`, creating it (persistent) if missing, only if
    /// this lock is still held: like a key-value put, in at most two fenced
    /// multis.
    ///
    /// # Errors
    ///
    /// As for [`set_data`](ZkLock::set_data).
    pub fn put(&self, path: &str, data: &[u8]) -> Result<()> {
        match self.set_data(path, data, None) {
            Err(Error::Backend {
                source: Some(s), ..
            }) if s.downcast_ref::<zk::Error>() == Some(&zk::Error::NoNode) => {
                match self.create(path, data) {
                    Err(Error::Backend {
                        source: Some(s), ..
                    }) if s.downcast_ref::<zk::Error>() == Some(&zk::Error::NodeExists) => {
                        self.set_data(path, data, None)
                    }
                    other => other,
                }
            }
            other => other,
        }
    }

    /// Create a persistent node at `path`, only if this lock is still held.
    ///
    /// # Errors
    ///
    /// As for [`set_data`](ZkLock::set_data).
    pub fn create(&self, path: &str, data: &[u8]) -> Result<()> {
        let (path, data) = (path.to_owned(), data.to_vec());
        self.fenced("create", move |w| {
            w.add_create(
                &path,
                &data,
                &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
            )
        })
    }

    /// Delete `path`, only if this lock is still held.
    ///
    /// # Errors
    ///
    /// As for [`set_data`](ZkLock::set_data).
    pub fn delete(&self, path: &str, version: Option<i32>) -> Result<()> {
        let path = path.to_owned();
        self.fenced("delete", move |w| w.add_delete(&path, version))
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
                    what: format!("{what}: our lock node {node} is gone ({source})"),
                }),
                Err(zk::CheckWriteError::RequestFailed {
                    source: zk::Error::SessionExpired,
                }) => Err(Error::FenceRejected {
                    what: format!("{what}: the session holding {node} expired"),
                }),
                Err(zk::CheckWriteError::RequestFailed { source }) => Err(from_zk(what, source)),
                Err(zk::CheckWriteError::OperationFailed { source, .. }) => {
                    Err(from_zk(what, source))
                }
            }
        })
    }
}

/// Watch our own node: its deletion, or the session's end, is loss.
async fn watch_own_node(session: std::sync::Weak<Session>, node: String, trigger: LossTrigger) {
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
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
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

async fn delete_until_done(session: Arc<Session>, node: String) {
    let mut pause = std::time::Duration::from_millis(50);
    while let Err(e) = delete_node(&session, &node).await {
        log::warn!(
            "[{}] release of {node} failed: {e}; retrying",
            session.label()
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_secs(2));
    }
}

impl HeldLease for ZkLock {
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
        let (session, node) = (self.session.clone(), self.node.clone());
        let started = self.client.runtime().spawn(async move {
            delete_until_done(session.clone(), node.clone()).await;
            session.untrack(&node);
        });
        if !started {
            log::warn!(
                "[{}] client closed: {} stays until its session ends",
                self.session.label(),
                self.node
            );
        }
    }
}

impl FencedLease for ZkLock {
    fn token(&self) -> FencingToken {
        self.token
    }
}

impl fmt::Debug for ZkLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkLock")
            .field("node", &self.node)
            .field("token", &self.token)
            .field("lost", &self.signal.reason())
            .finish()
    }
}

impl ZkClient {
    /// A mutex at `path` (Curator's `InterProcessMutex` layout).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a path ZooKeeper refuses (empty, not
    /// absolute, trailing `/`, control characters, under `/zookeeper`).
    pub fn mutex(&self, path: &str) -> Result<InterProcessMutex> {
        Ok(InterProcessMutex::from_backend(ZkMutex::new(
            self.clone(),
            path,
        )?))
    }
}
