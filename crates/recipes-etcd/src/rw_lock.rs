//! The etcd read-write lock: the layout of etcd's Go `recipe.RWMutex`
//! (`rw_queue.rs`), driven by the contend engine (`contend.rs`) under
//! core's read-write rule, and its downgrade.
//!
//! **Fences.** A guard's token is the revision of the read that confirmed
//! it, as for the mutex: a writer's is read after every earlier holder's
//! key was deleted, a reader's after every earlier writer's, so write
//! tokens strictly increase and exceed every earlier reader's, and a
//! reader's exceeds every earlier writer's. A downgraded guard keeps the
//! write token.

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use recipes_core::store::{FencedLease, HeldEntry, HeldLease, LeadershipLease};
use recipes_core::{Error, LossReason, Result};

use crate::client::EtcdClient;
use crate::key::OwnKey;
use crate::lock::EtcdLock;
use crate::names::rw_key;
use crate::rpc::retrying_txn;

/// A read-write lock in the layout of etcd's Go `recipe.RWMutex` (keys
/// `<name>/read/<unique>` and `<name>/write/<unique>` on the client's
/// lease), so that Go's `RWMutex` and ours exclude each other; see
/// [`recipes_core::RwLock`] for the API. Made by
/// [`Client::rw_lock`](recipes_core::Client::rw_lock).
///
/// Downgrade keeps the write key (a Go writer queued behind waits on it)
/// and adds a marker read key naming it: our readers queued behind then
/// enter, our writers and Go's still wait, and Go's readers wait too (they
/// see a write key) until the read guard is released.
pub type RwLock = recipes_core::RwLock<EtcdRwLock>;

/// A held read side of an etcd [`RwLock`].
pub type RwLockReadGuard = recipes_core::RwLockReadGuard<EtcdRwLock>;

/// A held write side of an etcd [`RwLock`].
pub type RwLockWriteGuard = recipes_core::RwLockWriteGuard<EtcdRwLock>;

/// The etcd read-write lock backend: core's queue lock over this
/// client's verbs (`locks.rs`); use it through [`RwLock`].
pub type EtcdRwLock = recipes_core::store::QueueLock<EtcdClient>;

/// Puts a marker read key naming our write key, on its lease, in one
/// transaction guarded by the write key; the write key stays as it
/// is. The guard's loss still follows the write key.
pub(crate) fn downgrade(client: &EtcdClient, prefix: &str, write: EtcdLock) -> Result<EtcdLock> {
    let marker = rw_key(prefix, false, write.session_id());
    let read = write.entry().downgraded(marker.clone());
    let (trigger, token) = (write.trigger().clone(), write.token());
    drop(write);
    let own = read.own().clone();
    let put = async move { put_marker(&own, &marker).await };
    let outcome = client.call("downgrade", put);
    let read = HeldEntry::new(read, trigger, token);
    match outcome {
        Ok(true) => Ok(read),
        Ok(false) => {
            // Gone before its watch said so: as the front end's check.
            read.trigger().fire(LossReason::Deleted);
            read.release_in_background();
            Err(Error::LeaseLost {
                reason: LossReason::Deleted,
            })
        }
        Err(e) => {
            // The marker may exist: the release deletes it too.
            read.release_in_background();
            Err(e)
        }
    }
}

/// Put `marker` (value: our write key's name, our lease) while our write
/// key exists; `false` when it is gone. Safe to send twice: a second put
/// of the same marker means the same.
async fn put_marker(own: &OwnKey, marker: &str) -> Result<bool> {
    let (etcd, timeout) = (own.session.store()?, own.session.rpc_timeout());
    let lease = PutOptions::new().with_lease(own.session.id());
    let ours = Compare::create_revision(own.key.as_str(), CompareOp::Equal, own.create_revision);
    let put = TxnOp::put(marker, own.key.as_str(), Some(lease));
    let txn = Txn::new().when([ours]).and_then([put]);
    let resp = retrying_txn(&etcd, &format!("put {marker}"), timeout, &txn).await?;
    Ok(resp.succeeded())
}

/// Delete a downgraded write key and its marker in one transaction (the
/// marker alone when the write key is gone); end a single-use session
/// instead, which takes both.
pub(crate) async fn delete_downgraded(own: &OwnKey, marker: &str) -> Result<()> {
    if own.session.is_single_use() {
        return own.session.revoke(LossReason::Released).await;
    }
    let ours = Compare::create_revision(own.key.as_str(), CompareOp::Equal, own.create_revision);
    let txn = Txn::new()
        .when([ours])
        .and_then([
            TxnOp::delete(own.key.as_str(), None),
            TxnOp::delete(marker, None),
        ])
        .or_else([TxnOp::delete(marker, None)]);
    let (etcd, what) = (own.session.store()?, format!("delete {}", own.key));
    retrying_txn(&etcd, &what, own.session.rpc_timeout(), &txn).await?;
    Ok(())
}
