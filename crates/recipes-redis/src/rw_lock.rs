//! The Redis read-write lock: the mutex's queue of members with each
//! member's role beside it, a hold key per holder, and the read-write
//! rule decided and the fence minted in the confirming script
//! (`scripts.rs` has the layout). Acquisitions run core's engine with
//! [`Rule::ReadWrite`]; a downgrade is one script.

use std::time::Instant as StdInstant;

use recipes_core::store::engine::{self, Rule};
use recipes_core::store::{HeldLease, Runtime, RwLockBackend};
use recipes_core::{Access, Error, LossReason, Result};
use tokio::time::Instant;

use crate::client::RedisClient;
use crate::contend::QueueContender;
use crate::lock::{RedisEntry, RedisLock};
use crate::names::{validate_name, Queue};
use crate::scripts;

/// A read-write lock in Redis (the layout is in the crate's
/// documentation); see [`recipes_core::RwLock`] for the API: many readers
/// or one writer, fair, fenced, downgrade and no upgrade. Made by
/// [`Client::rw_lock`](crate::Client::rw_lock).
pub type RwLock = recipes_core::RwLock<RedisRwLock>;

/// A held read side of an [`RwLock`]; see [`recipes_core::RwLockReadGuard`].
pub type RwLockReadGuard = recipes_core::RwLockReadGuard<RedisRwLock>;

/// A held write side of an [`RwLock`]; see
/// [`recipes_core::RwLockWriteGuard`].
pub type RwLockWriteGuard = recipes_core::RwLockWriteGuard<RedisRwLock>;

/// What a held side is called in messages (a downgraded lease is the
/// same entry, so one word for both).
const KIND: &str = "read-write lock";

/// The Redis read-write lock backend; use it through [`RwLock`].
#[derive(Debug, Clone)]
pub struct RedisRwLock {
    client: RedisClient,
    name: String,
    queue: Queue,
}

impl RedisRwLock {
    pub(crate) fn new(client: RedisClient, name: &str) -> Result<RedisRwLock> {
        validate_name("read-write lock", name)?;
        Ok(RedisRwLock {
            client,
            name: name.to_owned(),
            queue: Queue::rw(name),
        })
    }

    /// Turn the writer `lease` holds into a reader in place: `Ok(false)`
    /// when it no longer holds.
    async fn downgrade_once(&self, entry: &RedisEntry) -> Result<bool> {
        let ticket = entry.ticket();
        let store = ticket.session.store()?;
        let what = format!("downgrade {}", self.queue.holder(&ticket.member));
        let timeout = self.client.rpc_timeout();
        let args = self.queue.args(&ticket.member);
        let done: i64 = store
            .redis
            .idempotent(&what, timeout, &scripts::DOWNGRADE, &args)
            .await?;
        store.redis.replicated(&what, timeout).await?;
        Ok(done == 1)
    }
}

impl RwLockBackend for RedisRwLock {
    type Lease = RedisLock;

    fn name(&self) -> &str {
        &self.name
    }

    fn runtime(&self) -> &Runtime {
        self.client.runtime()
    }

    fn acquire(&self, access: Access, deadline: Option<StdInstant>) -> Result<Option<RedisLock>> {
        let this = self.clone();
        let what = match access {
            Access::Read => "read lock",
            Access::Write => "write lock",
        };
        self.client.runtime().call_until(what, None, async move {
            let role: &[u8] = match access {
                Access::Read => b"read",
                Access::Write => b"write",
            };
            let driver = QueueContender {
                client: &this.client,
                queue: &this.queue,
                value: role,
                rule: Rule::ReadWrite,
            };
            match engine::contend(&driver, deadline.map(Instant::from_std)).await? {
                Some(a) => RedisEntry::held(this.client.clone(), a, KIND)
                    .await
                    .map(Some),
                None => Ok(None),
            }
        })
    }

    /// One script: the member's role becomes `read` where it stands (its
    /// place, hold key and fence stay), and the readers waiting on it are
    /// woken. The same lease goes on holding: its loss poll and renewals
    /// are those of the same hold key.
    fn downgrade(&self, write: RedisLock) -> Result<RedisLock> {
        let (this, entry) = (self.clone(), write.entry().clone());
        let done = self.client.call(
            "downgrade",
            async move { this.downgrade_once(&entry).await },
        );
        match done {
            Ok(true) => Ok(write),
            Ok(false) => {
                let reason = write.loss_signal().reason().unwrap_or(LossReason::Deleted);
                write.release_in_background();
                Err(Error::LeaseLost { reason })
            }
            Err(e) => {
                write.release_in_background();
                Err(e)
            }
        }
    }
}
