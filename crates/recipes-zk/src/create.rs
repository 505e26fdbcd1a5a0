//! A contender's node created, with the folder's listing sent right
//! behind the create on the same session.
//!
//! ZooKeeper answers a session's requests in the order they were sent, and
//! zookeeper-client sends each request when its method is called (not when
//! its future is polled). A listing sent right after the create is
//! therefore answered after the create was applied: it shows our node and
//! every node created before it, exactly as a listing sent after the
//! create's reply would, and it sets the same watch. Sent together, the two
//! cost one round trip instead of two; the engine's first listing uses
//! it. When the create fails, the listing is dropped and the usual path
//! (folders made, a lost reply recovered by the uuid) runs as before.

use std::future::Future;
use std::pin::Pin;

use recipes_core::Result;
use zookeeper_client as zk;

use crate::driver::{ours, Contender};
use crate::error::{connection_trouble, from_zk};
use crate::names::protected_prefix;
use crate::session::Session;

/// Our node as created.
pub(crate) struct Created {
    pub(crate) node: String,
    pub(crate) czxid: i64,
    pub(crate) owner: i64,
    /// The folder's children and their watch (none for a reader), as
    /// listed right behind the create (none when the node was found again after a lost reply, or
    /// the listing failed: the engine lists then).
    pub(crate) listed: Option<Listed>,
}

/// A folder's children and, unless listed for a reader, their watch.
pub(crate) type Listed = (Vec<String>, Option<zk::OneshotWatcher>);

/// Create our protected node; recover it by its uuid when the reply was
/// lost.
pub(crate) async fn create_protected(
    session: &Session,
    c: &Contender,
    uuid: &str,
) -> Result<Created> {
    let prefix = format!("{}/{}", c.dir, protected_prefix(uuid, c.lock_name));
    let mut made_dirs = false;
    let mut backoff = recipes_core::store::Backoff::RETRY;
    let options = session.options(zk::CreateMode::EphemeralSequential);
    loop {
        // Both requests leave now, in this order.
        let create = session.zk().create(&prefix, &c.data, &options);
        let listing = list_children(session, c);
        match create.await {
            Ok((stat, seq)) => {
                let listed = listing.await.ok();
                return Ok(Created {
                    node: format!("{prefix}{seq}"),
                    czxid: stat.czxid,
                    owner: stat.ephemeral_owner,
                    listed,
                });
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
                backoff.pause().await;
            }
            Err(e) => return Err(from_zk(&format!("create a node under {}", c.dir), e)),
        }
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

/// Our node found again by its uuid after a create whose reply was lost.
async fn find_ours(session: &Session, c: &Contender, uuid: &str) -> Result<Option<Created>> {
    let mut backoff = recipes_core::store::Backoff::RETRY;
    let found = loop {
        match ours(session, &c.dir, uuid).await {
            Ok(found) => break found,
            Err(e) if connection_trouble(&e) => backoff.pause().await,
            Err(e) => return Err(from_zk(&format!("list {}", c.dir), e)),
        }
    };
    let Some(node) = found.into_iter().next() else {
        return Ok(None);
    };
    match session.zk().check_stat(&node).await {
        Ok(stat) => Ok(stat.map(|stat| Created {
            node,
            czxid: stat.czxid,
            owner: stat.ephemeral_owner,
            listed: None,
        })),
        Err(e) => Err(from_zk(&format!("read {node}"), e)),
    }
}

/// The children of `c`'s folder, with a watch on them unless `c` is a
/// reader (a reader's holding is watched on its own node: a children
/// watch of readers fires at each other's comings and goings). The
/// request leaves at the call.
pub(crate) fn list_children<'s>(
    session: &'s Session,
    c: &Contender,
) -> Pin<Box<dyn Future<Output = std::result::Result<Listed, zk::Error>> + Send + 's>> {
    if c.lock_name == crate::names::READ {
        let listed = session.zk().get_children(&c.dir);
        Box::pin(async move { listed.await.map(|(children, _)| (children, None)) })
    } else {
        let listed = session.zk().get_and_watch_children(&c.dir);
        Box::pin(async move { listed.await.map(|(children, _, w)| (children, Some(w))) })
    }
}
