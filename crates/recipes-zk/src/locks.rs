//! The store's verbs for core's queue locks ([`LockStore`]): a mutex is a
//! folder of Curator's `lock-` nodes, a read-write lock one of `__READ__`
//! and `__WRIT__` nodes (`mutex.rs` and `rw_lock.rs` have the layouts);
//! core's engine contends over them through [`NodeDriver`].

use recipes_core::store::engine::Rule;
use recipes_core::store::{LockStore, Runtime};
use recipes_core::{LockKind, Result};
use tokio::time::Instant;

use crate::client::ZkClient;
use crate::driver::{Contender, NodeDriver};
use crate::names::{validate_path, LOCK, READ, WRITE};
use crate::node_lease::{ZkNode, ZkNodeLease};
use crate::semaphore::SemaphoreFolders;

/// A lock's folder: one driver per place its recipe has.
#[derive(Debug, Clone)]
pub struct ZkLockQueue {
    write: NodeDriver,
    read: Option<NodeDriver>,
}

impl LockStore for ZkClient {
    type Queue = ZkLockQueue;
    type Lease = ZkNodeLease;

    fn runtime(&self) -> &Runtime {
        ZkClient::runtime(self)
    }

    fn queue(&self, path: &str, kind: LockKind) -> Result<ZkLockQueue> {
        validate_path(path)?;
        let side = |lock_name| {
            let contender = Contender {
                dir: path.to_owned(),
                lock_name,
                data: Vec::new(),
                rule: kind.rule(),
                outside_semaphores: true,
            };
            NodeDriver::new(self, contender)
        };
        Ok(match kind.rule() {
            Rule::ReadWrite => ZkLockQueue {
                write: side(WRITE),
                read: Some(side(READ)),
            },
            _ => ZkLockQueue {
                write: side(LOCK),
                read: None,
            },
        })
    }

    fn take(
        &self,
        queue: &ZkLockQueue,
        kind: LockKind,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Option<ZkNodeLease>>> + Send + 'static {
        let driver = match (kind, &queue.read) {
            (LockKind::Read, Some(read)) => read.clone(),
            _ => queue.write.clone(),
        };
        async move {
            let won = driver.acquire(deadline).await?;
            Ok(won.map(|a| ZkNode::held(driver.client.clone(), a)))
        }
    }

    fn downgrade(&self, _queue: &ZkLockQueue, write: ZkNodeLease) -> Result<ZkNodeLease> {
        crate::rw_lock::downgrade(write)
    }

    type Semaphore = SemaphoreFolders;
    type Permit = ZkNodeLease;

    /// The size is stored at `path`; a size that differs from the stored
    /// one is refused at acquisition.
    fn semaphore_queue(&self, path: &str, permits: u32) -> Result<SemaphoreFolders> {
        SemaphoreFolders::new(self, path, permits)
    }

    fn admit(
        &self,
        semaphore: &SemaphoreFolders,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Option<ZkNodeLease>>> + Send + 'static {
        semaphore.admit(deadline)
    }
}
