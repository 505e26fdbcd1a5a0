//! The etcd mutex: etcd's `concurrency` layout, one-transaction acquire,
//! a synced watch on the one key that must go.
//!
//! # Protocol
//!
//! A lock named `/locks/x` has the key prefix `/locks/x/`; a contender owns
//! `/locks/x/<lease id in hex>`, bound to its client's lease. The owner is
//! the contender key, exactly one level below the prefix, with the lowest
//! `create_revision`. Go's `concurrency.Mutex` and `etcdctl lock` use the
//! same layout and rule (except that they count nested keys too), so they
//! contend with this mutex correctly.
//!
//! 1. One transaction: if our key does not exist, put it with our lease;
//!    either way read it and the oldest keys under the prefix. When ours is
//!    the oldest contender, the lock is ours and the fence is the
//!    transaction's header revision. Alongside it, a synced watch on our
//!    own key starts (see `watch.rs`): its deletion is loss, while waiting
//!    and while held.
//! 2. Otherwise find the contender created just before ours, add a synced
//!    watch on it to the same stream, then read again: its deletion is now
//!    certain to be seen. When it goes, read again — a contender further
//!    ahead may still be there. The read that finds none ahead of us (and
//!    our key still there) confirms ownership; its header revision is the
//!    fence.
//! 3. Every other way out — a timeout, an error, a lost session, our key
//!    deleted, the call abandoned — deletes our key; after a lost session
//!    or a deleted key the acquisition starts over with a new key.
//!
//! The loop is core's contend engine ([`recipes_core::engine::contend`]);
//! the etcd side of it, shared with the election, is `contend.rs`.
//!
//! The fence equals what Go's `Mutex.Header().Revision` and `etcdctl lock`'s
//! `ETCD_LOCK_REV` give their holders, so mixed holders share one strictly
//! increasing sequence: each confirming read happens after the previous
//! holder's key was deleted, and that deletion came after the previous
//! holder's own confirming read.
//!
//! What holds under pause and partition: see [`Mutex`].

use std::time::Instant as StdInstant;

use recipes_core::{MutexBackend, Result};
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::contend::{contend, Claim, Via};
use crate::lock::{EtcdKey, EtcdLock};
use crate::names::{key_prefix, validate_name};
use crate::session::HandleQueue;

/// A mutex shared with every process that locks the same name through
/// etcd's `concurrency` package (Go's `concurrency.Mutex`, `etcdctl lock`).
///
/// Made by [`EtcdClient::mutex`]. Not reentrant. Threads sharing one
/// handle take turns in the process: the second waits, with no key in etcd,
/// until the first one's guard is gone. Separate handles of one name
/// contend in etcd, like separate clients: when the client's lease already
/// has an acquisition of the name, the next handle's key is bound to
/// another lease from the client's pool (see [`EtcdClient`]), so two
/// holders are never one identity in etcd.
///
/// # Under pause and partition
///
/// Guaranteed (clocks within 500 ppm): a guard's loss signal fires before
/// etcd can expire the client's lease and let another contender in; the
/// fencing token strictly increases across holders, `etcdctl lock`'s
/// included; fenced writes through [`EtcdLock`] are refused once our key is
/// gone. Not guaranteed: that the holder notices in time — a pause right
/// after checking the signal outlives the lease, and only the fence stops
/// the stale holder's writes. A partitioned holder loses the guard at its
/// local deadline even if etcd still keeps the lease.
pub type Mutex = recipes_core::Mutex<EtcdMutex>;

/// The etcd mutex backend; use it through [`Mutex`], which documents what
/// holds under pause and partition.
#[derive(Debug, Clone)]
pub struct EtcdMutex {
    client: EtcdClient,
    name: String,
    prefix: String,
    // Shared by clones: they are one handle.
    queue: HandleQueue,
}

impl EtcdMutex {
    pub(crate) fn new(client: EtcdClient, name: &str) -> Result<EtcdMutex> {
        validate_name(name)?;
        Ok(EtcdMutex {
            client,
            name: name.to_owned(),
            prefix: key_prefix(name),
            queue: HandleQueue::default(),
        })
    }

    /// The key prefix its contenders' keys live under (`<name>/`).
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }
}

impl MutexBackend for EtcdMutex {
    type Lease = EtcdLock;

    fn name(&self) -> &str {
        &self.name
    }

    fn acquire(&self, deadline: Option<StdInstant>) -> Result<Option<EtcdLock>> {
        let this = self.clone();
        self.client.runtime().call_until("lock", None, async move {
            let deadline = deadline.map(Instant::from_std);
            let via = Via::Handle(&this.queue);
            let (client, name, prefix) = (&this.client, &this.name, &this.prefix);
            let won = contend(client, name, prefix, via, Claim::Lock, deadline).await?;
            Ok(won.map(|a| EtcdKey::held(this.client.clone(), a, "lock")))
        })
    }
}

impl EtcdClient {
    /// A mutex named `name` (etcd's `concurrency` layout: keys
    /// `<name>/<lease id>`), shared with Go's `concurrency.Mutex` and
    /// `etcdctl lock <name>`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a name
    /// that is empty, does not start with `/`, ends with `/`, has an empty
    /// component or a control character.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), recipes_etcd::Error> {
    /// let client = recipes_etcd::EtcdClient::connect(["127.0.0.1:2379"])?;
    /// let mutex = client.mutex("/locks/nightly-report")?;
    /// let guard = mutex.lock()?;
    /// // Pass guard.token() with every write to the protected resource.
    /// println!("fence {}", guard.token());
    /// guard.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        Ok(Mutex::from_backend(EtcdMutex::new(self.clone(), name)?))
    }
}
