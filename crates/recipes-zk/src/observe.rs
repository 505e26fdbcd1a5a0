//! Reading and following an election's leader: the first node in queue
//! order and its data; the observer ([`recipes_core::store::follow_leader`]) re-arms
//! one-shot watches on the folder's children and on the leader's node.

use recipes_core::store::LeaderWatch;
use recipes_core::{LeaderInfo, LeaderObserver, Result};
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::error::from_zk;
use crate::names::{is_contender_of, observed_order};
use crate::session::Session;

/// The leader of the election at `dir`, and a watch on its node's data and
/// deletion; `None` when there is no candidate (or no folder).
pub(crate) async fn read_leader(
    session: &Session,
    dir: &str,
    lock_name: &str,
) -> Result<Option<(LeaderInfo, zk::OneshotWatcher)>> {
    let mut children = match session.zk().list_children(dir).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(None),
        Err(e) => return Err(from_zk(&format!("list {dir}"), e)),
    };
    children.retain(|c| is_contender_of(c, lock_name));
    for (_, name) in observed_order(&children) {
        let node = format!("{dir}/{name}");
        match session.zk().get_and_watch_data(&node).await {
            Ok((value, _, watcher)) => {
                let info = LeaderInfo {
                    holder: node,
                    value,
                };
                return Ok(Some((info, watcher)));
            }
            // Gone since the listing: the next one leads.
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(from_zk(&format!("read {node}"), e)),
        }
    }
    Ok(None)
}

/// The watches of one look: on the folder (its children, or its creation)
/// and on the leader's node.
struct Watch {
    client: ZkClient,
    dir: String,
    lock_name: &'static str,
    folder: Option<zk::OneshotWatcher>,
    node: Option<zk::OneshotWatcher>,
}

/// Resolves when `watcher` fires; never when there is none.
async fn fired(watcher: Option<zk::OneshotWatcher>) {
    match watcher {
        Some(w) => drop(w.changed().await),
        None => std::future::pending().await,
    }
}

impl LeaderWatch for Watch {
    async fn look(&mut self) -> Result<Option<(LeaderInfo, i64)>> {
        let session = self.client.live_session().await?;
        let dir = self.dir.as_str();
        let folder = loop {
            match session.zk().get_and_watch_children(dir).await {
                Ok((_, _, watcher)) => break watcher,
                Err(zk::Error::NoNode) => match session.zk().check_and_watch_stat(dir).await {
                    // Still absent: its creation fires the watch.
                    Ok((None, watcher)) => break watcher,
                    // Made since the listing: this watch is on its data,
                    // and a candidate's arrival would not fire it.
                    Ok((Some(_), _)) => continue,
                    Err(e) => return Err(from_zk(&format!("watch {dir}"), e)),
                },
                Err(e) => return Err(from_zk(&format!("watch {dir}"), e)),
            }
        };
        self.folder = Some(folder);
        let leader = read_leader(&session, dir, self.lock_name).await?;
        Ok(leader.map(|(info, node)| {
            self.node = Some(node);
            // A node is one term: its path tells terms apart.
            (info, 0)
        }))
    }

    async fn changed(&mut self) -> Result<()> {
        let (folder, node) = (self.folder.take(), self.node.take());
        tokio::select! {
            () = fired(folder) => {}
            () = fired(node) => {}
        }
        Ok(())
    }
}

/// Follow the leader at `dir` (see [`recipes_core::store::ElectionBackend::observe`]).
pub(crate) fn watch_leader(
    client: &ZkClient,
    dir: &str,
    lock_name: &'static str,
) -> Result<LeaderObserver> {
    let watch = Watch {
        client: client.clone(),
        dir: dir.to_owned(),
        lock_name,
        folder: None,
        node: None,
    };
    recipes_core::store::follow_leader(client.runtime(), client.rpc_timeout(), watch)
}
