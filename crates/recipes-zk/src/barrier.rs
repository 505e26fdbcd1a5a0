//! Barrier and double barrier in Curator's layouts, as the store's verbs
//! of the core wait shape ([`recipes_core::store::engine::gather`]).
//!
//! - **Barrier** (`DistributedBarrier`): the node `<path>` exists = the
//!   barrier is up; persistent (Curator's), or ephemeral when tied to the
//!   setter's session. A waiter sets an exists-watch on it.
//! - **Double barrier** (`DistributedDoubleBarrier`): a member is the
//!   ephemeral `<path>/<uuid>`, the flag the persistent `<path>/ready`. A
//!   read sets an exists-watch on the flag (it fires on a set again too)
//!   and a children watch on `<path>`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::engine::gather::{
    BarrierStore, DoubleBarrierStore, Flag, Gathering, Member,
};
use recipes_core::store::engine::WaitStore;
use recipes_core::store::{check_count, until_done, Backoff, OnRuntime, SessionLease};
use recipes_core::{Error, LossSignal, Result};
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::error::{connection_trouble, from_zk, read_error};
use crate::names::{fresh_uuid, own_layout, validate_path};
use crate::node_lease::delete_node;
use crate::session::Session;

/// Curator's flag node of a double barrier.
pub(crate) const READY: &str = "ready";

/// A barrier or double barrier on one path of a client.
#[derive(Debug, Clone)]
pub struct ZkWaits {
    pub(crate) client: ZkClient,
    pub(crate) path: String,
    pub(crate) count: u32,
}

/// A ZooKeeper barrier (Curator's `DistributedBarrier` layout).
pub type DistributedBarrier = recipes_core::Barrier<ZkWaits>;
/// A ZooKeeper double barrier (Curator's `DistributedDoubleBarrier` layout).
pub type DistributedDoubleBarrier = recipes_core::DoubleBarrier<ZkWaits>;

impl ZkWaits {
    pub(crate) fn barrier(client: &ZkClient, path: &str) -> Result<ZkWaits> {
        validate_path(path)?;
        Ok(ZkWaits {
            client: client.clone(),
            path: path.to_owned(),
            count: 0,
        })
    }

    pub(crate) fn double(client: &ZkClient, path: &str, count: u32) -> Result<ZkWaits> {
        validate_path(path)?;
        check_count(&format!("the ZooKeeper double barrier {path}"), count)?;
        Ok(ZkWaits {
            client: client.clone(),
            path: path.to_owned(),
            count,
        })
    }

    fn ready(&self) -> String {
        format!("{}/{READY}", self.path)
    }

    /// Refuse `<path>` when its children are another recipe's: a lock's,
    /// an election's, a semaphore's (and, for a barrier, a double
    /// barrier's flag). Folders of names nested below it never count.
    fn refuse_others(&self, children: &[String], barrier: bool) -> Result<()> {
        own_layout(&self.path, children, None)?;
        if barrier && children.iter().any(|c| c == READY) {
            return Err(Error::invalid(format!(
                "{} holds another recipe's layout (a double barrier's ready flag): open it \
                 with that recipe, or choose another name",
                recipes_core::store::quote(&self.path),
            )));
        }
        Ok(())
    }
}

/// The epoch: the session and its lease epoch.
pub struct Epoch(pub(crate) Arc<Session>, pub(crate) Arc<SessionLease>);

impl std::fmt::Debug for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Epoch({:#x})", self.0.id())
    }
}

/// What a read armed: the flag's (or barrier's) exists-watch, and a
/// double barrier's children watch.
pub struct Watches(
    pub(crate) zk::OneshotWatcher,
    pub(crate) Option<zk::OneshotWatcher>,
);

impl std::fmt::Debug for Watches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watches")
    }
}

impl OnRuntime for ZkWaits {
    fn runtime(&self) -> &recipes_core::store::Runtime {
        self.client.runtime()
    }
}

impl WaitStore for ZkWaits {
    type Epoch = Epoch;
    type Watch = Watches;

    fn name(&self) -> &str {
        &self.path
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        if !self.client.runtime().spawn(task) {
            log::debug!("client closed: the session's end removes our member");
        }
    }

    fn rpc_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }

    async fn epoch(&self) -> Result<Epoch> {
        loop {
            let session = self.client.live_session().await?;
            match session.live_epoch().await {
                Ok(epoch) => return Ok(Epoch(session, epoch)),
                // Ended since `live_session`: the next one is new.
                Err(Error::SessionExpired) => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn epoch_signal(&self, epoch: &Epoch) -> LossSignal {
        epoch.1.signal()
    }

    async fn changed(&self, _epoch: &Epoch, watch: Watches) -> Result<()> {
        let Watches(first, second) = watch;
        match second {
            Some(second) => {
                tokio::select! {
                    _ = first.changed() => {}
                    _ = second.changed() => {}
                }
            }
            None => {
                first.changed().await;
            }
        }
        Ok(())
    }
}

impl BarrierStore for ZkWaits {
    async fn is_set(&self, epoch: &Epoch) -> Result<(bool, Watches)> {
        let zk = epoch.0.zk();
        let (stat, watcher) = zk
            .check_and_watch_stat(&self.path)
            .await
            .map_err(|e| read_error(&format!("watch {}", self.path), e))?;
        if stat.is_some_and(|s| s.num_children > 0) {
            let children = match zk.list_children(&self.path).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => return Err(read_error(&format!("list {}", self.path), e)),
            };
            self.refuse_others(&children, true)?;
        }
        Ok((stat.is_some(), Watches(watcher, None)))
    }

    async fn set(&self, epoch: &Epoch, tied: bool) -> Result<()> {
        let session = &epoch.0;
        let mode = if tied {
            zk::CreateMode::Ephemeral
        } else {
            zk::CreateMode::Persistent
        };
        let mut made_dirs = false;
        loop {
            match session
                .zk()
                .create(&self.path, &[], &session.options(mode))
                .await
            {
                Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
                Err(zk::Error::NoNode) if !made_dirs => {
                    make_parent(session, &self.path).await?;
                    made_dirs = true;
                }
                Err(e) => return Err(from_zk(&format!("set the barrier {}", self.path), e)),
            }
        }
    }

    async fn remove(&self, epoch: &Epoch) -> Result<()> {
        match epoch.0.zk().delete(&self.path, None).await {
            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
            Err(zk::Error::NotEmpty) => {
                let children = epoch
                    .0
                    .zk()
                    .list_children(&self.path)
                    .await
                    .unwrap_or_default();
                self.refuse_others(&children, true)?;
                Err(Error::invalid(format!(
                    "the barrier {} has child nodes (names nested below it), which ZooKeeper \
                     cannot delete with it: remove them first, or use another name",
                    recipes_core::store::quote(&self.path)
                )))
            }
            Err(e) => Err(from_zk(&format!("remove the barrier {}", self.path), e)),
        }
    }
}

/// Names our member: the session it lives on and its path.
pub struct Ticket {
    pub(crate) session: Arc<Session>,
    pub(crate) node: String,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl DoubleBarrierStore for ZkWaits {
    type Ticket = Ticket;

    fn count(&self) -> u32 {
        self.count
    }

    fn ticket(&self, epoch: &Epoch) -> Ticket {
        Ticket {
            session: epoch.0.clone(),
            node: format!("{}/{}", self.path, fresh_uuid()),
        }
    }

    async fn join(&self, epoch: &Epoch, ticket: &mut Ticket) -> Result<i64> {
        let session = &epoch.0;
        match self.create_member(session, &ticket.node, &[]).await? {
            Made::New(stat) => Ok(stat.czxid),
            // Ours, from a create whose reply was lost.
            Made::Existing(Some(stat)) if stat.ephemeral_owner == session.id() => Ok(stat.czxid),
            Made::Existing(_) => Err(Error::backend(
                format!("{} exists and is not ours", ticket.node),
                true,
                zk::Error::NodeExists,
            )),
        }
    }

    fn is_ours(ticket: &Ticket, member: &str) -> bool {
        ticket.node.rsplit('/').next() == Some(member)
    }

    async fn read(&self, epoch: &Epoch) -> Result<(Gathering, Watches)> {
        let zk = epoch.0.zk();
        let ready = self.ready();
        let (stat, flag_watch) = zk
            .check_and_watch_stat(&ready)
            .await
            .map_err(|e| read_error(&format!("watch {ready}"), e))?;
        let (children, members_watch) = match zk.list_and_watch_children(&self.path).await {
            Ok(listed) => listed,
            Err(zk::Error::NoNode) => {
                // Not there yet: watch its creation.
                let (_, w) = zk
                    .check_and_watch_stat(&self.path)
                    .await
                    .map_err(|e| read_error(&format!("watch {}", self.path), e))?;
                (Vec::new(), w)
            }
            Err(e) => return Err(read_error(&format!("list {}", self.path), e)),
        };
        self.refuse_others(&children, false)?;
        // A listing has names only: a member's creation (a read each) is
        // asked by the engine where it needs it (`created`).
        let members = (children.into_iter())
            .filter(|c| c != READY)
            .map(|name| Member {
                name,
                created: None,
            })
            .collect();
        let flag = stat.map(|s| Flag {
            set_at: s.mzxid,
            version: i64::from(s.version),
        });
        Ok((
            Gathering { flag, members },
            Watches(flag_watch, Some(members_watch)),
        ))
    }

    async fn created(&self, epoch: &Epoch, member: &str) -> Result<Option<i64>> {
        let node = format!("{}/{member}", self.path);
        match epoch.0.zk().check_stat(&node).await {
            Ok(stat) => Ok(stat.map(|s| s.czxid)),
            Err(e) => Err(read_error(&format!("read {node}"), e)),
        }
    }

    async fn mark(&self, epoch: &Epoch, stale: Option<Flag>) -> Result<()> {
        let (session, ready) = (&epoch.0, self.ready());
        let done = match stale {
            None => session
                .zk()
                .create(&ready, &[], &session.options(zk::CreateMode::Persistent))
                .await
                .map(|_| ()),
            Some(flag) => {
                let version = i32::try_from(flag.version).unwrap_or(-1);
                session
                    .zk()
                    .set_data(&ready, &[], Some(version))
                    .await
                    .map(|_| ())
            }
        };
        match done {
            // Someone else set it since we read: read again.
            Ok(()) | Err(zk::Error::NodeExists | zk::Error::BadVersion | zk::Error::NoNode) => {
                Ok(())
            }
            Err(e) if connection_trouble(&e) => Err(Error::Indeterminate {
                what: format!("set {ready}"),
            }),
            Err(e) => Err(from_zk(&format!("set {ready}"), e)),
        }
    }

    async fn unmark(&self, epoch: &Epoch, flag: Flag) -> Result<()> {
        let version = i32::try_from(flag.version).unwrap_or(-1);
        match epoch.0.zk().delete(&self.ready(), Some(version)).await {
            Ok(()) | Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(()),
            Err(e) => Err(from_zk(&format!("remove {}", self.ready()), e)),
        }
    }

    async fn remove(ticket: Ticket) {
        let what = format!("[{}] removing {}", ticket.session.label(), ticket.node);
        let delete = || delete_node(&ticket.session, &ticket.node);
        until_done(&what, Backoff::RECOVER, || false, delete).await;
    }
}

/// Create the parents of `path` as container nodes.
async fn make_parent(session: &Session, path: &str) -> Result<()> {
    let Some((parent, _)) = path.rsplit_once('/') else {
        return Ok(());
    };
    if parent.is_empty() {
        return Ok(());
    }
    session
        .zk()
        .mkdir(parent, &session.options(zk::CreateMode::Container))
        .await
        .map_err(|e| from_zk(&format!("create the folder {parent}"), e))
}

/// What creating a member's ephemeral node found.
pub(crate) enum Made {
    /// Created now.
    New(zk::Stat),
    /// It was there already: its stat (`None`: gone since).
    Existing(Option<zk::Stat>),
}

impl ZkWaits {
    /// Create the ephemeral `node` holding `data` on `session` (a member
    /// of a double barrier or a group), making the container folder first
    /// if it is missing; a node already there is read back. No reply is
    /// [`Error::Indeterminate`].
    pub(crate) async fn create_member(
        &self,
        session: &Session,
        node: &str,
        data: &[u8],
    ) -> Result<Made> {
        let mut made_dirs = false;
        loop {
            let options = session.options(zk::CreateMode::Ephemeral);
            match session.zk().create(node, data, &options).await {
                Ok((stat, _)) => return Ok(Made::New(stat)),
                Err(zk::Error::NoNode) if !made_dirs => {
                    session
                        .zk()
                        .mkdir(&self.path, &session.options(zk::CreateMode::Container))
                        .await
                        .map_err(|e| from_zk(&format!("create the folder {}", self.path), e))?;
                    made_dirs = true;
                }
                Err(zk::Error::NodeExists) => {
                    return match session.zk().check_stat(node).await {
                        Ok(stat) => Ok(Made::Existing(stat)),
                        Err(e) => Err(read_error(&format!("read {node}"), e)),
                    }
                }
                Err(e) if connection_trouble(&e) => {
                    return Err(Error::Indeterminate {
                        what: format!("create {node}"),
                    })
                }
                Err(e) => return Err(from_zk(&format!("create {node}"), e)),
            }
        }
    }
}
