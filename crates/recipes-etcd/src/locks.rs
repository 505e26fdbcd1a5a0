//! The store's verbs for core's queue locks ([`LockStore`]): a mutex is
//! etcd's `concurrency` layout through the name's handle (`mutex.rs`), a
//! read-write lock Go's `recipe.RWMutex` layout (`rw_lock.rs`,
//! `rw_queue.rs`); core's engine contends over them through
//! [`KeyContender`].

use recipes_core::store::engine::{self, Rule};
use recipes_core::store::{LockStore, Runtime};
use recipes_core::{LockKind, Result};
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::contend::{Claim, KeyContender, Layout};
use crate::lock::{EtcdKey, EtcdLock};
use crate::mutex::NameHandle;
use crate::names::{key_prefix, validate_name};
use crate::rw_queue::RwQueue;
use crate::semaphore::SemaphoreKeys;

/// A lock's keys, as [`LockStore::Queue`].
#[derive(Debug, Clone)]
pub struct EtcdLockQueue(Keys);

/// A mutex's handle (threads sharing it take turns in the process), or a
/// read-write lock's key prefix `<name>/`.
#[derive(Debug, Clone)]
enum Keys {
    Mutex(NameHandle),
    ReadWrite(String),
}

impl LockStore for EtcdClient {
    type Queue = EtcdLockQueue;
    type Lease = EtcdLock;

    fn runtime(&self) -> &Runtime {
        EtcdClient::runtime(self)
    }

    fn queue(&self, name: &str, kind: LockKind) -> Result<EtcdLockQueue> {
        if kind.rule() != Rule::ReadWrite {
            let handle = NameHandle::new(self.clone(), kind.recipe(), name)?;
            return Ok(EtcdLockQueue(Keys::Mutex(handle)));
        }
        validate_name(kind.recipe(), name)?;
        Ok(EtcdLockQueue(Keys::ReadWrite(key_prefix(name))))
    }

    fn take(
        &self,
        queue: &EtcdLockQueue,
        kind: LockKind,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Option<EtcdLock>>> + Send + 'static {
        let (client, queue) = (self.clone(), queue.clone());
        async move {
            let won = match &queue.0 {
                Keys::Mutex(handle) => handle.contend(Claim::Lock, deadline).await?,
                Keys::ReadWrite(prefix) => {
                    let rw = RwQueue::new(kind == LockKind::Write);
                    let driver = KeyContender {
                        client: &client,
                        prefix,
                        layout: Layout::ReadWrite(&rw),
                    };
                    engine::contend(&driver, deadline).await?
                }
            };
            Ok(won.map(|a| EtcdKey::held(client, a, kind.what())))
        }
    }

    fn downgrade(&self, queue: &EtcdLockQueue, write: EtcdLock) -> Result<EtcdLock> {
        let prefix = match &queue.0 {
            Keys::ReadWrite(prefix) => prefix.clone(),
            Keys::Mutex(handle) => handle.prefix.clone(),
        };
        crate::rw_lock::downgrade(self, &prefix, write)
    }

    type Semaphore = SemaphoreKeys;
    type Permit = EtcdLock;

    /// The size is stored in `<name>/config` by the first client and
    /// checked here, after a read that refuses a name holding a lock's or
    /// an election's keys (a lock or election on a semaphore's name is
    /// refused too).
    fn semaphore_queue(&self, name: &str, permits: u32) -> Result<SemaphoreKeys> {
        let keys = SemaphoreKeys::new(self.clone(), name, permits)?;
        let this = keys.clone();
        self.read_with("check the semaphore size", |etcd, timeout| async move {
            this.ensure_size(&etcd, timeout).await
        })?;
        Ok(keys)
    }

    fn admit(
        &self,
        semaphore: &SemaphoreKeys,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Option<EtcdLock>>> + Send + 'static {
        semaphore.admit(deadline)
    }
}
