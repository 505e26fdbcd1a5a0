//! `InterProcessSemaphoreV2`'s layout: at most N permits across processes.
//!
//! Layout under `<path>`: an internal mutex under `<path>/locks` lets one
//! waiter at a time admit itself; permits are ephemeral-sequential nodes
//! `<path>/leases/_c_<uuid>-lease-<seq10>`. A waiter holding the internal
//! mutex creates its permit node, then waits until at most N permit nodes
//! exist — counted in the same read that confirms its own node exists — and
//! releases the internal mutex. N is stored as the decimal data of `<path>`;
//! a client that asks for another N is refused.
//!
//! Permits are concurrent by design: they carry no shared fencing order.
//! Each has its own loss signal and in-store fenced writes
//! ([`ZkNodeLease`]).

use recipes_core::store::engine::{admit, Admission, Rule, Unlock};
use recipes_core::store::{permits_name_taken, Backoff};
use recipes_core::{Error, Result};
use tokio::time::Instant as TokioInstant;
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::driver::{Acquired, Contender, NodeDriver};
use crate::error::{connection_trouble, from_zk};
use crate::names::{own_layout, validate_path, LEASE, LOCK};
use crate::node_lease::{delete_until_done, ZkNode, ZkNodeLease};

/// A counting semaphore shared with every process, Java (Curator
/// `InterProcessSemaphoreV2`) ones included, that uses the same path; see
/// [`recipes_core::Semaphore`] for the API and what holds under pause and
/// partition. Made by [`Client::semaphore`](crate::Client::semaphore); a
/// size that differs from the stored one is refused at acquisition.
pub type InterProcessSemaphore = recipes_core::Semaphore<ZkSemaphore>;

/// The ZooKeeper semaphore backend: core's semaphore over this client's
/// verbs (`locks.rs`); use it through [`InterProcessSemaphore`].
pub type ZkSemaphore = recipes_core::store::QueueSemaphore<ZkClient>;

/// A semaphore's two folders and size, as core's
/// [`LockStore::Semaphore`](recipes_core::store::LockStore::Semaphore).
#[derive(Debug, Clone)]
pub struct SemaphoreFolders(Drivers);

impl SemaphoreFolders {
    pub(crate) fn new(client: &ZkClient, path: &str, permits: u32) -> Result<SemaphoreFolders> {
        validate_path(path)?;
        recipes_core::store::check_permits(&format!("the ZooKeeper semaphore {path}"), permits)?;
        let folder = |name: &str, lock_name, rule| {
            let contender = Contender {
                dir: format!("{path}/{name}"),
                lock_name,
                data: Vec::new(),
                rule,
                outside_semaphores: false,
            };
            NodeDriver::new(client, contender)
        };
        let inner = Drivers {
            client: client.clone(),
            path: path.to_owned(),
            permits,
            lock: folder("locks", LOCK, Rule::Mutex),
            leases: folder("leases", LEASE, Rule::Leases(permits as usize)),
        };
        Ok(SemaphoreFolders(inner))
    }

    /// Admit one permit: core's semaphore over the two folders.
    pub(crate) fn admit(
        &self,
        deadline: Option<TokioInstant>,
    ) -> impl std::future::Future<Output = Result<Option<ZkNodeLease>>> + Send + 'static {
        let this = self.0.clone();
        async move {
            // Checked here, not as the admission's `SizeCheck`, so that a
            // timed call gives up `rpc_timeout` after its deadline (`None`)
            // as the engine's attempts do: zookeeper-client holds requests
            // while disconnected.
            let sized = this.ensure_size();
            let sized = match deadline.and_then(|d| d.checked_add(this.client.rpc_timeout())) {
                Some(hard) => tokio::time::timeout_at(hard, sized).await,
                None => Ok(sized.await),
            };
            let Ok(sized) = sized else {
                return Ok(None);
            };
            sized?;
            let admission = Admission {
                lock: this.lock.clone(),
                permits: this.leases.clone(),
                size: (),
            };
            let acquired = admit(&admission, deadline).await?;
            Ok(acquired.map(|a| ZkNode::held(this.client.clone(), a)))
        }
    }
}

/// The store's side of the semaphore: its size and its two folders.
#[derive(Debug, Clone)]
struct Drivers {
    client: ZkClient,
    path: String,
    permits: u32,
    lock: NodeDriver,
    leases: NodeDriver,
}

impl Drivers {
    /// Make sure `<path>` stores our size, creating it if needed.
    async fn ensure_size(&self) -> Result<()> {
        let (path, permits) = (self.path.as_str(), self.permits);
        let session = self.client.live_session().await?;
        let zk = session.zk();
        let wanted = permits.to_string();
        let mut backoff = Backoff::RETRY;
        loop {
            match zk.get_data(path).await {
                Ok((data, stat)) => {
                    if data.is_empty() {
                        // A parent made by another client (Curator stores no
                        // size): claim it, unless someone else just did, or
                        // it holds another recipe's nodes (a mutex's, say).
                        match zk.list_children(path).await {
                            Ok(children) => {
                                own_layout(path, &children, None)?;
                                // A lock in the permits' folder (a mutex
                                // named `<path>/leases`) would count as a
                                // permit.
                                let leases = children.iter().any(|c| c == "leases");
                                if leases && !permits_folder_is_ours(zk, path).await? {
                                    backoff.pause().await;
                                    continue;
                                }
                            }
                            // Gone since the read: read again.
                            Err(e) if connection_trouble(&e) || e == zk::Error::NoNode => {
                                backoff.pause().await;
                                continue;
                            }
                            Err(e) => return Err(from_zk(&format!("list {path}"), e)),
                        }
                        match zk
                            .set_data(path, wanted.as_bytes(), Some(stat.version))
                            .await
                        {
                            Ok(_) => return Ok(()),
                            Err(zk::Error::BadVersion) => continue,
                            Err(e) => return Err(from_zk(&format!("store the size at {path}"), e)),
                        }
                    }
                    let stored = String::from_utf8_lossy(&data);
                    return match stored.trim().parse::<u32>() {
                        Ok(n) if n == permits => Ok(()),
                        Ok(n) => Err(Error::invalid(format!(
                            "the semaphore at {path} has {n} permits; this client asked for \
                             {permits}: use {n}, or another path"
                        ))),
                        Err(_) => Err(Error::invalid(format!(
                            "{path} holds {stored:?}, not a semaphore size; choose another path"
                        ))),
                    };
                }
                Err(zk::Error::NoNode) => {
                    let parent = &path[..path.rfind('/').unwrap_or(0)];
                    if !parent.is_empty() {
                        zk.mkdir(parent, &session.options(zk::CreateMode::Container))
                            .await
                            .map_err(|e| from_zk(&format!("create {parent}"), e))?;
                    }
                    let container = session.options(zk::CreateMode::Container);
                    match zk.create(path, wanted.as_bytes(), &container).await {
                        Ok(_) => return Ok(()),
                        Err(zk::Error::NodeExists) => continue,
                        Err(e) => return Err(from_zk(&format!("create {path}"), e)),
                    }
                }
                Err(e) if connection_trouble(&e) => backoff.pause().await,
                Err(e) => return Err(from_zk(&format!("read {path}"), e)),
            }
        }
    }
}

/// Refuse `<path>/leases` when it holds another recipe's nodes (a
/// lock's): true when it holds none (or is gone since the parent's
/// listing), false on connection trouble (read again).
async fn permits_folder_is_ours(zk: &zk::Client, path: &str) -> Result<bool> {
    let leases = format!("{path}/leases");
    match zk.list_children(&leases).await {
        Ok(children) => match own_layout(&leases, &children, Some(LEASE)) {
            Ok(()) => Ok(true),
            Err(_) => Err(permits_name_taken(
                "ZooKeeper",
                path,
                "another recipe's nodes",
            )),
        },
        Err(zk::Error::NoNode) => Ok(true),
        Err(e) if connection_trouble(&e) => Ok(false),
        Err(e) => Err(from_zk(&format!("list {leases}"), e)),
    }
}

/// A win of the internal mutex is given back by deleting its node.
impl Unlock for Acquired {
    fn unlock(self) -> impl std::future::Future<Output = ()> + Send + 'static {
        delete_until_done(self.session, self.node)
    }
}
