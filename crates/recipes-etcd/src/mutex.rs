//! The etcd mutex: etcd's `concurrency` layout, driven by `contend.rs`
//! (one-transaction acquire, a synced watch on the one key that must go).
//! The owner is the key exactly one level below `<name>/` with the lowest
//! `create_revision`; Go's `concurrency.Mutex` and `etcdctl lock` use the
//! same layout and rule (they count nested keys too), so they contend with
//! this mutex correctly.
//!
//! The fence equals what Go's `Mutex.Header().Revision` and `etcdctl
//! lock`'s `ETCD_LOCK_REV` give their holders, so mixed holders share one
//! strictly increasing sequence: each confirming read happens after the
//! previous holder's key was deleted, which came after that holder's own
//! confirming read.

use std::time::Instant as StdInstant;

use recipes_core::{HandleQueue, MutexBackend, Result};
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::contend::{contend, Claim, Via};
use crate::lock::{EtcdKey, EtcdLock};
use crate::names::{key_prefix, validate_name};

/// A mutex in etcd's `concurrency` layout (keys `<name>/<lease id>`),
/// shared with Go's `concurrency.Mutex` and `etcdctl lock <name>`; see
/// [`recipes_core::Mutex`] for the API and what holds under pause and
/// partition. Made by [`Client::mutex`](crate::Client::mutex). Threads
/// sharing a handle take turns in the process; see [`EtcdClient`].
pub type Mutex = recipes_core::Mutex<EtcdMutex>;

/// The etcd mutex backend; use it through [`Mutex`].
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
        validate_name("lock", name)?;
        Ok(EtcdMutex {
            client,
            name: name.to_owned(),
            prefix: key_prefix(name),
            queue: HandleQueue::default(),
        })
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
