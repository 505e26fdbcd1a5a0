//! The Redis read-write lock: the mutex's queue of members with each
//! member's role beside it, a hold key per holder, and the read-write
//! rule decided and the fence minted in the confirming script
//! (`scripts.rs` has the layout). Acquisitions run core's engine with
//! [`Rule::ReadWrite`]; a downgrade is one script.

use recipes_core::store::HeldLease;
use recipes_core::{Error, LossReason, Result};

use crate::client::RedisClient;
use crate::lock::{RedisEntry, RedisLock};
use crate::names::Queue;
use crate::queue_scripts;

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

/// The Redis read-write lock backend: core's queue lock over this
/// client's verbs (`locks.rs`); use it through [`RwLock`].
pub type RedisRwLock = recipes_core::store::QueueLock<RedisClient>;

/// Turn the writer `lease` holds into a reader in place: `Ok(false)`
/// when it no longer holds.
async fn downgrade_once(client: &RedisClient, queue: &Queue, entry: &RedisEntry) -> Result<bool> {
    let ticket = entry.ticket();
    let store = ticket.session.store()?;
    let what = format!("downgrade {}", queue.holder(&ticket.member));
    let timeout = client.rpc_timeout();
    let args = queue.args(&ticket.member);
    let done: i64 = store
        .redis
        .idempotent(&what, timeout, &queue_scripts::DOWNGRADE, &args)
        .await?;
    store.redis.replicated(&what).await?;
    Ok(done == 1)
}

/// One script: the member's role becomes `read` where it stands (its
/// place, hold key and fence stay), and the readers waiting on it are
/// woken. The same lease goes on holding: its loss poll and renewals
/// are those of the same hold key.
pub(crate) fn downgrade(
    client: &RedisClient,
    queue: &Queue,
    write: RedisLock,
) -> Result<RedisLock> {
    let (client2, queue, entry) = (client.clone(), queue.clone(), write.entry().clone());
    let done = client.call("downgrade", async move {
        downgrade_once(&client2, &queue, &entry).await
    });
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
