//! The engine every ZooKeeper recipe shares (Curator's `LockInternals`):
//! create a protected ephemeral-sequential node, read the children, decide
//! by queue position, watch only the node that must go, wait.
//!
//! Every exit path that does not hand the node to a guard deletes it,
//! including a create whose reply was lost or that is still queued in the
//! client while disconnected: a cleanup on the same session lists the
//! children (the server answers it after the queued create) and deletes the
//! one with our uuid.

use std::sync::Arc;
use std::time::Duration;

use recipes_core::{Error, Result, SessionLease};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::error::{connection_trouble, from_zk};
use crate::names::{fresh_uuid, is_ours, protected_prefix, queue_order, sequence_of};
use crate::session::Session;

/// What a contender asks for.
#[derive(Debug, Clone)]
pub(crate) struct Contender {
    /// The folder the contenders' nodes live in.
    pub(crate) dir: String,
    /// Curator's lock name: `lock-`, `latch-`, `lease-`.
    pub(crate) lock_name: &'static str,
    /// The node's data.
    pub(crate) data: Vec<u8>,
    /// How many nodes at the head of the queue hold (1 for a mutex).
    pub(crate) max_leases: usize,
}

/// A node at the head of the queue.
#[derive(Debug)]
pub(crate) struct Acquired {
    pub(crate) session: Arc<Session>,
    pub(crate) epoch: Arc<SessionLease>,
    pub(crate) node: String,
    pub(crate) czxid: i64,
}

/// How long to wait before retrying a read after a connection loss.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Deletes our node (or a create of ours still in flight) unless disarmed,
/// from a task on the runtime, however the acquisition ends: error, timeout
/// or the future being dropped.
struct Cleanup {
    client: ZkClient,
    session: Arc<Session>,
    dir: String,
    uuid: String,
    armed: bool,
}

impl Cleanup {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.armed {
            let (session, dir, uuid) = (self.session.clone(), self.dir.clone(), self.uuid.clone());
            self.client
                .runtime()
                .spawn(async move { delete_ours(&session, &dir, &uuid).await });
        }
    }
}

/// Delete every child of `dir` created with `uuid`, on `session`. Retries
/// until done or the session is gone (which deletes ephemerals anyway).
pub(crate) async fn delete_ours(session: &Session, dir: &str, uuid: &str) {
    let mut pause = RETRY_PAUSE;
    loop {
        match session.zk().list_children(dir).await {
            Ok(children) => {
                let mut done = true;
                for child in children.iter().filter(|c| is_ours(c, uuid)) {
                    let path = format!("{dir}/{child}");
                    match session.zk().delete(&path, None).await {
                        Ok(()) | Err(zk::Error::NoNode) => {
                            log::debug!("[{}] deleted abandoned node {path}", session.label())
                        }
                        Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => return,
                        Err(e) => {
                            log::debug!(
                                "[{}] delete {path} failed: {e}; retrying",
                                session.label()
                            );
                            done = false;
                        }
                    }
                }
                if done {
                    return;
                }
            }
            Err(zk::Error::NoNode | zk::Error::SessionExpired | zk::Error::ClientClosed) => return,
            Err(e) => log::debug!("[{}] list {dir} failed: {e}; retrying", session.label()),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// Create `dir` and its missing parents as container nodes.
async fn make_dirs(session: &Session, dir: &str) -> Result<()> {
    session
        .zk()
        .mkdir(dir, &session.options(zk::CreateMode::Container))
        .await
        .map_err(|e| from_zk(&format!("create the folder {dir}"), e))
}

/// Create our protected node; recover it by its uuid when the reply was
/// lost. Returns the node's path and czxid.
pub(crate) async fn create_protected(
    session: &Session,
    c: &Contender,
    uuid: &str,
) -> Result<(String, i64, i64)> {
    let prefix = format!("{}/{}", c.dir, protected_prefix(uuid, c.lock_name));
    let mut made_dirs = false;
    loop {
        match session
            .zk()
            .create(
                &prefix,
                &c.data,
                &session.options(zk::CreateMode::EphemeralSequential),
            )
            .await
        {
            Ok((stat, seq)) => {
                let node = format!("{prefix}{seq}");
                return Ok((node, stat.czxid, stat.ephemeral_owner));
            }
            Err(zk::Error::NoNode) if !made_dirs => {
                make_dirs(session, &c.dir).await?;
                made_dirs = true;
            }
            Err(e) if connection_trouble(&e) => {
                // The create may have been applied: look for our uuid.
                if let Some(found) = find_ours(session, c, uuid).await? {
                    return Ok(found);
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => return Err(from_zk(&format!("create a node under {}", c.dir), e)),
        }
    }
}

async fn find_ours(
    session: &Session,
    c: &Contender,
    uuid: &str,
) -> Result<Option<(String, i64, i64)>> {
    let children = loop {
        match session.zk().list_children(&c.dir).await {
            Ok(children) => break children,
            Err(e) if connection_trouble(&e) => tokio::time::sleep(RETRY_PAUSE).await,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(from_zk(&format!("list {}", c.dir), e)),
        }
    };
    let Some(name) = children.iter().find(|n| is_ours(n, uuid)) else {
        return Ok(None);
    };
    let node = format!("{}/{name}", c.dir);
    match session.zk().check_stat(&node).await {
        Ok(Some(stat)) => Ok(Some((node, stat.czxid, stat.ephemeral_owner))),
        Ok(None) => Ok(None),
        Err(e) => Err(from_zk(&format!("read {node}"), e)),
    }
}

/// The outcome of one attempt.
enum Attempt {
    Acquired(Acquired),
    TimedOut,
    /// The epoch was lost while waiting: start over with a new node.
    Restart,
}

/// Contend until at the head of the queue or `deadline`.
///
/// The deadline bounds the *wait* for the nodes ahead of ours; the create
/// and the first read always run, as in Curator, so a try-lock on a free
/// lock succeeds. A stuck create (the client is disconnected) is cut off
/// `rpc_timeout` after the deadline; the cleanup then removes the node when
/// the create lands.
pub(crate) async fn acquire(
    client: &ZkClient,
    c: &Contender,
    deadline: Option<Instant>,
) -> Result<Option<Acquired>> {
    loop {
        let attempt = match deadline {
            Some(d) => {
                let hard = d + client.rpc_timeout();
                match tokio::time::timeout_at(hard, attempt(client, c, Some(d))).await {
                    Ok(r) => r?,
                    // The attempt's future was dropped: its cleanup runs.
                    Err(_) => Attempt::TimedOut,
                }
            }
            None => attempt(client, c, None).await?,
        };
        match attempt {
            Attempt::Acquired(a) => return Ok(Some(a)),
            Attempt::TimedOut => return Ok(None),
            Attempt::Restart if deadline.is_some_and(|d| Instant::now() >= d) => return Ok(None),
            Attempt::Restart => {}
        }
    }
}

async fn attempt(client: &ZkClient, c: &Contender, deadline: Option<Instant>) -> Result<Attempt> {
    let session = client.live_session().await?;
    let epoch = session.live_epoch().await?;
    let uuid = fresh_uuid();
    let cleanup = Cleanup {
        client: client.clone(),
        session: session.clone(),
        dir: c.dir.clone(),
        uuid: uuid.clone(),
        armed: true,
    };
    let (node, czxid, owner) = create_protected(&session, c, &uuid).await?;
    if owner != session.id() {
        return Err(Error::Backend {
            message: format!(
                "{node} belongs to session {owner:#x}, not ours ({:#x})",
                session.id()
            ),
            retryable: true,
            source: None,
        });
    }
    let name = node.rsplit('/').next().unwrap_or_default().to_owned();
    let our_seq = sequence_of(&name).ok_or_else(|| Error::Backend {
        message: format!("the server named our node {node}, which has no sequence suffix"),
        retryable: false,
        source: None,
    })?;
    loop {
        if epoch.is_lost() {
            log::debug!(
                "[{}] lease lost while waiting on {node}; starting over",
                session.label()
            );
            return Ok(Attempt::Restart); // the cleanup deletes the node
        }
        let children = match session.zk().list_children(&c.dir).await {
            Ok(ch) => ch,
            Err(e) if connection_trouble(&e) => {
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Err(e) => return Err(from_zk(&format!("list {}", c.dir), e)),
        };
        let queue = queue_order(&children, our_seq);
        let Some(index) = queue.iter().position(|(_, n)| *n == name) else {
            return Err(Error::LeaseLost {
                reason: recipes_core::LossReason::Deleted,
            });
        };
        if index < c.max_leases {
            cleanup.disarm();
            return Ok(Attempt::Acquired(Acquired {
                session,
                epoch,
                node,
                czxid,
            }));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            cleanup.disarm();
            delete_ours(&session, &c.dir, &uuid).await;
            return Ok(Attempt::TimedOut);
        }
        let watched = format!("{}/{}", c.dir, queue[index - c.max_leases].1);
        let watcher = match session.zk().get_and_watch_data(&watched).await {
            Ok((_, _, w)) => w,
            Err(zk::Error::NoNode) => continue,
            Err(e) if connection_trouble(&e) => {
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Err(e) => return Err(from_zk(&format!("watch {watched}"), e)),
        };
        log::debug!("[{}] {node} waits for {watched}", session.label());
        // The watch fires when the node changes or goes, and on session
        // expiry. Also wake when the epoch is lost, and at the deadline.
        let lost = epoch.signal();
        let until = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = watcher.changed() => {}
            _ = lost.fired() => {}
            () = until => {}
        }
    }
}
