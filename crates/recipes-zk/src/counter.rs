//! The shared counter in Curator's `SharedCount` layout: the persistent node
//! `<path>` holds the value, 4 bytes big-endian (a 64-bit counter: 8), and
//! a write is a `setData` at the node's version. Our version is the node's
//! `dataVersion + 1` (0 while the node does not exist), so Curator, kazoo's
//! `Counter(support_curator=True)` and this crate share one counter. A
//! wait reads with a data watch (an exists-watch while the node is
//! absent), as Curator's `SharedCount` listener does.

use recipes_core::store::CounterBackend;
use recipes_core::{CounterKind, Error, Result, Versioned};
use zookeeper_client as zk;

use crate::barrier::{Epoch, Watches, ZkWaits};
use crate::client::ZkClient;
use crate::error::{from_zk, read_error};
use crate::names::{own_layout, validate_path};

/// A counter backend on ZooKeeper; see the module.
#[derive(Debug, Clone)]
pub struct ZkCounter {
    client: ZkClient,
    path: String,
    kind: CounterKind,
    waits: ZkWaits,
}

impl ZkCounter {
    pub(crate) fn new(client: &ZkClient, path: &str, kind: CounterKind) -> Result<ZkCounter> {
        validate_path(path)?;
        Ok(ZkCounter {
            waits: ZkWaits {
                client: client.clone(),
                path: path.to_owned(),
                count: 0,
            },
            client: client.clone(),
            path: path.to_owned(),
            kind,
        })
    }

    /// The value and version from a node's data and stat; a node with
    /// another recipe's children is refused.
    async fn decode(&self, zk: &zk::Client, data: &[u8], stat: &zk::Stat) -> Result<Versioned> {
        if stat.num_children > 0 {
            let children = zk
                .list_children(&self.path)
                .await
                .map_err(|e| from_zk(&format!("list {}", self.path), e))?;
            own_layout(&self.path, &children, None)?;
        }
        Ok(Versioned {
            value: self.kind.decode(&self.path, data)?,
            version: u64::try_from(stat.version).unwrap_or(0) + 1,
        })
    }

    async fn read(&self) -> Result<Versioned> {
        let session = self.client.live_session().await?;
        self.read_on(session.zk()).await
    }

    async fn read_on(&self, zk: &zk::Client) -> Result<Versioned> {
        match zk.get_data(&self.path).await {
            Ok((data, stat)) => self.decode(zk, &data, &stat).await,
            Err(zk::Error::NoNode) => Ok(Versioned {
                value: 0,
                version: 0,
            }),
            Err(e) => Err(from_zk(&format!("read {}", self.path), e)),
        }
    }
}

/// ZooKeeper's node version for our version `v` (≥ 1).
fn node_version(v: u64) -> Result<i32> {
    i32::try_from(v - 1)
        .map_err(|_| Error::invalid(format!("version {v} is not a ZooKeeper version")))
}

impl CounterBackend for ZkCounter {
    type Waits = ZkWaits;

    fn name(&self) -> &str {
        &self.path
    }

    fn kind(&self) -> CounterKind {
        self.kind
    }

    fn get(&self) -> Result<Versioned> {
        let me = self.clone();
        self.client
            .call("read the counter", async move { me.read().await })
    }

    fn set_if(&self, version: u64, value: i64) -> Result<bool> {
        let me = self.clone();
        let data = self.kind.encode(value);
        self.client.call("write the counter", async move {
            let session = me.client.live_session().await?;
            let zk = session.zk();
            let path = me.path.as_str();
            if version == 0 {
                let options = session.options(zk::CreateMode::Persistent);
                let mut made_parent = false;
                loop {
                    return match zk.create(path, &data, &options).await {
                        Ok(_) => Ok(true),
                        Err(zk::Error::NoNode) if !made_parent => {
                            // Curator's creatingParentContainersIfNeeded.
                            let parent = &path[..path.rfind('/').unwrap_or(0)];
                            if !parent.is_empty() {
                                let container = session.options(zk::CreateMode::Container);
                                match zk.mkdir(parent, &container).await {
                                    Ok(()) | Err(zk::Error::NodeExists) => {}
                                    Err(e) => return Err(from_zk(&format!("create {parent}"), e)),
                                }
                            }
                            made_parent = true;
                            continue;
                        }
                        // Refuse another recipe's node rather than say "conflict".
                        Err(zk::Error::NodeExists) => me.read().await.map(|_| false),
                        Err(e) => Err(from_zk(&format!("create the counter {path}"), e)),
                    };
                }
            }
            match zk.set_data(path, &data, Some(node_version(version)?)).await {
                Ok(_) => Ok(true),
                Err(zk::Error::BadVersion | zk::Error::NoNode) => Ok(false),
                Err(e) => Err(from_zk(&format!("write the counter {path}"), e)),
            }
        })
    }

    fn delete_if(&self, version: u64) -> Result<bool> {
        let me = self.clone();
        self.client.call("delete the counter", async move {
            let session = me.client.live_session().await?;
            let path = me.path.as_str();
            match session
                .zk()
                .delete(path, Some(node_version(version)?))
                .await
            {
                Ok(()) => Ok(true),
                Err(zk::Error::BadVersion | zk::Error::NoNode) => Ok(false),
                Err(e) => Err(from_zk(&format!("delete the counter {path}"), e)),
            }
        })
    }

    fn waits(&self) -> &ZkWaits {
        &self.waits
    }

    /// A data watch on the node (an exists watch while it is absent).
    async fn read_armed(&self, epoch: &Epoch) -> Result<(Versioned, Watches)> {
        let zk = epoch.0.zk();
        let watched = match zk.get_and_watch_data(&self.path).await {
            Ok(watched) => Some(watched),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(read_error(&format!("read {}", self.path), e)),
        };
        if let Some((data, stat, watcher)) = watched {
            let now = self.decode(zk, &data, &stat).await?;
            return Ok((now, Watches(watcher, None)));
        }
        let (stat, watcher) = zk
            .check_and_watch_stat(&self.path)
            .await
            .map_err(|e| read_error(&format!("watch {}", self.path), e))?;
        // Created since: read it (the exists-watch hears its next change).
        let now = match stat {
            None => Versioned {
                value: 0,
                version: 0,
            },
            Some(_) => self.read_on(zk).await?,
        };
        Ok((now, Watches(watcher, None)))
    }
}
