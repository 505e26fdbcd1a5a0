//! The ZooKeeper driver of the core contend engine
//! ([`recipes_core::store::engine`]): a folder of protected ephemeral-sequential
//! nodes, Curator's layout. The engine runs the loop; this file says how
//! ZooKeeper creates, lists, watches and deletes.
//!
//! - **enter**: create `<dir>/_c_<uuid>-<lock_name><seq>`, with the first
//!   listing sent right behind it (`create.rs`: one round trip for both);
//!   when the reply is lost, find the node by its uuid.
//! - **list**: the children, in serial-number order around our sequence,
//!   with a watch on them: for the listing that makes us the holder, that
//!   watch is the loss watch's first stage (it fires when any contender
//!   comes or goes, ours included), so an uncontended cycle costs create,
//!   list and delete — no read of our own node. Not for a read-write
//!   lock's reader: readers hold together and come and go at once, so
//!   each reader's children watch would fire at the others' every cycle
//!   (a notification to each, and its node's watch set after all); a
//!   reader lists without a watch and watches its own node as it holds.
//!   For a mutex or a latch, after a wait that saw the one node ahead of
//!   ours deleted, only a read of our own node: no node is ever created
//!   ahead of ours (sequence order), so ours is first if it is still there
//!   (an operator may have deleted it); that read's watch is the loss
//!   watch's. Not for a read-write lock: its downgrade creates a reader
//!   in the deleted writer's place, so its waiters always list again.
//! - **wait**: a one-shot watch on the node ahead (a mutex, a latch) or,
//!   for semaphore permits (any release may admit us), the children watch
//!   of the listing the decision was made on.
//! - **confirm**: nothing to ask; the fence is our node's czxid.
//! - **remove**: list the children on the same session — the server answers
//!   it after a create still queued in the client — and delete the one with
//!   our uuid.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::engine::{ContendDriver, Entered, Listing, Role, Rule};
use recipes_core::store::{until_done, Backoff, SessionLease};
use recipes_core::{Error, LossSignal, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::create::create_protected;
use crate::error::{from_zk, read_error};
use crate::names::{
    enclosing_semaphore, fresh_uuid, has_semaphore_folders, in_layout, inside_semaphore,
    is_contender_of, is_ours, own_layout, queue_order, semaphore_layout, semaphore_size,
    sequence_of, READ,
};
use crate::node_lease::delete_node;
use crate::session::Session;

/// What a contender asks for.
#[derive(Debug, Clone)]
pub(crate) struct Contender {
    /// The folder the contenders' nodes live in.
    pub(crate) dir: String,
    /// Curator's lock name: `lock-`, `latch-`, `lease-`, and a read-write
    /// lock's `__READ__` or `__WRIT__` (whose listing holds both).
    pub(crate) lock_name: &'static str,
    /// The node's data.
    pub(crate) data: Vec<u8>,
    /// The recipe's queue rule.
    pub(crate) rule: Rule,
    /// A caller's lock or election, refused inside a semaphore's own
    /// folders; false for the semaphore's internal mutex and permits.
    pub(crate) outside_semaphores: bool,
}

/// A node at the head of the queue.
pub(crate) struct Acquired {
    pub(crate) session: Arc<Session>,
    pub(crate) epoch: Arc<SessionLease>,
    pub(crate) node: String,
    pub(crate) czxid: i64,
    /// The watch the winning listing set on the folder's children (none
    /// for a reader, whose listing sets none, or a downgraded reader).
    pub(crate) children: Option<zk::OneshotWatcher>,
    /// The watch on our own node that the read confirming it was still
    /// there set (the win after the one node ahead was deleted): the loss
    /// watch's from the start.
    pub(crate) own: Option<zk::OneshotWatcher>,
}

/// The contend driver over one folder of a client.
#[derive(Debug, Clone)]
pub(crate) struct NodeDriver {
    pub(crate) client: ZkClient,
    pub(crate) contender: Contender,
}

/// Names our node before it exists: the session and the uuid.
pub(crate) struct Ticket {
    session: Arc<Session>,
    dir: String,
    uuid: String,
}

/// Our node as created.
pub(crate) struct Entry {
    node: String,
    /// The node's name within the folder: its id in the queue.
    name: String,
    seq: i32,
    czxid: i64,
    /// The watch of the latest listing on the folder's children.
    children: Option<zk::OneshotWatcher>,
    /// The listing sent right behind the create, for the first `list`.
    listed: Option<crate::create::Listed>,
    /// The latest listing showed exactly one contender ahead of ours.
    alone_behind: bool,
    /// A wait saw that one deleted: ours is first (no node is ever
    /// created ahead of ours), and the next listing is ours alone if ours
    /// is still there.
    first: bool,
    /// That listing's watch on our node ([`Acquired::own`]).
    own: Option<zk::OneshotWatcher>,
    /// The folder was read and stores no semaphore size: its `locks` or
    /// `leases` children are other locks' folders.
    not_a_semaphore: bool,
}

/// The engine's epoch: the session and its lease epoch.
pub(crate) type Epoch = (Arc<Session>, Arc<SessionLease>);

impl NodeDriver {
    pub(crate) fn new(client: &ZkClient, contender: Contender) -> NodeDriver {
        NodeDriver {
            client: client.clone(),
            contender,
        }
    }

    /// Whether the deletion of the one node ahead of ours makes ours
    /// first without another listing: for a mutex or a latch, whose nodes
    /// are never created ahead of ours. Never for a read-write lock: a
    /// downgrade puts a reader in the deleted writer's place, ahead of us.
    fn first_after_deletion(&self, entry: &Entry) -> bool {
        self.contender.rule.holders() == Some(1) && entry.alone_behind
    }

    /// Contend until held or `deadline`; on the runtime.
    pub(crate) async fn acquire(&self, deadline: Option<Instant>) -> Result<Option<Acquired>> {
        recipes_core::store::engine::contend(self, deadline).await
    }
}

impl ContendDriver for NodeDriver {
    type Epoch = Epoch;
    type Ticket = Ticket;
    type Entry = Entry;
    type Id = String;
    type Won = Acquired;

    fn rule(&self) -> Rule {
        self.contender.rule
    }

    /// A read-write lock's entries are readers (`__READ__`) or writers
    /// (`__WRIT__`, and anything else, as Curator's reader counts it); every
    /// other recipe's queue has one role.
    fn role(&self, id: &String) -> Role {
        match self.contender.rule {
            Rule::Mutex => Role::Mutex,
            Rule::Latch => Role::Participant,
            Rule::Leases(_) => Role::Permit,
            Rule::ReadWrite if is_contender_of(id, READ) => Role::Reader,
            Rule::ReadWrite => Role::Writer,
        }
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        if !self.client.runtime().spawn(task) {
            log::debug!("client closed: the session's end removes our node");
        }
    }

    fn rpc_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }

    /// A live session's epoch; a session that ended (zookeeper-client also
    /// gives one up on its own after an outage longer than its timeout) is
    /// replaced. Connection errors go back to the engine, which retries
    /// them until the deadline. A lost epoch is renewed with a round trip,
    /// which zookeeper-client holds while disconnected: a timed call gives
    /// up `rpc_timeout` after its deadline (`None`), as the engine cuts off
    /// an attempt stuck in a request.
    async fn epoch(&self, deadline: Option<Instant>) -> Result<Option<Epoch>> {
        let live = async {
            loop {
                let tried = match self.client.live_session().await {
                    Ok(session) => session.live_epoch().await.map(|e| (session, e)),
                    Err(e) => Err(e),
                };
                match tried {
                    Ok(epoch) => return Ok(Some(epoch)),
                    // Ended since `live_session`: the next one is new.
                    Err(Error::SessionExpired) => {}
                    Err(e) => return Err(e),
                }
            }
        };
        match deadline.and_then(|d| d.checked_add(self.rpc_timeout())) {
            Some(hard) => tokio::time::timeout_at(hard, live)
                .await
                .unwrap_or(Ok(None)),
            None => live.await,
        }
    }

    fn epoch_signal(&self, epoch: &Epoch) -> LossSignal {
        epoch.1.signal()
    }

    fn ticket(&self, epoch: &Epoch) -> Ticket {
        Ticket {
            session: epoch.0.clone(),
            dir: self.contender.dir.clone(),
            uuid: fresh_uuid(),
        }
    }

    async fn enter(&self, epoch: &Epoch, ticket: &mut Ticket) -> Result<Entered<Self>> {
        let session = &epoch.0;
        if self.contender.outside_semaphores {
            refuse_inside_semaphore(session, &self.contender.dir).await?;
        }
        let created = create_protected(session, &self.contender, &ticket.uuid).await?;
        let (node, czxid, owner) = (created.node, created.czxid, created.owner);
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
        let seq = sequence_of(&name).ok_or_else(|| Error::Backend {
            message: format!("the server named our node {node}, which has no sequence suffix"),
            retryable: false,
            source: None,
        })?;
        let entry = Entry {
            node,
            name,
            seq,
            czxid,
            children: None,
            listed: created.listed,
            alone_behind: false,
            first: false,
            own: None,
            not_a_semaphore: false,
        };
        Ok((entry, None))
    }

    fn ours<'e>(&self, entry: &'e Entry) -> &'e String {
        &entry.name
    }

    /// The children — or, when the wait before saw the one contender
    /// ahead of ours deleted, ours alone if our node is still there: one
    /// read of it, whose watch the holder's loss watch keeps. That
    /// deletion says nothing of ours: an operator may have deleted ours
    /// meanwhile, and the contender behind it is then first (the listing
    /// is empty: the engine queues again).
    async fn list(&self, epoch: &Epoch, entry: &mut Entry) -> Result<Listing<String>> {
        let (session, dir) = (&epoch.0, &self.contender.dir);
        if std::mem::take(&mut entry.first) {
            let contenders = match session.zk().get_and_watch_data(&entry.node).await {
                Ok((_, stat, own)) if stat.ephemeral_owner == session.id() => {
                    entry.own = Some(own);
                    vec![entry.name.clone()]
                }
                Ok(_) | Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => return Err(read_error(&format!("read {}", entry.node), e)),
            };
            return Ok(Listing {
                contenders,
                revision: 0,
            });
        }
        let lock_name = self.contender.lock_name;
        let listed = match entry.listed.take() {
            Some(listed) => Ok(listed),
            None => crate::create::list_children(session, &self.contender).await,
        };
        let children = match listed {
            Ok((children, watcher)) => {
                entry.children = watcher;
                children
            }
            // The folder was deleted, and ours with it (an operator's
            // `deleteall` of a stuck lock): the engine sees ours gone and
            // queues again, making the folder anew.
            Err(zk::Error::NoNode) => {
                return Ok(Listing {
                    contenders: Vec::new(),
                    revision: 0,
                })
            }
            // A session that ended has fired the epoch's loss first: the
            // engine starts over on this error.
            Err(e) => return Err(read_error(&format!("list {dir}"), e)),
        };
        let mut layout = own_layout(dir, &children, Some(lock_name));
        if layout.is_ok() && !entry.not_a_semaphore && has_semaphore_folders(&children) {
            // A child named `locks` or `leases`: a semaphore's folder only
            // if the folder stores a size (one read per entry).
            match semaphore_size_at(session, dir).await? {
                Some(_) => layout = Err(semaphore_layout(dir)),
                None => entry.not_a_semaphore = true,
            }
        }
        if let Err(refused) = layout {
            // Our node goes now, not after the refusal (the engine's removal
            // retries if this fails).
            let _ = delete_node(session, &entry.node).await;
            return Err(refused);
        }
        let children: Vec<String> = children
            .into_iter()
            .filter(|c| in_layout(c, lock_name))
            .collect();
        let contenders: Vec<String> = queue_order(&children, entry.seq)
            .into_iter()
            .map(|(_, name)| name)
            .collect();
        entry.alone_behind = contenders.iter().position(|c| *c == entry.name) == Some(1);
        Ok(Listing {
            contenders,
            revision: 0,
        })
    }

    async fn wait(&self, epoch: &Epoch, entry: &mut Entry, ahead: &String) -> Result<()> {
        let (session, dir) = (&epoch.0, &self.contender.dir);
        // The watch fires when the node changes or goes, and on session
        // expiry; the engine also wakes at the deadline and on epoch loss.
        let watcher = if self.contender.rule.holders().is_some_and(|n| n > 1) {
            // Any permit's release may admit us, not only the one ahead: the
            // watch is the one the listing we decided on set, so a release
            // since that listing has fired it. A fresh watch would miss it
            // (the holder we wait on still there, another one gone).
            match entry.children.take() {
                Some(watcher) => watcher,
                None => return Ok(()),
            }
        } else {
            let watched = format!("{dir}/{ahead}");
            match session.zk().get_and_watch_data(&watched).await {
                Ok((_, _, watcher)) => watcher,
                // Gone since the listing that showed it.
                Err(zk::Error::NoNode) => {
                    entry.first = self.first_after_deletion(entry);
                    return Ok(());
                }
                Err(e) => return Err(read_error(&format!("watch {watched}"), e)),
            }
        };
        log::debug!("[{}] {} waits for {ahead}", session.label(), entry.node);
        let event = watcher.changed().await;
        // Only the deletion of the one node ahead makes ours first; a data
        // change, a session event, or another node still ahead: read again.
        entry.first =
            event.event_type == zk::EventType::NodeDeleted && self.first_after_deletion(entry);
        Ok(())
    }

    async fn confirm(
        &self,
        _epoch: &Epoch,
        entry: &mut Entry,
        _listing: &Listing<String>,
    ) -> Result<Option<i64>> {
        Ok(Some(entry.czxid))
    }

    async fn remove(ticket: Ticket) {
        delete_ours(&ticket.session, &ticket.dir, &ticket.uuid).await;
    }

    fn won(&self, epoch: Epoch, _ticket: Ticket, entry: Entry, _fence: i64) -> Acquired {
        let (session, epoch) = epoch;
        Acquired {
            session,
            epoch,
            node: entry.node,
            czxid: entry.czxid,
            children: entry.children,
            own: entry.own,
        }
    }
}

/// The paths of the children of `dir` created with `uuid` (none when `dir`
/// is missing).
///
/// It is asked after a create whose outcome we do not know (its reply was
/// lost, or the acquisition is being undone), maybe of another server of
/// the ensemble than the one that took the create: a follower may not have
/// applied it yet, and would list no node of ours while one exists (then
/// left to stand, ahead of us, until the session ends). A `sync` first has
/// the server catch up with the leader; the listing is sent right behind
/// it on the same session, so it is answered after the sync, in the same
/// round trip.
pub(crate) async fn ours(
    session: &Session,
    dir: &str,
    uuid: &str,
) -> std::result::Result<Vec<String>, zk::Error> {
    let synced = session.zk().sync(dir);
    let listed = session.zk().list_children(dir);
    synced.await?;
    match listed.await {
        Ok(children) => Ok(children
            .iter()
            .filter(|c| is_ours(c, uuid))
            .map(|c| format!("{dir}/{c}"))
            .collect()),
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Delete every child of `dir` created with `uuid`, on `session`. Retries
/// until done or the session is gone (which deletes ephemerals anyway).
pub(crate) async fn delete_ours(session: &Session, dir: &str, uuid: &str) {
    let what = format!("[{}] removing ours from {dir}", session.label());
    let attempt = || async {
        match ours(session, dir, uuid).await {
            Ok(paths) => {
                for path in paths {
                    delete_node(session, &path).await?;
                }
                Ok(())
            }
            Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => Ok(()),
            Err(e) => Err(from_zk(&format!("list {dir}"), e)),
        }
    };
    until_done(&what, Backoff::RECOVER, || false, attempt).await;
}

/// Refuse `dir` when it is `<sem>/locks` or `<sem>/leases` and `<sem>`
/// holds a semaphore's size: a lock or election there would join the
/// semaphore's own queue. One read, only for names ending so.
async fn refuse_inside_semaphore(session: &Session, dir: &str) -> Result<()> {
    let Some(semaphore) = enclosing_semaphore(dir) else {
        return Ok(());
    };
    match semaphore_size_at(session, semaphore).await? {
        Some(size) => Err(inside_semaphore(dir, semaphore, size)),
        None => Ok(()),
    }
}

/// The semaphore size `path` stores, if it exists and stores one.
async fn semaphore_size_at(session: &Session, path: &str) -> Result<Option<u32>> {
    match session.zk().get_data(path).await {
        Ok((data, _)) => Ok(semaphore_size(&data)),
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(read_error(&format!("read {path}"), e)),
    }
}
