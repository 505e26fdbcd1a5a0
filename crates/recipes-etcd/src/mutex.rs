//! The etcd mutex: etcd's `concurrency` layout, driven by `contend.rs`.
//! The owner is the key one level below `<name>/` with the lowest
//! `create_revision`, as for Go's `concurrency.Mutex` and `etcdctl lock`
//! (which count nested keys too), so they contend with it correctly. The
//! fence equals their `Header().Revision` / `ETCD_LOCK_REV`: mixed holders
//! share one strictly increasing sequence: each fence is the revision of
//! the deletion of the previous holder's key (ours, heard on the watch) or
//! of a read after it (theirs, and ours when the watch cannot vouch).

use recipes_core::store::engine;
use recipes_core::store::HandleQueue;
use recipes_core::Result;
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::contend::{Claim, KeyContender, Layout, Via};
use crate::key::Acquired;
use crate::names::{key_prefix, validate_name};

/// A handle of a lock or election name: what a mutex and an election
/// backend hold. Clones share the queue: they are one handle.
#[derive(Debug, Clone)]
pub(crate) struct NameHandle {
    pub(crate) client: EtcdClient,
    pub(crate) name: String,
    pub(crate) prefix: String,
    queue: HandleQueue,
}

impl NameHandle {
    /// A handle of `name`, checked as the name of a `what`.
    pub(crate) fn new(client: EtcdClient, what: &str, name: &str) -> Result<NameHandle> {
        validate_name(what, name)?;
        Ok(NameHandle {
            client,
            name: name.to_owned(),
            prefix: key_prefix(name),
            queue: HandleQueue::default(),
        })
    }

    /// Contend (as `claim` says) until ours or `deadline`: the handle's
    /// turn first, then the engine.
    pub(crate) async fn contend(
        &self,
        claim: Claim<'_>,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired>> {
        let Some(handle_turn) = self.queue.turn(deadline).await else {
            return Ok(None);
        };
        let driver = KeyContender {
            client: &self.client,
            prefix: &self.prefix,
            layout: Layout::Key {
                name: &self.name,
                via: Via::Handle,
                claim,
            },
        };
        let won = engine::contend(&driver, deadline).await?;
        Ok(won.map(|mut a| {
            a.turns.hold_handle(Some(handle_turn));
            a
        }))
    }
}

/// A mutex in etcd's `concurrency` layout (keys `<name>/<lease id>`),
/// shared with Go's `concurrency.Mutex` and `etcdctl lock <name>`; see
/// [`recipes_core::Mutex`] for the API and what holds under pause and
/// partition. Made by [`Client::mutex`](crate::Client::mutex). Threads
/// sharing a handle take turns in the process; see [`EtcdClient`].
pub type Mutex = recipes_core::Mutex<EtcdMutex>;

/// The etcd mutex backend: core's queue lock over this client's verbs
/// (`locks.rs`); use it through [`Mutex`].
pub type EtcdMutex = recipes_core::store::QueueLock<EtcdClient>;
