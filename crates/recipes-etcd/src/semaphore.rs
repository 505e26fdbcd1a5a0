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
//! Core's [`admit`](recipes_core::engine::admit) composes it from two
//! drivers of the contend engine:
//!
//! 1. Hold the internal mutex (`contend.rs`, on the client's own lease),
//!    waiting for it with the acquisition's deadline.
//! 2. Contend among the permit keys (`permit.rs`): one transaction creates
//!    our key if the config still holds our N and lists every permit key in
//!    create order; ours holds when fewer than N are older. Otherwise a
//!    synced watch on the permit prefix wakes us at any deletion, and we
//!    list again. Our own key's deletion, or a lost session, starts over
//!    with a new key.
//! 3. Admitted (or timed out, or failed): release the internal mutex.
//!
//! At most N permits are held at any time even if the internal mutex is
//! broken (its key deleted by hand): every holder had fewer than N keys
//! older than its own at its admitting read, and keys are never
//! re-created; every other current holder is older than the newest one and
//! was seen by its admitting read, so they number fewer than N. The mutex
//! keeps to one the waiters that wake at every release.
//!
//! What holds under pause and partition: see [`Semaphore`].

use std::time::Instant as StdInstant;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use recipes_core::engine::{self, SemaphoreDriver};
use recipes_core::{Error, Result, SemaphoreBackend};
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::contend::{Claim, KeyContender, Via};
use crate::key::Acquired;
use crate::lock::{EtcdKey, EtcdLock};
use crate::names::validate_name;
use crate::permit::PermitContender;
use crate::rpc::{read_at, retrying_txn, unexpected};
use crate::session::Session;

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
/// ([`FencedWrites`](crate::FencedWrites)) are refused once its key is gone; a
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
pub type SemaphorePermit = recipes_core::SemaphorePermit<EtcdLock>;

/// The etcd semaphore backend; use it through [`Semaphore`], which
/// documents what holds under pause and partition.
#[derive(Debug, Clone)]
pub struct EtcdSemaphore {
    pub(crate) client: EtcdClient,
    pub(crate) name: String,
    pub(crate) permits: u32,
    pub(crate) config_key: String,
    pub(crate) lock_name: String,
    pub(crate) lock_prefix: String,
    pub(crate) lease_prefix: String,
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
    pub(crate) fn check_stored(&self, stored: &[u8]) -> Result<()> {
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
    pub(crate) async fn ensure_size(&self, session: &Session) -> Result<()> {
        let etcd = session.etcd()?;
        let config = self.config_key.as_str();
        let txn = Txn::new()
            .when([Compare::create_revision(config, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(config, self.permits.to_string(), None)])
            .or_else([TxnOp::get(config, None)]);
        // Safe to send twice: a second run finds our own value.
        let what = format!("store the size of {}", self.name);
        let resp = retrying_txn(&etcd, &what, session.rpc_timeout(), &txn).await?;
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
}

impl SemaphoreBackend for EtcdSemaphore {
    type Permit = EtcdLock;

    fn name(&self) -> &str {
        &self.name
    }

    fn permits(&self) -> u32 {
        self.permits
    }

    fn acquire(&self, deadline: Option<StdInstant>) -> Result<Option<EtcdLock>> {
        let this = self.clone();
        self.client
            .runtime()
            .call_until("acquire a permit", None, async move {
                let admission = Admission {
                    lock: KeyContender {
                        client: &this.client,
                        name: &this.lock_name,
                        prefix: &this.lock_prefix,
                        via: Via::ClientSession,
                        claim: Claim::Lock,
                    },
                    permits: PermitContender { semaphore: &this },
                };
                let won = engine::admit(&admission, deadline.map(Instant::from_std)).await?;
                Ok(won.map(|a| EtcdKey::held(this.client.clone(), a, "permit")))
            })
    }
}

/// One acquisition's side of the engine's semaphore: the internal mutex
/// `<name>/locks` on the client's own session, and the permit keys.
struct Admission<'a> {
    lock: KeyContender<'a>,
    permits: PermitContender<'a>,
}

impl<'a> SemaphoreDriver for Admission<'a> {
    type Lock = KeyContender<'a>;
    type Permit = PermitContender<'a>;

    /// No round trip: the size was checked when the handle was made, and
    /// every permit's create transaction checks it again (and stores it
    /// again if it was deleted).
    async fn ensure_size(&self) -> Result<()> {
        Ok(())
    }

    fn lock(&self) -> &KeyContender<'a> {
        &self.lock
    }

    fn permits(&self) -> &PermitContender<'a> {
        &self.permits
    }

    /// Awaited, so that a `try_acquire` right after finds the mutex free.
    async fn unlock(held: Acquired) {
        held.delete().await;
    }

    fn unlock_in_background(&self, held: Acquired) {
        recipes_core::engine::ContendDriver::spawn(&self.lock, held.delete());
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
    ///     permit.put("/downloads/running/job-7", b"started")?;
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
