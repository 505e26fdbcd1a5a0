//! Group membership in Curator's `GroupMember` layout, as the store's verbs
//! of the core group loops ([`recipes_core::store::engine::group`]).
//!
//! A member is the ephemeral node `<path>/<id>` on its client's session,
//! holding the member's data; `<path>` is a container node made on the
//! first join (as Curator's `creatingParentContainersIfNeeded`). A read
//! lists `<path>`'s children with a children watch (or an exists-watch
//! while `<path>` is absent), then reads each member's data. The view's
//! version is `<path>`'s `pzxid` (the zxid of its last child change, which
//! only rises, even when the container is deleted and made again), its
//! count of changes the node's `cversion`. A member leaves when its
//! session expires: within the session timeout of a crash.
//!
//! A joined member watches its own node (an exists-watch): the node gone,
//! or another session's, while our session lives — deleted by hand — is
//! the membership's loss.

use recipes_core::store::engine::group::{GroupStore, GroupView, Member};
use recipes_core::store::{id_taken, quote, until_done, Backoff, EntryWatcher};
use recipes_core::{Error, Result};
use zookeeper_client as zk;

use crate::barrier::{Epoch, Made, Ticket, Watches, ZkWaits};
use crate::client::ZkClient;
use crate::error::{from_zk, read_error};
use crate::names::{own_layout, validate_path};
use crate::session::Session;

/// A ZooKeeper group in Curator's `GroupMember` layout: a member is the
/// ephemeral `<path>/<id>` holding its data, under a container `<path>`;
/// a view's version is `<path>`'s `pzxid`, its count of changes the
/// `cversion` (0 and `Some(0)` while `<path>` is absent).
pub type GroupMember = recipes_core::Group<ZkWaits>;

impl ZkWaits {
    pub(crate) fn group(client: &ZkClient, path: &str) -> Result<ZkWaits> {
        validate_path(path)?;
        Ok(ZkWaits {
            client: client.clone(),
            path: path.to_owned(),
            count: 0,
        })
    }

    fn member_path(&self, id: &str) -> String {
        format!("{}/{id}", self.path)
    }

    /// The children of `<path>` (none while it is absent), refused when
    /// they are another recipe's layout.
    async fn children(&self, session: &Session) -> Result<Vec<String>> {
        let children = match session.zk().list_children(&self.path).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(read_error(&format!("list {}", self.path), e)),
        };
        own_layout(&self.path, &children, None)?;
        Ok(children)
    }
}

impl GroupStore for ZkWaits {
    type Ticket = Ticket;

    fn ticket(&self, epoch: &Epoch, id: &str) -> Ticket {
        Ticket {
            session: epoch.0.clone(),
            node: self.member_path(id),
        }
    }

    async fn join(&self, epoch: &Epoch, ticket: &Ticket, data: &[u8]) -> Result<bool> {
        let session = &epoch.0;
        let id = id_of(&ticket.node);
        // Every read of the group refuses another recipe's nodes: a member
        // named like one would make the group unreadable.
        if own_layout(&self.path, &[id.to_owned()], None).is_err() {
            return Err(Error::invalid(format!(
                "the member id {} of the group {} is named like another recipe's node \
                 (…-lock-N, …-latch-N, …-lease-N, …-__READ__N, …-__WRIT__N), which every \
                 read of the group would refuse: choose another id",
                quote(id),
                quote(&self.path)
            )));
        }
        self.children(session).await?;
        match self.create_member(session, &ticket.node, data).await? {
            Made::New(_) => Ok(true),
            // On our session: a lost reply, or another membership of ours
            // (the engine tells).
            Made::Existing(Some(stat)) if stat.ephemeral_owner == session.id() => Ok(false),
            Made::Existing(Some(_)) => Err(id_taken(&self.path, id_of(&ticket.node))),
            // Gone since: try again.
            Made::Existing(None) => Err(Error::backend(
                format!("{} vanished while joining", ticket.node),
                true,
                zk::Error::NoNode,
            )),
        }
    }

    async fn read(&self, epoch: &Epoch, arm: bool) -> Result<(GroupView, Option<Watches>)> {
        let zk = epoch.0.zk();
        loop {
            let listed = if arm {
                zk.get_and_watch_children(&self.path)
                    .await
                    .map(|(c, s, w)| (c, s, Some(w)))
            } else {
                zk.get_children(&self.path).await.map(|(c, s)| (c, s, None))
            };
            let (children, stat, watch) = match listed {
                Ok(listed) => listed,
                Err(zk::Error::NoNode) => {
                    // Not there: no member; watch its creation.
                    let watch = if arm {
                        let watched = zk
                            .check_and_watch_stat(&self.path)
                            .await
                            .map_err(|e| read_error(&format!("watch {}", self.path), e))?;
                        match watched {
                            (None, w) => Some(Watches(w, None)),
                            // Made since the listing: this watch is on its
                            // data, and a member's join would not fire it.
                            (Some(_), _) => continue,
                        }
                    } else {
                        None
                    };
                    let empty = GroupView {
                        members: Vec::new(),
                        version: 0,
                        changes: Some(0),
                    };
                    return Ok((empty, watch));
                }
                Err(e) => return Err(read_error(&format!("list {}", self.path), e)),
            };
            own_layout(&self.path, &children, None)?;
            let mut members = Vec::with_capacity(children.len());
            let mut vanished = false;
            for id in children {
                match zk.get_data(&self.member_path(&id)).await {
                    Ok((data, _)) => members.push(Member { id, data }),
                    Err(zk::Error::NoNode) => {
                        vanished = true;
                        break;
                    }
                    Err(e) => return Err(read_error(&format!("read {}/{id}", self.path), e)),
                }
            }
            if vanished {
                // A member left during the read: read again, so that the
                // view matches its version.
                continue;
            }
            members.sort_by(|a, b| a.id.cmp(&b.id));
            let view = GroupView {
                members,
                version: u64::try_from(stat.pzxid).unwrap_or(0),
                changes: u64::try_from(stat.cversion).ok(),
            };
            return Ok((view, watch.map(|w| Watches(w, None))));
        }
    }

    type Member = MemberNode;

    fn member(&self, ticket: &Ticket) -> MemberNode {
        MemberNode {
            session: ticket.session.clone(),
            node: ticket.node.clone(),
        }
    }

    async fn remove(ticket: Ticket) {
        let what = format!("[{}] removing {}", ticket.session.label(), ticket.node);
        let delete = || delete_ours(&ticket.session, &ticket.node);
        until_done(&what, Backoff::RECOVER, || false, delete).await;
    }
}

/// The member id of a member's node: its last part.
fn id_of(node: &str) -> &str {
    node.rsplit('/').next().unwrap_or(node)
}

/// Delete `node` if it is ours (an ephemeral node of `session`): another
/// session's member of the same id is never touched.
///
/// Asked when a join's outcome is unknown, maybe of a follower behind the
/// leader: a `sync` first (see [`crate::driver::ours`]), so a member we
/// made is not missed and left standing until the session ends.
async fn delete_ours(session: &Session, node: &str) -> Result<()> {
    let synced = session.zk().sync(node);
    let stat = session.zk().check_stat(node);
    let synced = match synced.await {
        Ok(()) => Ok(()),
        Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => return Ok(()),
        Err(e) => Err(e),
    };
    let stat = match synced.and(stat.await) {
        Ok(Some(stat)) if stat.ephemeral_owner == session.id() => stat,
        Ok(_) => return Ok(()),
        // The session is gone, and its ephemeral node with it.
        Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => return Ok(()),
        Err(e) => return Err(read_error(&format!("read {node}"), e)),
    };
    match session.zk().delete(node, Some(stat.version)).await {
        Ok(()) | Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(()),
        Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => Ok(()),
        Err(e) => Err(from_zk(&format!("leave {node}"), e)),
    }
}

/// Our member's node, followed by core's `watch_held` until it is deleted
/// or another session's.
pub struct MemberNode {
    session: std::sync::Arc<Session>,
    node: String,
}

impl EntryWatcher for MemberNode {
    type Watch = Option<zk::OneshotWatcher>;

    /// An exists-watch on our node: `None` when it is absent or another
    /// session's.
    async fn watch(&self) -> Result<Option<Self::Watch>> {
        let s = &self.session;
        match s.zk().check_and_watch_stat(&self.node).await {
            Ok((Some(stat), w)) if stat.ephemeral_owner == s.id() => Ok(Some(Some(w))),
            Ok(_) => Ok(None),
            Err(e) => Err(from_zk(&format!("watch our member {}", self.node), e)),
        }
    }

    /// Its deletion; any other event (its data set, the connection's
    /// state) is a watch to open again.
    async fn deleted(watch: &mut Self::Watch) -> Result<()> {
        let again = |event| Error::Backend {
            message: format!("our member's watch heard {event}: watch it again"),
            retryable: true,
            source: None,
        };
        let Some(w) = watch.take() else {
            return Err(again("nothing"));
        };
        match w.changed().await.event_type {
            zk::EventType::NodeDeleted => Ok(()),
            other => Err(again(&format!("{other:?}"))),
        }
    }
}

impl std::fmt::Debug for MemberNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberNode")
            .field("node", &self.node)
            .finish()
    }
}
