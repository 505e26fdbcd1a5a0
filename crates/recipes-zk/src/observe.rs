//! Reading and following an election's leader: the first node in queue
//! order and its data, with one-shot watches on the folder's children and
//! on the leader's node.

use recipes_core::{Backoff, Error, LeaderInfo, LeaderObserver, Result};
use tokio::sync::oneshot;
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::error::from_zk;
use crate::names::observed_order;
use crate::session::Session;

/// The leader of the election at `dir`, and a watch on its node's data and
/// deletion; `None` when there is no candidate (or no folder).
pub(crate) async fn read_leader(
    session: &Session,
    dir: &str,
) -> Result<Option<(LeaderInfo, zk::OneshotWatcher)>> {
    let children = match session.zk().list_children(dir).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(None),
        Err(e) => return Err(from_zk(&format!("list {dir}"), e)),
    };
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

/// One look: arm a watch on the folder (its children, or its creation),
/// read the leader with a watch on its node, and publish it if it changed.
/// Returns the watches to wait on; an error means the client is closed or
/// the observer was dropped.
async fn look(
    session: &Session,
    dir: &str,
    last: &mut Option<LeaderInfo>,
    tx: &crossbeam_channel::Sender<LeaderInfo>,
) -> Result<(zk::OneshotWatcher, Option<zk::OneshotWatcher>)> {
    let folder = match session.zk().get_and_watch_children(dir).await {
        Ok((_, _, watcher)) => watcher,
        Err(zk::Error::NoNode) => match session.zk().check_and_watch_stat(dir).await {
            Ok((_, watcher)) => watcher,
            Err(e) => return Err(from_zk(&format!("watch {dir}"), e)),
        },
        Err(e) => return Err(from_zk(&format!("watch {dir}"), e)),
    };
    let leader = read_leader(session, dir).await?;
    let (info, node) = match leader {
        Some((info, watcher)) => (Some(info), Some(watcher)),
        None => (None, None),
    };
    // A moment without a leader is not reported.
    if info.is_some() && info != *last {
        if tx.send(info.clone().expect("checked")).is_err() {
            return Err(Error::Closed);
        }
        *last = info;
    }
    Ok((folder, node))
}

/// Follow the leader at `dir`; returns once the first look is done (the
/// watches are set, the current leader published).
pub(crate) fn watch_leader(client: &ZkClient, dir: &str) -> Result<LeaderObserver> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let (stop, stopped) = oneshot::channel();
    let (ready, first) = oneshot::channel();
    let (client2, dir) = (client.clone(), dir.to_owned());
    let started = client.runtime().spawn(async move {
        tokio::select! {
            _ = stopped => {}
            () = follow(client2, dir, tx, ready) => {}
        }
    });
    if !started {
        return Err(Error::Closed);
    }
    client.call("observe the election", async move {
        first.await.unwrap_or(Err(Error::Closed))
    })?;
    Ok(LeaderObserver::new(rx, stop))
}

async fn follow(
    client: ZkClient,
    dir: String,
    tx: crossbeam_channel::Sender<LeaderInfo>,
    ready: oneshot::Sender<Result<()>>,
) {
    let mut ready = Some(ready);
    let mut last = None;
    let mut backoff = Backoff::RECOVER;
    loop {
        let looked = match client.live_session().await {
            Ok(session) => look(&session, &dir, &mut last, &tx).await,
            Err(e) => Err(e),
        };
        if let Some(r) = ready.take() {
            let _ = r.send(looked.as_ref().map(drop).map_err(Clone::clone));
        }
        match looked {
            Ok((folder, node)) => {
                backoff.reset();
                let node_changed = async {
                    match node {
                        Some(w) => drop(w.changed().await),
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = folder.changed() => {}
                    () = node_changed => {}
                }
            }
            Err(Error::Closed) => return,
            Err(e) => {
                log::debug!("observer of {dir}: {e}; looking again");
                backoff.pause().await;
            }
        }
    }
}
