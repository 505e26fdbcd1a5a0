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

use std::time::Instant;

use recipes_core::{Error, Result, SemaphoreBackend};
use tokio::time::Instant as TokioInstant;
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::error::{connection_trouble, from_zk};
use crate::lock_internals::{
    acquire, create_protected, delete_ours, Acquired, Contender, RETRY_PAUSE,
};
use crate::names::{fresh_uuid, validate_path};
use crate::node_lease::{delete_until_done, ZkNodeLease};

/// A counting semaphore shared with every process, Java (Curator
/// `InterProcessSemaphoreV2`) ones included, that uses the same path.
///
/// Under pause and partition a permit is a lease like a lock: its loss
/// signal fires when the session's deadline passes, and a paused holder may
/// still run when it resumes, so N + 1 workers can briefly overlap. Permits
/// have no shared fence order; use their in-store fenced writes.
pub type InterProcessSemaphore = recipes_core::Semaphore<ZkSemaphore>;

/// A held permit.
pub type ZkPermit = ZkNodeLease;

/// The ZooKeeper semaphore backend; use it through
/// [`InterProcessSemaphore`], made by [`ZkClient::semaphore`].
#[derive(Debug, Clone)]
pub struct ZkSemaphore {
    client: ZkClient,
    path: String,
    permits: u32,
}

impl ZkSemaphore {
    fn lock_contender(&self) -> Contender {
        Contender {
            dir: format!("{}/locks", self.path),
            lock_name: "lock-",
            data: Vec::new(),
            max_leases: 1,
        }
    }

    fn lease_contender(&self) -> Contender {
        Contender {
            dir: format!("{}/leases", self.path),
            lock_name: "lease-",
            data: Vec::new(),
            max_leases: self.permits as usize,
        }
    }
}

/// Make sure `<path>` stores `permits`, creating it if needed.
async fn check_size(client: &ZkClient, path: &str, permits: u32) -> Result<()> {
    let session = client.live_session().await?;
    let zk = session.zk();
    let wanted = permits.to_string();
    loop {
        match zk.get_data(path).await {
            Ok((data, stat)) => {
                if data.is_empty() {
                    // A parent made by another client (Curator stores no
                    // size): claim it, unless someone else just did.
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
                match zk
                    .create(
                        path,
                        wanted.as_bytes(),
                        &session.options(zk::CreateMode::Container),
                    )
                    .await
                {
                    Ok(_) => return Ok(()),
                    Err(zk::Error::NodeExists) => continue,
                    Err(e) => return Err(from_zk(&format!("create {path}"), e)),
                }
            }
            Err(e) if connection_trouble(&e) => tokio::time::sleep(RETRY_PAUSE).await,
            Err(e) => return Err(from_zk(&format!("read {path}"), e)),
        }
    }
}

/// With the internal mutex held: create our permit node and wait until at
/// most `permits` exist.
async fn admit(
    client: &ZkClient,
    leases: &Contender,
    deadline: Option<TokioInstant>,
) -> Result<Option<Acquired>> {
    let session = client.live_session().await?;
    let epoch = session.live_epoch().await?;
    let uuid = fresh_uuid();
    let (node, czxid, _) = create_protected(&session, leases, &uuid).await?;
    let name = node.rsplit('/').next().unwrap_or_default().to_owned();
    let outcome = async {
        loop {
            let (children, watcher) = match session.zk().get_and_watch_children(&leases.dir).await {
                Ok((children, _, watcher)) => (children, watcher),
                Err(e) if connection_trouble(&e) => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                Err(e) => return Err(from_zk(&format!("list {}", leases.dir), e)),
            };
            if !children.contains(&name) {
                return Err(Error::LeaseLost {
                    reason: recipes_core::LossReason::Deleted,
                });
            }
            if children.len() <= leases.max_leases {
                return Ok(true);
            }
            if epoch.is_lost() {
                return Err(Error::LeaseLost {
                    reason: epoch
                        .signal()
                        .reason()
                        .unwrap_or(recipes_core::LossReason::Closed),
                });
            }
            let until = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let lost = epoch.signal();
            tokio::select! {
                _ = watcher.changed() => {}
                _ = lost.fired() => {}
                () = until => return Ok(false),
            }
        }
    }
    .await;
    match outcome {
        Ok(true) => Ok(Some(Acquired {
            session,
            epoch,
            node,
            czxid,
        })),
        other => {
            delete_ours(&session, &leases.dir, &uuid).await;
            other.map(|_| None)
        }
    }
}

impl SemaphoreBackend for ZkSemaphore {
    type Permit = ZkPermit;

    fn name(&self) -> &str {
        &self.path
    }

    fn permits(&self) -> u32 {
        self.permits
    }

    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<ZkPermit>> {
        let this = self.clone();
        let acquired = self
            .client
            .runtime()
            .call_until("acquire a permit", None, async move {
                let deadline = deadline.map(TokioInstant::from_std);
                check_size(&this.client, &this.path, this.permits).await?;
                let Some(lock) = acquire(&this.client, &this.lock_contender(), deadline).await?
                else {
                    return Ok(None);
                };
                let admitted = admit(&this.client, &this.lease_contender(), deadline).await;
                // The internal mutex is released whatever happened.
                delete_until_done(lock.session.clone(), lock.node.clone()).await;
                admitted
            })?;
        Ok(acquired.map(|a| ZkNodeLease::held(self.client.clone(), a)))
    }
}

impl ZkClient {
    /// A semaphore with `permits` permits at `path` (Curator's
    /// `InterProcessSemaphoreV2` layout). The size is stored at `path`: every
    /// client must ask for the same.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad path or zero permits. A size
    /// that differs from the stored one is refused at acquisition.
    pub fn semaphore(&self, path: &str, permits: u32) -> Result<InterProcessSemaphore> {
        validate_path(path)?;
        if permits == 0 {
            return Err(Error::invalid(
                "a semaphore needs at least one permit; ask for 1 or more",
            ));
        }
        Ok(InterProcessSemaphore::from_backend(ZkSemaphore {
            client: self.clone(),
            path: path.to_owned(),
            permits,
        }))
    }
}
