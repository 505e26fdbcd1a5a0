//! [`EtcdLock`]: a held etcd key as core's
//! [`HeldEntry`](recipes_core::store::HeldEntry) — its loss watch, its deletion,
//! and writes fenced by `create_revision(our key) == ours`.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{PutOptions, TxnOp, TxnResponse};
use recipes_core::store::{
    fire_if_refused, refuse_if_lost, until_done, watch_held, within, Backoff, EntryWatcher,
    FencedWrite, HeldEntry, LossTrigger, Runtime, StoreEntry, Turns,
};
use recipes_core::{Error, FencingToken, Result};

use crate::client::EtcdClient;
use crate::hub::Interest;
use crate::key::{delete_key, delete_until_done, if_ours, Acquired, OwnKey};
use crate::names::validate_key;
use crate::rpc::{from_etcd, retrying_get};
use crate::rw_lock::delete_downgraded;

/// This process's turns at a lock name (the session's and the handle's),
/// shared by a held key and its watch: whoever learns first that the key
/// is gone gives them back.
type Turn = Arc<parking_lot::Mutex<Option<Turns>>>;

/// A held etcd key: the lease behind a [`MutexGuard`](crate::MutexGuard), a
/// [`SemaphorePermit`](crate::SemaphorePermit) and a
/// [`Leadership`](crate::Leadership). Its fenced writes are transactions
/// guarded by `create_revision(our key) == ours`; a proclaim puts our key
/// again with the new value and our lease.
pub type EtcdLock = HeldEntry<EtcdKey>;

/// The etcd side of an [`EtcdLock`]: our key `<name>/<lease id in hex>` (a
/// permit's `<name>/leases/<lease id in hex>-<n>`) and its lease.
#[derive(Clone)]
pub struct EtcdKey {
    client: EtcdClient,
    own: OwnKey,
    // What the key is, for messages: "lock", "permit", "leadership", "read
    // lock" or "write lock".
    kind: &'static str,
    // A downgraded write key's marker (`rw_queue.rs`), deleted with it.
    marker: Option<String>,
    // Given back once the key is gone (released, or deleted by someone:
    // the watch gives them back then).
    turn: Turn,
    // The holding's loss: a fenced transaction is refused once it fired,
    // and fires it when the store refuses one.
    trigger: LossTrigger,
}

impl EtcdKey {
    /// Hold the key `a` won and watch it (its deletion is loss); `kind`
    /// names it in messages.
    pub(crate) fn held(client: EtcdClient, a: Acquired, kind: &'static str) -> EtcdLock {
        let trigger = a.own.session.epoch().trigger().child();
        let turn: Turn = Arc::new(parking_lot::Mutex::new(Some(a.turns)));
        let own = a.own.clone();
        let (watch, watched, gone) = (a.watch, trigger.clone(), turn.clone());
        client.runtime().handle().spawn(async move {
            let label = &own.session.label();
            if watch_held(&own, label, &own.key, watch, &watched).await {
                // The key is gone: the next acquisition of the name in this
                // process need not wait for this guard to be dropped.
                drop(gone.lock().take());
            }
        });
        let token = FencingToken(a.fence.unsigned_abs());
        let key = EtcdKey {
            client,
            own: a.own,
            kind,
            marker: None,
            turn,
            trigger: trigger.clone(),
        };
        HeldEntry::new(key, trigger, token)
    }

    /// Our key as a downgraded read lock's: `marker` (a read key naming
    /// ours) is deleted with it.
    pub(crate) fn downgraded(&self, marker: String) -> EtcdKey {
        EtcdKey {
            kind: "read lock",
            marker: Some(marker),
            ..self.clone()
        }
    }

    /// Our key, its session and revision.
    pub(crate) fn own(&self) -> &OwnKey {
        &self.own
    }

    /// The `create_revision` of our key: the compare target of fenced
    /// writes (`create_revision(key) == this`), as Go's `Mutex.IsOwner()`.
    /// Not the fencing token: that is the revision at which ownership was
    /// confirmed.
    pub fn create_revision(&self) -> i64 {
        self.own.create_revision
    }

    /// Run `ops` in one transaction, only while our key exists. Unlike
    /// [`FencedWrites`](recipes_core::FencedWrites), the keys of `ops` are
    /// not checked: keep them out of the recipe's own keys.
    ///
    /// # Errors
    ///
    /// [`Error::FenceRejected`] when our key is gone (the lock was lost; its
    /// loss signal fires), or the loss signal had fired (nothing is sent);
    /// [`Error::Indeterminate`] when no reply came (the write may have been
    /// applied); other backend errors.
    pub fn txn(&self, ops: Vec<TxnOp>) -> Result<TxnResponse> {
        let what = "fenced transaction";
        refuse_if_lost(&self.trigger.signal(), what, &self.own.key)?;
        // The call's own deadline ends first: its timeout is as unconfirmed.
        let done = self.client.call(what, self.clone().fenced(what, ops));
        fire_if_refused(&self.trigger, done).map_err(Error::unconfirmed)
    }

    async fn fenced(self, what: &'static str, ops: Vec<TxnOp>) -> Result<TxnResponse> {
        let (key, rev) = (self.own.key.as_str(), self.own.create_revision);
        let mut etcd = self.own.session.store()?;
        let txn = if_ours(key, Some(rev), ops);
        // Not resent: a write whose reply was lost is `Indeterminate`.
        let sent = async { etcd.txn(txn).await.map_err(|e| from_etcd(what, e)) };
        let resp = within(what, self.own.session.rpc_timeout(), sent)
            .await
            .map_err(Error::unconfirmed)?;
        if !resp.succeeded() {
            return Err(Error::FenceRejected {
                what: format!(
                    "{what}: our {} key {key} (created at revision {rev}) is gone",
                    self.kind
                ),
            });
        }
        Ok(resp)
    }
}

impl StoreEntry for EtcdKey {
    fn runtime(&self) -> &Runtime {
        self.client.runtime()
    }

    fn rpc_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }

    fn holder(&self) -> &str {
        &self.own.key
    }

    fn session_id(&self) -> i64 {
        self.own.session.id()
    }

    fn label(&self) -> &str {
        self.own.session.label()
    }

    /// The keys below our key's parent; for a permit
    /// (`<name>/leases/<lease>-<n>`) everything below `<name>/`, where the
    /// semaphore's config, internal mutex and permits live. A put there
    /// would strip our key of its lease, or forge a contender or a size.
    fn inside_layout(&self, key: &str) -> Option<&str> {
        let parent = &self.own.key[..self.own.key.rfind('/').map_or(0, |i| i + 1)];
        let layout = match self.kind {
            "permit" => parent.strip_suffix("leases/").unwrap_or(parent),
            "read lock" | "write lock" => &self.own.prefix,
            _ => parent,
        };
        key.starts_with(layout).then_some(layout)
    }

    async fn delete(self) -> Result<()> {
        let (own, rev) = (&self.own, Some(self.own.create_revision));
        match &self.marker {
            Some(marker) => delete_downgraded(own, marker).await,
            None => delete_key(&own.session, &own.key, rev).await,
        }
    }

    /// Deletes our key (retrying until done or the session is lost), then
    /// gives this process's turns at the name back.
    fn delete_until_done(self) -> impl Future<Output = ()> + Send + 'static {
        let turns = self.turn.lock().take().unwrap_or_default();
        async move {
            let Some(marker) = self.marker else {
                let (rev, own) = (Some(self.own.create_revision), self.own);
                return delete_until_done(own.session, own.key, rev, turns).await;
            };
            let own = &self.own;
            let what = format!("[{}] delete {} and {marker}", own.session.label(), own.key);
            let lost = || own.session.is_lost();
            until_done(&what, Backoff::RETRY, lost, || {
                delete_downgraded(own, &marker)
            })
            .await;
            drop(turns);
        }
    }

    fn released(&self) {
        drop(self.turn.lock().take());
    }

    fn write(
        self,
        what: &'static str,
        write: FencedWrite,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let checked = match &write {
            FencedWrite::Put { key, .. } | FencedWrite::Delete { key } => validate_key(key),
            FencedWrite::Proclaim { .. } => Ok(()),
        };
        let op = match write {
            FencedWrite::Put { key, value } => TxnOp::put(key, value, None),
            FencedWrite::Delete { key } => TxnOp::delete(key, None),
            // Our key again, with our lease, as Go's `Election.Proclaim`.
            FencedWrite::Proclaim { value } => {
                let lease = PutOptions::new().with_lease(self.own.session.id());
                TxnOp::put(self.own.key.as_str(), value, Some(lease))
            }
        };
        async move {
            checked?;
            self.fenced(what, vec![op]).await.map(drop)
        }
    }
}

/// Our held key, watched for deletion (core's [`watch_held`]).
impl EntryWatcher for OwnKey {
    type Watch = Interest;

    /// An interest in the deletions our key's watch hears, then a read of
    /// our key.
    async fn watch(&self) -> Result<Option<Interest>> {
        let (etcd, timeout) = (self.session.store()?, self.session.rpc_timeout());
        let mut interest = self.watches.interest(&self.heard_on);
        let read = retrying_get(&etcd, timeout, &self.key, None).await?;
        let ours = read
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == self.create_revision);
        let Some(rev) = read.header().map(|h| h.revision()).filter(|_| ours) else {
            return Ok(None);
        };
        interest.ours(&self.key, rev);
        interest.hold();
        Ok(Some(interest))
    }

    async fn deleted(watch: &mut Interest) -> Result<()> {
        watch.ours_deleted().await
    }
}

impl fmt::Debug for EtcdKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdKey")
            .field("key", &self.own.key)
            .field("create_revision", &self.own.create_revision)
            .finish()
    }
}
