//! A node held under a session — the lease behind a lock, a permit, a
//! latch's or a selector's leadership — as core's
//! [`HeldEntry`](recipes_core::store::HeldEntry): the watch on the node, its
//! deletion, and fenced writes as `multi(check(our node), op)`.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use recipes_core::store::{
    until_done, Backoff, FencedLease, FencedWrite, HeldEntry, HeldLease, LeadershipLease,
    LossTrigger, Runtime, StoreEntry,
};
use recipes_core::{Error, FencingToken, LossReason, Result};
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::driver::Acquired;
use crate::error::{connection_trouble, from_zk};
use crate::session::Session;

/// A held ephemeral node. Its fence is its czxid: a node is created after
/// every node that held (or led) before it. Fenced writes run as
/// `multi(check(our node), op)`; a write whose connection dropped is
/// [`Error::Indeterminate`], a failed check or an expired session
/// [`Error::FenceRejected`].
pub type ZkNodeLease = HeldEntry<ZkNode>;

/// The ZooKeeper side of a [`ZkNodeLease`]: our node and its session.
///
/// The session is the client's: a node does not keep it open, so a close
/// ends it (and the node) while guards live; they are then lost (`Closed`).
#[derive(Clone, Debug)]
pub struct ZkNode {
    client: ZkClient,
    session: Weak<Session>,
    session_id: i64,
    label: String,
    node: String,
}

impl ZkNode {
    /// Hold the node `a` won: watch it (its deletion, or the session's end,
    /// is loss) and remember it in the session (see `Session::track`).
    pub(crate) fn held(client: ZkClient, a: Acquired) -> ZkNodeLease {
        let trigger = a.epoch.trigger().child();
        a.session.track(&a.node, trigger.signal());
        client.runtime().spawn(watch_own_node(
            Arc::downgrade(&a.session),
            a.node.clone(),
            (a.children, a.own),
            trigger.clone(),
        ));
        let token = FencingToken(a.czxid as u64);
        let node = ZkNode {
            client,
            session: Arc::downgrade(&a.session),
            session_id: a.session.id(),
            label: a.session.label().to_owned(),
            node: a.node,
        };
        HeldEntry::new(node, trigger, token)
    }

    /// Replace the node `held` holds by a new ephemeral node `replacement`
    /// in one `multi` (create it, delete ours), keeping the fence: a
    /// read-write lock's downgrade, where the replacement's name keeps our
    /// place in the queue. The new lease watches the new node.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when `held` was lost or its node is gone;
    /// [`Error::Indeterminate`] when no reply came; backend errors. On any
    /// error nothing is held: both nodes are deleted in the background on
    /// our session (after the multi, should it still land).
    pub(crate) fn replace(held: ZkNodeLease, replacement: String) -> Result<ZkNodeLease> {
        let old = held.entry().clone();
        let Some(session) = old.session.upgrade() else {
            return Err(Error::Closed);
        };
        // An epoch that is lost has been replaced only after `held` lost:
        // checked after the read, the epoch is `held`'s own.
        let epoch = session.current_epoch();
        if let Some(reason) = held.loss_signal().reason() {
            held.release_in_background();
            return Err(Error::LeaseLost { reason });
        }
        // The old holding ends here, before the multi: neither the
        // session's reaper nor the old node's watch may take the node's
        // deletion by the multi for a loss.
        session.untrack(&old.node);
        held.trigger().fire(LossReason::Released);
        let swap = swap(session.clone(), old.node.clone(), replacement.clone());
        // A timed-out call cancels the multi: the deletes below follow it
        // on the session's queue, whether it was sent or not.
        let swapped = old.runtime().call("downgrade", old.rpc_timeout(), swap);
        if let Err(e) = swapped.map_err(Error::unconfirmed) {
            for node in [old.node.clone(), replacement] {
                old.runtime()
                    .spawn(delete_until_done(session.clone(), node));
            }
            return Err(e);
        }
        let acquired = Acquired {
            session,
            epoch,
            node: replacement,
            czxid: held.token().0 as i64,
            children: None,
            own: None,
        };
        Ok(ZkNode::held(old.client, acquired))
    }
}

/// `multi(create(replacement, ephemeral), delete(node))` on `session`.
async fn swap(session: Arc<Session>, node: String, replacement: String) -> Result<()> {
    let what = format!("replace {node} by {replacement}");
    let mut writer = session.zk().new_multi_writer();
    writer
        .add_create(
            &replacement,
            &[],
            &session.options(zk::CreateMode::Ephemeral),
        )
        .map_err(|e| from_zk(&what, e))?;
    writer
        .add_delete(&node, None)
        .map_err(|e| from_zk(&what, e))?;
    match writer.commit().await {
        Ok(_) => Ok(()),
        Err(zk::MultiWriteError::OperationFailed {
            index: 1,
            source: zk::Error::NoNode,
        }) => Err(Error::LeaseLost {
            reason: LossReason::Deleted,
        }),
        Err(zk::MultiWriteError::RequestFailed { source }) if connection_trouble(&source) => {
            Err(Error::ConnectionLoss)
        }
        Err(e) => Err(from_zk(&what, e.into())),
    }
}

impl StoreEntry for ZkNode {
    fn runtime(&self) -> &Runtime {
        self.client.runtime()
    }

    fn rpc_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }

    fn holder(&self) -> &str {
        &self.node
    }

    fn session_id(&self) -> i64 {
        self.session_id
    }

    fn label(&self) -> &str {
        &self.label
    }

    /// A node's folder, and everything at or below it; for a permit
    /// `<path>/leases/_c_…-lease-<seq>`, the semaphore's `<path>`, where its
    /// size, internal mutex and permits live.
    fn inside_layout(&self, path: &str) -> Option<&str> {
        let dir = &self.node[..self.node.rfind('/').unwrap_or(0)];
        let root = match dir.strip_suffix("/leases") {
            Some(sem) if self.node[dir.len()..].contains("-lease-") => sem,
            _ => dir,
        };
        let inside = path == root
            || path
                .strip_prefix(root)
                .is_some_and(|rest| rest.starts_with('/'));
        inside.then_some(root)
    }

    /// A session that is gone took the node with it.
    async fn delete(self) -> Result<()> {
        match self.session.upgrade() {
            Some(s) => delete_node(&s, &self.node).await,
            None => Ok(()),
        }
    }

    fn delete_until_done(self) -> impl Future<Output = ()> + Send + 'static {
        let session = self.session.upgrade();
        async move {
            if let Some(s) = session {
                delete_until_done(s, self.node).await
            }
        }
    }

    fn released(&self) {
        if let Some(s) = self.session.upgrade() {
            s.untrack(&self.node);
        }
    }

    async fn write(self, what: &'static str, write: FencedWrite) -> Result<()> {
        let session = self.session.upgrade().ok_or(Error::Closed)?;
        let (s, n) = (&*session, self.node.as_str());
        match write {
            FencedWrite::Proclaim { value } => fenced(s, n, what, Op::Set(n, &value)).await,
            // Like a key-value put: set; else create; else (created since) set.
            FencedWrite::Put { key, value } => {
                let set = fenced(s, n, what, Op::Set(&key, &value)).await;
                if !set.as_ref().is_err_and(|e| is(e, &zk::Error::NoNode)) {
                    return set;
                }
                let created = fenced(s, n, what, Op::Create(&key, &value)).await;
                if !created
                    .as_ref()
                    .is_err_and(|e| is(e, &zk::Error::NodeExists))
                {
                    return created;
                }
                fenced(s, n, what, Op::Set(&key, &value)).await
            }
            FencedWrite::Delete { key } => match fenced(s, n, what, Op::Delete(&key)).await {
                Err(e) if is(&e, &zk::Error::NoNode) => Ok(()),
                other => other,
            },
        }
    }
}

/// One operation of a fenced multi.
enum Op<'a> {
    Set(&'a str, &'a [u8]),
    Create(&'a str, &'a [u8]),
    Delete(&'a str),
}

/// `multi(check(node), op)`.
async fn fenced(session: &Session, node: &str, what: &str, op: Op<'_>) -> Result<()> {
    let mut writer = session
        .zk()
        .new_check_writer(node, None)
        .map_err(|e| from_zk(what, e))?;
    let added = match op {
        Op::Set(path, data) => writer.add_set_data(path, data, None),
        Op::Create(path, data) => {
            writer.add_create(path, data, &session.options(zk::CreateMode::Persistent))
        }
        Op::Delete(path) => writer.add_delete(path, None),
    };
    added.map_err(|e| from_zk(what, e))?;
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
        Err(zk::CheckWriteError::RequestFailed { source }) if connection_trouble(&source) => {
            Err(Error::Indeterminate {
                what: format!("{what}: the connection dropped before the reply"),
            })
        }
        Err(zk::CheckWriteError::RequestFailed { source }) => Err(from_zk(what, source)),
        Err(zk::CheckWriteError::OperationFailed { source, .. }) => Err(from_zk(what, source)),
    }
}

/// Whether `e` carries this ZooKeeper error code.
fn is(e: &Error, code: &zk::Error) -> bool {
    matches!(e, Error::Backend { source: Some(s), .. }
        if s.downcast_ref::<zk::Error>() == Some(code))
}

/// Watch our own node: its deletion is loss. The session's end fires the
/// epoch, of which `trigger` is a child.
///
/// From `own`, the watch the read that confirmed our node set (the win
/// after the one node ahead was deleted), when there is one. Else first
/// through `children`, the watch the winning listing set on the folder
/// (it was armed before that listing was read, so no change since is
/// missed): it costs no request until a contender comes or goes. Then
/// through a watch on the node itself — at once for a reader, whose
/// listing sets no children watch, and a downgraded reader.
async fn watch_own_node(
    session: Weak<Session>,
    node: String,
    (children, own): (Option<zk::OneshotWatcher>, Option<zk::OneshotWatcher>),
    trigger: LossTrigger,
) {
    let mut own = own;
    if let (None, Some(children)) = (&own, children) {
        drop(children.changed().await);
    }
    while !trigger.is_fired() {
        let watcher = match own.take() {
            Some(watcher) => watcher,
            None => {
                let Some(s) = session.upgrade() else { return };
                let (watched, id) = (s.zk().get_and_watch_data(&node).await, s.id());
                drop(s);
                match watched {
                    Ok((_, stat, w)) if stat.ephemeral_owner == id => w,
                    Ok(_) | Err(zk::Error::NoNode) => {
                        trigger.fire(LossReason::Deleted);
                        continue;
                    }
                    Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => return,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
        };
        match watcher.changed().await.event_type {
            zk::EventType::NodeDeleted => {
                trigger.fire(LossReason::Deleted);
            }
            zk::EventType::Session => return,
            _ => {} // data changed: watch again
        }
    }
}

/// Delete our node on our session; done when it is gone or the session is.
pub(crate) async fn delete_node(session: &Session, node: &str) -> Result<()> {
    match session.zk().delete(node, None).await {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        // The session is gone, and its ephemeral node with it.
        Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => Ok(()),
        Err(e) => Err(from_zk(&format!("release {node}"), e)),
    }
}

/// Delete `node` on `session`, retrying until it or the session is gone.
pub(crate) async fn delete_until_done(session: Arc<Session>, node: String) {
    let what = format!("[{}] release of {node}", session.label());
    until_done(
        &what,
        Backoff::RECOVER,
        || false,
        || delete_node(&session, &node),
    )
    .await;
    session.untrack(&node);
}
