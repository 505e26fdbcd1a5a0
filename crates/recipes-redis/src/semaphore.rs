//! The Redis semaphore: Curator's `InterProcessSemaphoreV2` structure —
//! the size in `{recipes}:size:<name>`, an internal mutex (the queue
//! `<name>/locks`) and the permits (the queue `<name>/leases`, each
//! holder's own key, live while its session key is) — as a driver of core's
//! [`admit`](recipes_core::store::engine::admit). A permit whose session is not
//! renewed is free once the session key expired, and its key is swept
//! with the session (`scripts.rs`).

use std::time::Duration;

use recipes_core::store::engine::{self, Admission, Rule, SizeCheck, Unlock};
use recipes_core::store::permits_name_taken;
use recipes_core::Result;
use tokio::time::Instant;

use crate::client::RedisClient;
use crate::contend::{Acquired, QueueContender};
use crate::lock::{RedisEntry, RedisLock};
use crate::names::{other_layout, size_key, validate_name, Queue, NS};
use crate::rpc::{unexpected, Redis};
use crate::scripts;

/// A counting semaphore in Redis; see [`recipes_core::Semaphore`] for the
/// API and what holds under pause and partition. Made by
/// [`Client::semaphore`](crate::Client::semaphore).
pub type Semaphore = recipes_core::Semaphore<RedisSemaphore>;

/// A held permit of a [`Semaphore`]; see [`recipes_core::SemaphorePermit`].
pub type SemaphorePermit = recipes_core::SemaphorePermit<RedisLock>;

/// The Redis semaphore backend: core's semaphore over this client's verbs
/// (`locks.rs`); use it through [`Semaphore`].
pub type RedisSemaphore = recipes_core::store::QueueSemaphore<RedisClient>;

/// A semaphore's queues and size, as core's
/// [`LockStore::Semaphore`](recipes_core::store::LockStore::Semaphore).
#[derive(Debug, Clone)]
pub struct SemaphoreQueues {
    client: RedisClient,
    name: String,
    permits: u32,
    lock: Queue,
    leases: Queue,
}

impl SemaphoreQueues {
    pub(crate) fn new(client: RedisClient, name: &str, permits: u32) -> Result<SemaphoreQueues> {
        validate_name("semaphore", name)?;
        recipes_core::store::check_permits(&format!("the Redis semaphore {name}"), permits)?;
        let (lock, leases) = Queue::semaphore(name);
        Ok(SemaphoreQueues {
            client,
            name: name.to_owned(),
            permits,
            lock,
            leases,
        })
    }

    /// Store our size unless one is stored; check the stored one. A lock's
    /// or an election's queue on the name is refused.
    pub(crate) async fn ensure_size(&self, redis: &Redis, timeout: Duration) -> Result<()> {
        let size = size_key(&self.name);
        let lock = Queue::lock(&self.name);
        let args = [
            NS.to_owned(),
            size.clone(),
            self.permits.to_string(),
            lock.queue_key(),
            lock.role_key(),
            self.leases.name.clone(),
            self.leases.hold.clone(),
        ];
        let what = format!("store the size of {}", self.name);
        let reply: redis::Value = redis
            .idempotent(&what, timeout, &scripts::ENSURE_SIZE, &args)
            .await?;
        let parts: Vec<redis::Value> = redis::from_redis_value(&reply).unwrap_or_default();
        let code = parts
            .first()
            .and_then(|c| redis::from_redis_value::<i64>(c).ok());
        let stored = parts
            .get(1)
            .and_then(|v| redis::from_redis_value::<Vec<u8>>(v).ok());
        match (code, stored) {
            (Some(0), _) => Ok(()),
            (Some(-1), _) => Err(other_layout(
                &self.name,
                "a semaphore",
                "a lock or election",
            )),
            (Some(-2), _) => Err(other_layout(&self.name, "a semaphore", "a read-write lock")),
            (Some(-3), _) => Err(permits_name_taken(
                "Redis",
                &self.name,
                "another recipe's entries",
            )),
            (Some(1), Some(stored)) => {
                let what = format!("the Redis semaphore {}", self.name);
                recipes_core::store::check_stored_size(&what, &size, &stored, self.permits)
            }
            _ => Err(unexpected(&what, reply)),
        }
    }
}

impl SemaphoreQueues {
    /// Admit one permit: core's semaphore over the two queues.
    pub(crate) fn admit(
        &self,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Option<RedisLock>>> + Send + 'static {
        let this = self.clone();
        async move {
            let admission = Admission {
                size: &this,
                lock: QueueContender {
                    client: &this.client,
                    queue: &this.lock,
                    value: &[],
                    rule: Rule::Mutex,
                },
                permits: QueueContender {
                    client: &this.client,
                    queue: &this.leases,
                    value: &[],
                    rule: Rule::Leases(this.permits as usize),
                },
            };
            match engine::admit(&admission, deadline).await? {
                Some(a) => RedisEntry::held(this.client.clone(), a, "permit")
                    .await
                    .map(Some),
                None => Ok(None),
            }
        }
    }
}

/// One script before each admission: the size stored again if it was
/// deleted.
impl SizeCheck for SemaphoreQueues {
    async fn ensure_size(&self) -> Result<()> {
        let redis = self.client.redis()?;
        SemaphoreQueues::ensure_size(self, &redis, self.client.rpc_timeout()).await
    }
}

/// A win of the internal mutex is given back by removing its member:
/// awaited, so that a `try_acquire` right after finds the mutex free.
impl Unlock for Acquired {
    fn unlock(self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.ticket.remove()
    }
}
