//! `EtcdLock`: a held etcd mutex key, its loss watch and its fenced writes.

use std::fmt;
use std::sync::Arc;

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnResponse};
use recipes_core::{
    Backoff, Error, FencedLease, FencingToken, HeldLease, LossReason, LossSignal, LossTrigger,
    Result,
};
use tokio::sync::oneshot;

use crate::client::EtcdClient;
use crate::key::{delete_key, delete_until_done, Acquired};
use crate::rpc::{retrying, rpc};
use crate::session::{Session, Turns};
use crate::watch::{Gone, WatchSet};

/// This process's turns at a lock name (the session's and the handle's),
/// shared by a held lock and its key watch: whoever learns first that the
/// key is gone gives them back.
type Turn = Arc<parking_lot::Mutex<Option<Turns>>>;

/// A held etcd mutex key: the lease behind a [`MutexGuard`](crate::MutexGuard).
///
/// Its loss signal fires when the client's lease may be gone (the local
/// deadline passed without an acknowledged keep-alive, or a reply said it is
/// gone), when the key is deleted by anyone, at release, and when the client
/// closes. Fenced writes ([`put`](EtcdLock::put), [`delete`](EtcdLock::delete),
/// [`txn`](EtcdLock::txn)) are applied by etcd only while the key we created
/// still exists: a holder that lost the lock — paused, partitioned, its key
/// deleted — gets [`Error::FenceRejected`], whatever its loss signal says.
pub struct EtcdLock {
    client: EtcdClient,
    session: Arc<Session>,
    key: String,
    // What the key is, for messages: "lock" or "permit".
    kind: &'static str,
    create_revision: i64,
    token: FencingToken,
    pub(crate) trigger: LossTrigger,
    signal: LossSignal,
    // This process's turns at the name (the session's and the handle's);
    // given back once the key is gone (released, or deleted by someone: the
    // watch gives them back then).
    turn: Turn,
    // Dropping it stops the key watch.
    _stop_watch: oneshot::Sender<()>,
}

impl EtcdLock {
    /// Hold the key `a` won; `kind` names it in messages.
    pub(crate) fn held(client: EtcdClient, a: Acquired, kind: &'static str) -> EtcdLock {
        let trigger = a.session.epoch().trigger().child();
        let signal = trigger.signal();
        let turn: Turn = Arc::new(parking_lot::Mutex::new(Some(a.turns)));
        let (stop_watch, stopped) = oneshot::channel();
        client.runtime().handle().spawn(watch_own_key(
            a.session.clone(),
            a.key.clone(),
            a.create_revision,
            a.watches,
            trigger.clone(),
            turn.clone(),
            stopped,
        ));
        log::debug!(
            "[{}] holds {} (created at {}, fence {})",
            a.session.label(),
            a.key,
            a.create_revision,
            a.fence
        );
        EtcdLock {
            client,
            session: a.session,
            key: a.key,
            kind,
            create_revision: a.create_revision,
            token: FencingToken(a.fence.unsigned_abs()),
            trigger,
            signal,
            turn,
            _stop_watch: stop_watch,
        }
    }

    /// Our key, `<name>/<lease id in hex>`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The id of the lease our key is bound to.
    pub fn lease_id(&self) -> i64 {
        self.session.lease()
    }

    /// The `create_revision` of our key: the compare target of fenced
    /// writes (`create_revision(key) == this`), as Go's `Mutex.IsOwner()`.
    /// Not the fencing token: that is the revision at which ownership was
    /// confirmed.
    pub fn create_revision(&self) -> i64 {
        self.create_revision
    }

    /// Put `key` = `value`, only while this lock is held: one transaction
    /// guarded by `create_revision(our key) == ours`. Returns the revision
    /// of the write.
    ///
    /// # Errors
    ///
    /// [`Error::FenceRejected`] when our key is gone (the lock was lost);
    /// [`Error::Indeterminate`] when no reply came (the write may have been
    /// applied); other backend errors.
    pub fn put(&self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<i64> {
        let key = self.outside_our_layout(key.into())?;
        let op = TxnOp::put(key, value.into(), None);
        let resp = self.fenced("fenced put", vec![op])?;
        Ok(resp.header().map(|h| h.revision()).unwrap_or_default())
    }

    /// Delete `key`, only while this lock is held. Returns the revision of
    /// the write.
    ///
    /// # Errors
    ///
    /// As for [`put`](EtcdLock::put).
    pub fn delete(&self, key: impl Into<Vec<u8>>) -> Result<i64> {
        let key = self.outside_our_layout(key.into())?;
        let op = TxnOp::delete(key, None);
        let resp = self.fenced("fenced delete", vec![op])?;
        Ok(resp.header().map(|h| h.revision()).unwrap_or_default())
    }

    /// Run `ops` in one transaction, only while this lock is held. Unlike
    /// [`put`](EtcdLock::put) and [`delete`](EtcdLock::delete), the keys of
    /// `ops` are not checked: keep them out of the recipe's own keys.
    ///
    /// # Errors
    ///
    /// As for [`put`](EtcdLock::put).
    pub fn txn(&self, ops: Vec<TxnOp>) -> Result<TxnResponse> {
        self.fenced("fenced transaction", ops)
    }

    /// `key`, unless it lies inside the recipe's own keys: a put there
    /// would strip our key of its lease, or forge a contender or a size.
    fn outside_our_layout(&self, key: Vec<u8>) -> Result<Vec<u8>> {
        let parent = &self.key[..self.key.rfind('/').map_or(0, |i| i + 1)];
        let layout = match self.kind {
            // `<name>/leases/<lease>-<n>`: the semaphore's config, internal
            // mutex and permits all live under `<name>/`.
            "permit" => parent.strip_suffix("leases/").unwrap_or(parent),
            _ => parent,
        };
        if key.starts_with(layout.as_bytes()) {
            let shown = String::from_utf8_lossy(&key[..key.len().min(80)]).into_owned();
            return Err(Error::invalid(format!(
                "a fenced write to {shown:?} would land among the {}'s own keys ({layout}…), \
                 which would break it; write to a key outside {layout}",
                self.kind
            )));
        }
        Ok(key)
    }

    fn fenced(&self, what: &'static str, ops: Vec<TxnOp>) -> Result<TxnResponse> {
        let (session, key, rev) = (self.session.clone(), self.key.clone(), self.create_revision);
        let kind = self.kind;
        self.client.call(what, async move {
            let mut etcd = session.etcd()?;
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, rev)])
                .and_then(ops);
            let resp = rpc(what, session.rpc_timeout(), etcd.txn(txn))
                .await
                .map_err(Error::unconfirmed)?;
            if !resp.succeeded() {
                return Err(Error::FenceRejected {
                    what: format!(
                        "{what}: our {kind} key {key} (created at revision {rev}) is gone"
                    ),
                });
            }
            Ok(resp)
        })
    }
}

/// Watch our key: its deletion is loss. Goes on with the acquisition's
/// watch when it covers the key since the confirming read; otherwise (and
/// after a broken stream) a synced watch, then a read of the key, so a
/// deletion before the watch existed is seen too.
async fn watch_own_key(
    session: Arc<Session>,
    key: String,
    create_revision: i64,
    watches: Option<WatchSet>,
    trigger: LossTrigger,
    turn: Turn,
    stop: oneshot::Receiver<()>,
) {
    let gone = |why: &str| {
        if trigger.fire(LossReason::Deleted) {
            log::info!("[{}] {key} {why}: lock lost", session.label());
        }
        // The key is gone: the next acquisition of the name in this process
        // need not wait for this guard to be dropped.
        drop(turn.lock().take());
    };
    let watching = async {
        let mut handed_over = watches;
        let mut backoff = Backoff::RETRY;
        loop {
            if trigger.is_fired() {
                return;
            }
            let mut watch = match handed_over.take() {
                Some(w) => w,
                None => match watch_and_read(&session, &key, create_revision).await {
                    Ok(Some(w)) => {
                        backoff.reset();
                        w
                    }
                    Ok(None) => {
                        gone("is gone");
                        return;
                    }
                    Err(e) => {
                        log::debug!("[{}] watch on {key} failed: {e}", session.label());
                        backoff.pause().await;
                        continue;
                    }
                },
            };
            loop {
                match watch.next().await {
                    Ok(Gone::Ours) => {
                        gone("was deleted");
                        return;
                    }
                    // The last contender ahead, gone before we held.
                    Ok(Gone::Ahead) => {}
                    Err(e) => {
                        log::debug!("[{}] watch on {key} broke: {e}", session.label());
                        break;
                    }
                }
            }
        }
    };
    tokio::select! {
        _ = stop => {}
        _ = watching => {}
    }
}

/// A new synced watch on our key, then a read: `None` when the key is gone.
async fn watch_and_read(
    session: &Session,
    key: &str,
    create_revision: i64,
) -> Result<Option<WatchSet>> {
    let etcd = session.etcd()?;
    let timeout = session.rpc_timeout();
    let watch = WatchSet::open(&etcd, key, timeout).await?;
    let read = retrying(&format!("read {key}"), timeout, || {
        let mut etcd = etcd.clone();
        async move { etcd.get(key, None).await }
    })
    .await?;
    let ours = read
        .kvs()
        .first()
        .is_some_and(|kv| kv.create_revision() == create_revision);
    Ok(ours.then_some(watch))
}

impl EtcdLock {
    /// Release on the runtime: fire the signal, delete our key (retrying
    /// until done or the session is lost), then give this process's turns
    /// at the name back.
    pub(crate) fn released(self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.trigger.fire(LossReason::Released);
        let turns = self.turn.lock().take().unwrap_or_default();
        delete_until_done(self.session, self.key, Some(self.create_revision), turns)
    }
}

impl HeldLease for EtcdLock {
    fn loss_signal(&self) -> &LossSignal {
        &self.signal
    }

    fn holder(&self) -> &str {
        &self.key
    }

    fn release(self) -> Result<()> {
        self.trigger.fire(LossReason::Released);
        let (session, key, rev) = (self.session.clone(), self.key.clone(), self.create_revision);
        let released = self.client.call("release", async move {
            delete_key(&session, &key, Some(rev)).await
        });
        match released {
            Ok(()) => {
                drop(self.turn.lock().take());
                Ok(())
            }
            Err(e) => {
                // Keep trying in the background; the lease bounds it.
                self.release_in_background();
                Err(e)
            }
        }
    }

    fn release_in_background(self) {
        let (client, label, key) = (
            self.client.clone(),
            self.session.label().to_owned(),
            self.key.clone(),
        );
        if !client.runtime().spawn(self.released()) {
            log::warn!("[{label}] client closed: {key} stays until the lease ends");
        }
    }
}

impl FencedLease for EtcdLock {
    fn token(&self) -> FencingToken {
        self.token
    }
}

impl fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLock")
            .field("key", &self.key)
            .field("create_revision", &self.create_revision)
            .field("token", &self.token)
            .field("lost", &self.signal.reason())
            .finish()
    }
}
