//! The etcd semaphore: the structure of Curator's `InterProcessSemaphoreV2`
//! on etcd — an internal mutex, one key per permit, the size stored in the
//! store and checked. No etcd library has this recipe; the layout is ours
//! (`docs/etcd-semaphore.md`).
//!
//! # Layout
//!
//! A semaphore named `/sems/x` owns three things:
//!
//! - `/sems/x/config`: N, the number of permits, in decimal. Created by the
//!   first client with a put-if-absent transaction, without a lease: it
//!   outlives every client, so every later client is checked against it. A
//!   client that asks for another N gets [`Error::InvalidArgument`].
//! - `/sems/x/locks/<lease id in hex>`: the internal mutex, in the etcd
//!   mutex layout (`mutex.rs`; `etcdctl lock /sems/x/locks` contends with
//!   it). Whoever holds it is the one waiter allowed to wait for a permit.
//! - `/sems/x/leases/<lease id in hex>-<n>`: one key per permit (and one for
//!   the waiter), bound to the client's lease. `<n>` is a process-wide
//!   counter, so one client (one lease) can hold several permits of one
//!   semaphore, each with its own key, loss signal and fenced writes.
//!
//! Only keys exactly one level below `/sems/x/leases/` count as permits.
//!
//! # Protocol
//!
//! 1. Hold the internal mutex (waiting for it with the acquisition's
//!    deadline).
//! 2. One transaction: if our permit key does not exist and the config
//!    still holds our N, put the key with our lease and read every key
//!    under the permit prefix. The reply's header revision is our key's
//!    `create_revision`; the read counts the permits, ours included.
//! 3. While more than N exist, wait for one to go: a synced watch on the
//!    permit prefix (started without a revision, its `created` reply
//!    awaited), then read again — our key and the count in one read-only
//!    transaction. A permit's deletion wakes us; our own key's deletion
//!    makes us start over with a new key.
//! 4. Admitted (or timed out, or failed): release the internal mutex.
//!
//! At most N permits are held at any time even if the internal mutex is
//! broken (its key deleted by hand): every holder counted every key that
//! existed at its admitting read, and keys are never re-created. The mutex
//! is there so that at most one waiter's key exists, without which N + 1
//! waiters would all count N + 1 and none would proceed.
//!
//! # Under pause and partition
//!
//! A permit is a lease like a lock: its loss signal fires at the session's
//! local deadline (no acknowledged keep-alive: a partition, a paused
//! process), when a keep-alive reply says the lease is gone, when its key
//! is deleted (watched), at release, and when the client closes. A holder
//! paused right after checking its signal may run on after etcd expired
//! its lease and admitted another: N + 1 workers can overlap for a while.
//! Permits have no shared fencing order (they are concurrent by design);
//! each permit's writes in etcd are fenced by its own key
//! (`create_revision(permit key) == ours`).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, GetResponse, PutOptions, Txn, TxnOp, TxnResponse,
    WatchFilterType, WatchOptions, WatchStream,
};
use recipes_core::{Error, HeldLease, LossSignal, Result, SemaphoreBackend};
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::error::{from_etcd, retrying};
use crate::lock::EtcdLock;
use crate::mutex::{
    self, delete_key, header_revision, passed, read_at, txn_request, unexpected, wake_at, Acquired,
    Cleanup, RETRY_PAUSE,
};
use crate::names::{is_contender, validate_name};
use crate::session::Session;
use crate::watch::WatchSet;

/// A counting semaphore in etcd: at most [`permits`](Semaphore::permits)
/// holders at once, across every process that uses the same name.
///
/// Made by [`EtcdClient::semaphore`]. Acquisitions through one client wait
/// for each other at the internal mutex in the client before they wait in
/// etcd; one client can hold several permits. `try_acquire` may find no
/// permit while another client is being admitted (it holds the internal
/// mutex for one round trip).
///
/// # Under pause and partition
///
/// Guaranteed (clocks within 500 ppm of the server's): a permit's loss
/// signal fires before etcd can expire the client's lease and admit another
/// holder in its place; a permit's fenced writes
/// ([`EtcdPermit::put`] and friends) are refused once its key is gone; a
/// timed-out, failed or abandoned acquisition leaves no key (deleted at
/// once, or by the lease's end when etcd cannot be reached). Not
/// guaranteed: that a holder stops in time — a holder paused right after
/// checking its signal runs on after etcd gave its permit away, so N + 1
/// workers can overlap; only fenced writes stop it. A partitioned holder
/// loses its permits at its local deadline even if etcd still keeps the
/// lease. Permits carry no fencing token: they have no order.
pub type Semaphore = recipes_core::Semaphore<EtcdSemaphore>;

/// A held permit of a [`Semaphore`]: its loss signal, and writes fenced by
/// its own key through [`lease`](recipes_core::SemaphorePermit::lease).
///
/// Under pause and partition its loss signal fires before etcd can give
/// the permit away (see [`Semaphore`]); a holder paused right after
/// checking it is stopped only by the fenced writes.
pub type SemaphorePermit = recipes_core::SemaphorePermit<EtcdPermit>;

/// Tells apart the permit keys of one lease. A lease belongs to one client
/// in one process, so a process-wide counter makes `<lease>-<n>` unique.
static PERMIT_SEQ: AtomicU64 = AtomicU64::new(0);

/// The etcd semaphore backend; use it through [`Semaphore`], which
/// documents what holds under pause and partition.
#[derive(Debug, Clone)]
pub struct EtcdSemaphore {
    client: EtcdClient,
    name: String,
    permits: u32,
    config_key: String,
    lock_name: String,
    lock_prefix: String,
    lease_prefix: String,
}

impl EtcdSemaphore {
    fn new(client: EtcdClient, name: &str, permits: u32) -> Result<EtcdSemaphore> {
        validate_name(name)?;
        if permits == 0 {
            return Err(Error::invalid(format!(
                "the etcd semaphore {name} needs at least one permit; ask for 1 or more"
            )));
        }
        let lock_name = format!("{name}/locks");
        Ok(EtcdSemaphore {
            client,
            name: name.to_owned(),
            permits,
            config_key: format!("{name}/config"),
            lock_prefix: format!("{lock_name}/"),
            lock_name,
            lease_prefix: format!("{name}/leases/"),
        })
    }

    /// The key that stores the number of permits (`<name>/config`).
    pub fn config_key(&self) -> &str {
        &self.config_key
    }

    /// The key prefix of the internal mutex (`<name>/locks/`).
    pub fn lock_prefix(&self) -> &str {
        &self.lock_prefix
    }

    /// The key prefix of the permit keys (`<name>/leases/`).
    pub fn lease_prefix(&self) -> &str {
        &self.lease_prefix
    }

    /// The stored size is ours, or an [`Error::InvalidArgument`] that says
    /// what to change.
    fn check_stored(&self, stored: &[u8]) -> Result<()> {
        if stored == self.permits.to_string().as_bytes() {
            return Ok(());
        }
        let (name, config, permits) = (&self.name, &self.config_key, self.permits);
        let text = String::from_utf8_lossy(stored);
        Err(match text.parse::<u32>() {
            Ok(n) if n != permits => Error::invalid(format!(
                "the etcd semaphore {name} has {n} permits (stored in {config}); this client \
                 asked for {permits}: ask for {n}, or use another name (to resize it, stop \
                 every user and delete {config})"
            )),
            _ => Error::invalid(format!(
                "{config} holds {text:?}, not the size of the etcd semaphore {name}: use \
                 another name, or, if nothing uses it, delete {config}"
            )),
        })
    }

    /// Store our size unless one is stored; check the stored one.
    async fn ensure_size(&self, session: &Session) -> Result<()> {
        let etcd = session.etcd()?;
        let config = self.config_key.as_str();
        let txn = Txn::new()
            .when([Compare::create_revision(config, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(config, self.permits.to_string(), None)])
            .or_else([TxnOp::get(config, None)]);
        // Safe to send twice: a second run finds our own value.
        let what = format!("store the size of {}", self.name);
        let resp = retrying(&what, session.rpc_timeout(), || txn_request(&etcd, &txn)).await?;
        if resp.succeeded() {
            log::debug!(
                "[{}] {config} = {} (created)",
                session.label(),
                self.permits
            );
            return Ok(());
        }
        match read_at(&resp, 0)?.kvs().first() {
            Some(kv) => self.check_stored(kv.value()),
            None => Err(unexpected("the size key vanished inside a transaction")),
        }
    }

    /// How many permit keys a read of the permit prefix shows.
    fn count(&self, read: &GetResponse) -> usize {
        read.kvs()
            .iter()
            .filter(|kv| is_contender(&self.lease_prefix, kv.key()))
            .count()
    }

    fn all_permits(&self) -> TxnOp {
        TxnOp::get(
            self.lease_prefix.as_str(),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
    }

    /// Hold the internal mutex, wait for a permit, give the mutex back.
    async fn attempt(&self, deadline: Option<Instant>) -> Result<Admission> {
        let lock = mutex::acquire(
            &self.client,
            &self.lock_name,
            &self.lock_prefix,
            mutex::Via::ClientSession,
            mutex::Claim::Lock,
            deadline,
        )
        .await?;
        let Some(mut lock) = lock else {
            return Ok(Admission::TimedOut);
        };
        // The internal key's deletion does not matter to us (see the module
        // docs): no watch on it.
        lock.watches = None;
        let session = lock.session.clone();
        let admitted = self.admit(&session, deadline).await;
        release_internal(lock).await;
        admitted
    }

    /// With the internal mutex held: create our permit key and wait until
    /// at most N permit keys exist.
    async fn admit(&self, session: &Arc<Session>, deadline: Option<Instant>) -> Result<Admission> {
        let seq = PERMIT_SEQ.fetch_add(1, Ordering::Relaxed);
        let key = format!("{}{:x}-{seq}", self.lease_prefix, session.lease());
        let mut cleanup = Cleanup {
            rt: Some(self.client.runtime().clone()),
            session: session.clone(),
            key: key.clone(),
            create_revision: None,
            turn: None,
        };
        let etcd = session.etcd()?;
        let rpc_timeout = session.rpc_timeout();
        // The watch on our own key starts alongside the transaction; it
        // reports the key's deletion once the permit is held.
        let mut own_etcd = etcd.clone();
        let (created, own) = tokio::join!(
            self.create(&etcd, session, &key),
            WatchSet::open(&mut own_etcd, &key, rpc_timeout),
        );
        let created = match created {
            Ok(c) => c,
            Err(e @ Error::InvalidArgument(_)) => {
                // The size did not match: the transaction put nothing.
                cleanup.rt = None;
                return Err(e);
            }
            // The put may have been applied: the cleanup deletes the key.
            Err(e) => return Err(e),
        };
        let create_revision = created.create_revision;
        cleanup.create_revision = Some(create_revision);
        log::debug!(
            "[{}] {key} created at revision {create_revision}; {} permit key(s) of {}",
            session.label(),
            created.count,
            self.permits
        );
        let own = own
            .map_err(|e| log::debug!("[{}] watch on {key} failed: {e}", session.label()))
            .ok();
        let mut waiting: Option<PrefixWatch> = None;
        let mut next = self.decide(created.count, created.header);
        loop {
            next = match next {
                Next::Admitted { revision } => {
                    log::debug!(
                        "[{}] {key} admitted at revision {revision}",
                        session.label()
                    );
                    // The watch covers our key from the admitting read on
                    // only if it existed by then; otherwise the permit's
                    // watch starts afresh (and reads the key again).
                    let watches = own.filter(|w| w.synced_at() <= revision);
                    return Ok(Admission::Admitted(Box::new(Acquired {
                        session: session.clone(),
                        key,
                        create_revision,
                        fence: revision,
                        watches,
                        cleanup,
                        handle_turn: None,
                    })));
                }
                Next::OursGone => {
                    log::debug!("[{}] {key} vanished while waiting", session.label());
                    cleanup.run().await;
                    return Ok(Admission::Restart);
                }
                Next::Check => {
                    if session.is_lost() {
                        cleanup.run().await;
                        return Ok(Admission::Restart);
                    }
                    match self.check(&etcd, rpc_timeout, &key, create_revision).await {
                        Ok(next) => next,
                        Err(e) if e.is_retryable() && !passed(deadline) => {
                            log::debug!("[{}] permit read failed: {e}; retrying", session.label());
                            tokio::time::sleep(RETRY_PAUSE).await;
                            Next::Check
                        }
                        Err(e) => return Err(e),
                    }
                }
                Next::Wait => {
                    if passed(deadline) {
                        cleanup.run().await;
                        return Ok(Admission::TimedOut);
                    }
                    if session.is_lost() {
                        cleanup.run().await;
                        return Ok(Admission::Restart);
                    }
                    let outcome = match waiting.as_mut() {
                        // Confirmed before the read that counted too many:
                        // no deletion after that read can be missed.
                        Some(w) => {
                            let wake = wake_at(session, deadline);
                            tokio::select! {
                                gone = w.deleted() => Some(gone),
                                _ = tokio::time::sleep_until(wake) => None,
                                _ = session.lost() => None,
                            }
                        }
                        None => {
                            log::debug!(
                                "[{}] {key} waits for one of {} permits",
                                session.label(),
                                self.permits
                            );
                            let opened =
                                PrefixWatch::open(&etcd, &self.lease_prefix, rpc_timeout).await;
                            Some(opened.map(|w| waiting = Some(w)))
                        }
                    };
                    match outcome {
                        // A key went, or the watch now exists: read again.
                        Some(Ok(())) => Next::Check,
                        Some(Err(e)) if e.is_retryable() => {
                            log::debug!("[{}] permit watch broke: {e}", session.label());
                            waiting = None;
                            tokio::time::sleep(RETRY_PAUSE).await;
                            Next::Check
                        }
                        Some(Err(e)) => return Err(e),
                        // Woken to look at the deadline and the session.
                        None => Next::Wait,
                    }
                }
            };
        }
    }

    fn decide(&self, count: usize, revision: i64) -> Next {
        if count <= self.permits as usize {
            Next::Admitted { revision }
        } else {
            Next::Wait
        }
    }

    /// Create our permit key if the stored size is ours, and count the
    /// permits in the same transaction. Stores the size first if its key
    /// is missing.
    async fn create(
        &self,
        etcd: &etcd_client::Client,
        session: &Session,
        key: &str,
    ) -> Result<Created> {
        let config = self.config_key.as_str();
        let txn = Txn::new()
            .when([
                Compare::create_revision(key, CompareOp::Equal, 0),
                Compare::value(config, CompareOp::Equal, self.permits.to_string()),
            ])
            .and_then([
                TxnOp::put(
                    key,
                    Vec::new(),
                    Some(PutOptions::new().with_lease(session.lease())),
                ),
                self.all_permits(),
            ])
            .or_else([
                TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
                TxnOp::get(config, None),
                self.all_permits(),
            ]);
        let what = format!("create a permit key of {}", self.name);
        loop {
            // Safe to send twice: a second run finds our key and reads it.
            let resp = retrying(&what, session.rpc_timeout(), || txn_request(etcd, &txn)).await?;
            let header = header_revision(&resp)?;
            if resp.succeeded() {
                let count = self.count(&read_at(&resp, 1)?);
                return Ok(Created {
                    create_revision: header,
                    header,
                    count,
                });
            }
            // An earlier sending put our key: go on with it.
            if let Some(kv) = read_at(&resp, 0)?.kvs().first() {
                let count = self.count(&read_at(&resp, 2)?);
                return Ok(Created {
                    create_revision: kv.create_revision(),
                    header,
                    count,
                });
            }
            match read_at(&resp, 1)?.kvs().first() {
                Some(kv) => self.check_stored(kv.value())?,
                // Deleted by hand since: store it again and retry.
                None => self.ensure_size(session).await?,
            }
        }
    }

    /// One read-only transaction: does our key still exist, and how many
    /// permit keys are there?
    async fn check(
        &self,
        etcd: &etcd_client::Client,
        rpc_timeout: Duration,
        key: &str,
        create_revision: i64,
    ) -> Result<Next> {
        let txn = Txn::new().and_then([
            TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
            self.all_permits(),
        ]);
        let what = format!("count the permits of {}", self.name);
        let resp: TxnResponse = retrying(&what, rpc_timeout, || txn_request(etcd, &txn)).await?;
        let header = header_revision(&resp)?;
        let ours = read_at(&resp, 0)?;
        if ours
            .kvs()
            .first()
            .is_none_or(|kv| kv.create_revision() != create_revision)
        {
            return Ok(Next::OursGone);
        }
        Ok(self.decide(self.count(&read_at(&resp, 1)?), header))
    }
}

/// Give the internal mutex back: delete its key, then this process's turn
/// at it. Awaited, so that a `try_acquire` right after finds it free. When
/// the delete fails (or this future is dropped) the lock's cleanup retries
/// it on the runtime, holding the turn until the key is gone.
async fn release_internal(lock: Acquired) {
    match delete_key(&lock.session, &lock.key, Some(lock.create_revision)).await {
        Ok(()) => drop(lock.cleanup.disarm()),
        Err(e) => log::debug!(
            "[{}] delete {} failed: {e}; retrying in the background",
            lock.session.label(),
            lock.key
        ),
    }
}

/// What the permit transaction found.
struct Created {
    create_revision: i64,
    header: i64,
    count: usize,
}

/// How one admission ended.
enum Admission {
    Admitted(Box<Acquired>),
    TimedOut,
    /// The session was lost or our key vanished while waiting: start over
    /// with a new key.
    Restart,
}

/// What to do next while being admitted.
enum Next {
    /// At most N permit keys, ours among them, at this revision.
    Admitted { revision: i64 },
    /// Too many: wait for a permit key to go.
    Wait,
    /// Read again.
    Check,
    /// Our key is gone.
    OursGone,
}

/// A synced watch for deletions under the permit prefix.
struct PrefixWatch {
    stream: WatchStream,
}

impl PrefixWatch {
    /// Watch deletions under `prefix` from now on; returns once the server
    /// confirmed (its `created` reply), at most `timeout` later.
    async fn open(
        etcd: &etcd_client::Client,
        prefix: &str,
        timeout: Duration,
    ) -> Result<PrefixWatch> {
        let mut etcd = etcd.clone();
        let opened = async {
            let options = WatchOptions::new()
                .with_prefix()
                .with_filters([WatchFilterType::NoPut]);
            let mut stream = etcd
                .watch(prefix, Some(options))
                .await
                .map_err(|e| from_etcd("start a watch", e))?;
            loop {
                let reply = next_reply(&mut stream).await?;
                if reply.canceled() {
                    return Err(cancelled(reply.cancel_reason()));
                }
                if reply.created() {
                    return Ok(PrefixWatch { stream });
                }
            }
        };
        match tokio::time::timeout(timeout, opened).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout {
                what: format!("start a watch on {prefix}"),
                after: timeout,
            }),
        }
    }

    /// Resolves when a key under the prefix is deleted. An error means the
    /// stream broke: open another and read again.
    async fn deleted(&mut self) -> Result<()> {
        loop {
            let reply = next_reply(&mut self.stream).await?;
            if reply.canceled() {
                return Err(cancelled(reply.cancel_reason()));
            }
            if reply
                .events()
                .iter()
                .any(|ev| ev.event_type() == EventType::Delete)
            {
                return Ok(());
            }
        }
    }
}

async fn next_reply(stream: &mut WatchStream) -> Result<etcd_client::WatchResponse> {
    match stream.message().await {
        Ok(Some(reply)) => Ok(reply),
        Ok(None) => Err(Error::ConnectionLoss),
        Err(e) => Err(from_etcd("watch", e)),
    }
}

fn cancelled(reason: &str) -> Error {
    Error::Backend {
        message: format!("etcd cancelled the watch on the permit keys: {reason}"),
        retryable: true,
        source: None,
    }
}

impl SemaphoreBackend for EtcdSemaphore {
    type Permit = EtcdPermit;

    fn name(&self) -> &str {
        &self.name
    }

    fn permits(&self) -> u32 {
        self.permits
    }

    fn acquire(&self, deadline: Option<StdInstant>) -> Result<Option<EtcdPermit>> {
        let this = self.clone();
        let acquired = self
            .client
            .runtime()
            .call_until("acquire a permit", None, async move {
                let deadline = deadline.map(Instant::from_std);
                loop {
                    let session = this.client.live_session().await?;
                    let attempt = this.attempt(deadline);
                    let outcome = match deadline {
                        // The deadline bounds the waits; a stuck request is
                        // cut off an RPC timeout later (the cleanups then
                        // delete our keys).
                        Some(d) => {
                            let hard = d + session.rpc_timeout();
                            match tokio::time::timeout_at(hard, attempt).await {
                                Ok(r) => r?,
                                Err(_) => Admission::TimedOut,
                            }
                        }
                        None => attempt.await?,
                    };
                    match outcome {
                        Admission::Admitted(a) => return Ok(Some(*a)),
                        Admission::TimedOut => return Ok(None),
                        Admission::Restart if passed(deadline) => return Ok(None),
                        Admission::Restart => {
                            log::debug!("[{}] starting over on {}", session.label(), this.name);
                        }
                    }
                }
            })?;
        Ok(acquired.map(|a| EtcdPermit {
            lock: EtcdLock::held(self.client.clone(), a),
        }))
    }
}

/// A held etcd permit key: the lease behind a [`SemaphorePermit`].
///
/// Its loss signal fires when the client's lease may be gone (the local
/// deadline passed without an acknowledged keep-alive, or a reply said it
/// is gone), when its key is deleted by anyone, at release, and when the
/// client closes. Fenced writes ([`put`](EtcdPermit::put),
/// [`delete`](EtcdPermit::delete), [`txn`](EtcdPermit::txn)) are applied by
/// etcd only while this permit's key still exists: a holder that lost the
/// permit — paused, partitioned, its key deleted — gets
/// [`Error::FenceRejected`], whatever its loss signal says. Other permits
/// of the same semaphore, held at the same time, fence only their own
/// writes: there is no order among permits.
pub struct EtcdPermit {
    // A permit key is held, watched, fenced and released exactly like a
    // mutex key; only its fencing token (never exposed) means nothing.
    lock: EtcdLock,
}

impl EtcdPermit {
    /// Our key, `<name>/leases/<lease id in hex>-<n>`.
    pub fn key(&self) -> &str {
        self.lock.key()
    }

    /// The id of the lease our key is bound to.
    pub fn lease_id(&self) -> i64 {
        self.lock.lease_id()
    }

    /// The `create_revision` of our key: the compare target of fenced
    /// writes (`create_revision(key) == this`). Not a fencing token:
    /// permits have no order.
    pub fn create_revision(&self) -> i64 {
        self.lock.create_revision()
    }

    /// Put `key` = `value`, only while this permit is held: one transaction
    /// guarded by `create_revision(our key) == ours`. Returns the revision
    /// of the write.
    ///
    /// # Errors
    ///
    /// [`Error::FenceRejected`] when our key is gone (the permit was lost);
    /// [`Error::Indeterminate`] when no reply came (the write may have been
    /// applied); other backend errors.
    pub fn put(&self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<i64> {
        self.fenced("fenced put", self.lock.put(key, value))
    }

    /// Delete `key`, only while this permit is held. Returns the revision
    /// of the write.
    ///
    /// # Errors
    ///
    /// As for [`put`](EtcdPermit::put).
    pub fn delete(&self, key: impl Into<Vec<u8>>) -> Result<i64> {
        self.fenced("fenced delete", self.lock.delete(key))
    }

    /// Run `ops` in one transaction, only while this permit is held.
    ///
    /// # Errors
    ///
    /// As for [`put`](EtcdPermit::put).
    pub fn txn(&self, ops: Vec<TxnOp>) -> Result<TxnResponse> {
        self.fenced("fenced transaction", self.lock.txn(ops))
    }

    /// Say "permit" where the lock's refusal says "lock".
    fn fenced<T>(&self, what: &str, r: Result<T>) -> Result<T> {
        r.map_err(|e| match e {
            Error::FenceRejected { .. } => Error::FenceRejected {
                what: format!(
                    "{what}: our permit key {} (created at revision {}) is gone",
                    self.key(),
                    self.create_revision()
                ),
            },
            other => other,
        })
    }
}

impl HeldLease for EtcdPermit {
    fn loss_signal(&self) -> &LossSignal {
        self.lock.loss_signal()
    }

    fn holder(&self) -> &str {
        self.lock.holder()
    }

    fn release(self) -> Result<()> {
        self.lock.release()
    }

    fn release_in_background(self) {
        self.lock.release_in_background();
    }
}

impl fmt::Debug for EtcdPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdPermit")
            .field("key", &self.key())
            .field("create_revision", &self.create_revision())
            .field("lost", &self.lock.loss_signal().reason())
            .finish()
    }
}

impl EtcdClient {
    /// A semaphore with `permits` permits named `name` (keys under
    /// `<name>/`; see [`Semaphore`] and `docs/etcd-semaphore.md` for the
    /// layout). The size is stored in `<name>/config` by the first client
    /// and checked here: every client must ask for the same.
    ///
    /// Do not use one name for a semaphore and a mutex: the mutex would
    /// count `<name>/config` as a contender.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for zero permits, for a name that is
    /// empty, does not start with `/`, ends with `/`, has an empty
    /// component or a control character, and when `<name>/config` stores
    /// another size (the message says which; nothing is written then).
    /// Connection errors from the one request that stores or reads the
    /// size.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), recipes_etcd::Error> {
    /// use std::time::Duration;
    /// let client = recipes_etcd::EtcdClient::connect(["127.0.0.1:2379"])?;
    /// let downloads = client.semaphore("/limits/downloads", 4)?;
    /// if let Some(permit) = downloads.try_acquire_for(Duration::from_secs(5))? {
    ///     // Writes in etcd fenced by this permit's own key:
    ///     permit.lease().put("/downloads/running/job-7", "started")?;
    ///     permit.release()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        let backend = EtcdSemaphore::new(self.clone(), name, permits)?;
        let this = backend.clone();
        self.call("check the semaphore size", async move {
            let session = this.client.live_session().await?;
            this.ensure_size(&session).await
        })?;
        Ok(Semaphore::from_backend(backend))
    }
}
