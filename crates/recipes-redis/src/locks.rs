//! The store's verbs for core's queue locks ([`LockStore`]): a name's
//! queue of members, a hold key per holder, the rule decided and the fence
//! minted in the confirming script (`contend.rs`, `scripts.rs`); core's
//! contend engine drives them through [`QueueContender`]. `mutex.rs` and
//! `rw_lock.rs` have the layouts.

use recipes_core::store::engine::{self, Role, Rule};
use recipes_core::store::{LockStore, Runtime};
use recipes_core::{LockKind, Result};
use tokio::time::Instant;

use crate::client::RedisClient;
use crate::contend::QueueContender;
use crate::lock::{RedisEntry, RedisLock};
use crate::names::{validate_name, Queue};
use crate::semaphore::SemaphoreQueues;

/// A lock's queue keys, its name checked, as [`LockStore::Queue`].
#[derive(Debug, Clone)]
pub struct RedisLockQueue(Queue);

impl LockStore for RedisClient {
    type Queue = RedisLockQueue;
    type Lease = RedisLock;

    fn runtime(&self) -> &Runtime {
        RedisClient::runtime(self)
    }

    /// A read-write lock on the name's queue: a lock, an election or a
    /// semaphore on the same name is refused (either way round) with
    /// [`Error::InvalidArgument`](recipes_core::Error::InvalidArgument)
    /// when it enters.
    fn queue(&self, name: &str, kind: LockKind) -> Result<RedisLockQueue> {
        validate_name(kind.recipe(), name)?;
        Ok(RedisLockQueue(match kind.rule() {
            Rule::ReadWrite => Queue::rw(name),
            _ => Queue::lock(name),
        }))
    }

    /// A member's value is its role in a read-write lock's queue (the
    /// confirming script reads it), empty in a mutex's.
    fn take(
        &self,
        queue: &RedisLockQueue,
        kind: LockKind,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Option<RedisLock>>> + Send + 'static {
        let (client, queue) = (self.clone(), queue.0.clone());
        async move {
            let value: &[u8] = match kind.role() {
                Role::Reader => b"read",
                Role::Writer => b"write",
                _ => b"",
            };
            let driver = QueueContender {
                client: &client,
                queue: &queue,
                value,
                rule: kind.rule(),
            };
            match engine::contend(&driver, deadline).await? {
                Some(a) => RedisEntry::held(client.clone(), a, kind.recipe())
                    .await
                    .map(Some),
                None => Ok(None),
            }
        }
    }

    fn downgrade(&self, queue: &RedisLockQueue, write: RedisLock) -> Result<RedisLock> {
        crate::rw_lock::downgrade(self, &queue.0, write)
    }

    type Semaphore = SemaphoreQueues;
    type Permit = RedisLock;

    /// The size is stored in `{recipes}:size:<name>` by the first client
    /// and checked here; a name that holds a lock's or an election's queue
    /// is refused.
    fn semaphore_queue(&self, name: &str, permits: u32) -> Result<SemaphoreQueues> {
        let queues = SemaphoreQueues::new(self.clone(), name, permits)?;
        let (this, redis, timeout) = (queues.clone(), self.redis()?, self.rpc_timeout());
        self.call("check the semaphore size", async move {
            this.ensure_size(&redis, timeout).await
        })?;
        Ok(queues)
    }

    fn admit(
        &self,
        semaphore: &SemaphoreQueues,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Option<RedisLock>>> + Send + 'static {
        semaphore.admit(deadline)
    }
}
