//! The etcd semaphore: Curator's `InterProcessSemaphoreV2` structure on
//! etcd — the size in `<name>/config`, an internal mutex `<name>/locks`,
//! one key per permit under `<name>/leases/` — as a driver of core's
//! [`admit`](recipes_core::store::engine::admit). The layout and protocol are in
//! `docs/etcd-semaphore.md`.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnResponse};
use recipes_core::store::engine::{self, Admission, Unlock};
use recipes_core::store::{permits_name_taken, Backoff};
use recipes_core::Result;
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::contend::{Claim, KeyContender, Layout, Via};
use crate::key::Acquired;
use crate::lock::{EtcdKey, EtcdLock};
use crate::names::{
    is_contender, key_prefix, other_layout, read_prefix, size_key, validate_name, write_prefix,
};
use crate::rpc::{header_revision, read_at, retrying_txn, unexpected};
use crate::rw_queue::{none_under, one_under};
use crate::session::Etcd;

/// A counting semaphore in etcd (`docs/etcd-semaphore.md` has its
/// layout); see
/// [`recipes_core::Semaphore`] for the API and what holds under pause and
/// partition. Made by [`Client::semaphore`](crate::Client::semaphore).
///
/// Acquisitions through one client wait for each other at the internal
/// mutex in the client before they wait in etcd; one client can hold
/// several permits. `try_acquire` may find no permit while another client
/// is being admitted (it holds the internal mutex for one round trip).
pub type Semaphore = recipes_core::Semaphore<EtcdSemaphore>;

/// A held permit of a [`Semaphore`]; see [`recipes_core::SemaphorePermit`].
pub type SemaphorePermit = recipes_core::SemaphorePermit<EtcdLock>;

/// The etcd semaphore backend: core's semaphore over this client's verbs
/// (`locks.rs`); use it through [`Semaphore`].
pub type EtcdSemaphore = recipes_core::store::QueueSemaphore<EtcdClient>;

/// A semaphore's keys and size, as core's
/// [`LockStore::Semaphore`](recipes_core::store::LockStore::Semaphore).
#[derive(Debug, Clone)]
pub struct SemaphoreKeys {
    pub(crate) client: EtcdClient,
    pub(crate) name: String,
    pub(crate) permits: u32,
    pub(crate) config_key: String,
    pub(crate) lock_name: String,
    pub(crate) lock_prefix: String,
    pub(crate) lease_prefix: String,
}

/// Tries at storing a semaphore's size guarded by its ranges being
/// unchanged since the read ([`SemaphoreKeys::ensure_size`]).
const GUARDED_TRIES: u32 = 3;

impl SemaphoreKeys {
    pub(crate) fn new(client: EtcdClient, name: &str, permits: u32) -> Result<SemaphoreKeys> {
        validate_name("semaphore", name)?;
        recipes_core::store::check_permits(&format!("the etcd semaphore {name}"), permits)?;
        let lock_name = format!("{name}/locks");
        Ok(SemaphoreKeys {
            client,
            name: name.to_owned(),
            permits,
            config_key: size_key(&key_prefix(name)),
            lock_prefix: format!("{lock_name}/"),
            lock_name,
            lease_prefix: format!("{name}/leases/"),
        })
    }

    /// The stored size is ours, or an [`Error::InvalidArgument`] that says
    /// what to change.
    pub(crate) fn check_stored(&self, stored: &[u8]) -> Result<()> {
        let what = format!("the etcd semaphore {}", self.name);
        recipes_core::store::check_stored_size(&what, &self.config_key, stored, self.permits)
    }

    /// The size stored, read at `at` of `resp`, checked; the name refused
    /// when the reads of its readers' and writers' keys right after it
    /// found one.
    fn stored_and_alone(&self, resp: &TxnResponse, at: usize, prefix: &str) -> Result<()> {
        no_read_write_key(resp, at + 1, prefix)?;
        match read_at(resp, at)?.kvs().first() {
            Some(kv) => self.check_stored(kv.value()),
            None => Err(unexpected("the size key vanished inside a transaction")),
        }
    }

    /// Store our size unless one is stored; check the stored one. A lock's
    /// or an election's key one level below the name is
    /// [`Error::InvalidArgument`]: the name holds that recipe.
    pub(crate) async fn ensure_size(&self, etcd: &Etcd, timeout: Duration) -> Result<()> {
        // Their keys are `<name>/<lease hex>`: between `<name>/0` and
        // `<name>/g`, where our own `config` is the one key of ours. While
        // no size is stored, a lock named `<name>/leases` is refused too:
        // its keys are among our permits' (`<name>/leases/<lease hex>`, a
        // permit's with `-<n>` after it), which would count its entries as
        // permits (with a size stored, the lock's enter refuses).
        let prefix = key_prefix(&self.name);
        let leases = self.lease_prefix.as_str();
        let config = self.config_key.as_str();
        let hex_range = |p: &str| (format!("{p}0"), format!("{p}g"));
        let hex = |p: &str| {
            let (from, to) = hex_range(p);
            TxnOp::get(
                from,
                Some(GetOptions::new().with_range(to).with_keys_only()),
            )
        };
        // A lock's key below `p`: a contender's without a permit's `-<n>`.
        let lock_key =
            |p: &str, key: &[u8]| is_contender(p, key) && !key[p.len()..].contains(&b'-');
        let (readers, writers) = (read_prefix(&prefix), write_prefix(&prefix));
        let (mut backoff, mut tries) = (Backoff::RETRY, 0);
        loop {
            tries += 1;
            // A stored size is read here too: checked with no second trip.
            let txn = Txn::new()
                .when([Compare::create_revision(config, CompareOp::Equal, 0)])
                .and_then([hex(&prefix), hex(leases)])
                .or_else([
                    hex(&prefix),
                    TxnOp::get(config, None),
                    one_under(&readers),
                    one_under(&writers),
                ]);
            let what = format!("read the keys under {prefix}");
            let read = retrying_txn(etcd, &what, timeout, &txn).await?;
            let first = |at: usize, p: &str| -> Result<Option<Vec<u8>>> {
                let range = read_at(&read, at)?;
                let found = range.kvs().iter().find(|kv| lock_key(p, kv.key()));
                Ok(found.map(|kv| kv.key().to_vec()))
            };
            if let Some(key) = first(0, &prefix)? {
                let theirs = "a lock or election";
                return Err(other_layout(&prefix, "a semaphore", theirs, &key));
            }
            if !read.succeeded() {
                return self.stored_and_alone(&read, 1, &prefix);
            }
            if first(1, leases)?.is_some() {
                let theirs = "a lock or election";
                return Err(permits_name_taken("etcd", &self.name, theirs));
            }
            // Stored only while neither range gained a key since the read
            // (a lock that entered meanwhile: read again). The ranges hold
            // the keys of recipes nested under the name too (`<name>/db/…`
            // is in `<name>/0`..`<name>/g`), so a busy one could fail
            // every try: after a few, the size is stored on the read alone.
            let rev = header_revision(&read)?;
            let unchanged = |p: &str| {
                let (from, to) = hex_range(p);
                Compare::create_revision(from, CompareOp::Less, rev + 1).with_range(to)
            };
            let mut when = vec![
                Compare::create_revision(config, CompareOp::Equal, 0),
                none_under(&readers),
                none_under(&writers),
            ];
            if tries <= GUARDED_TRIES {
                when.extend([unchanged(&prefix), unchanged(leases)]);
            }
            let txn = Txn::new()
                .when(when)
                .and_then([TxnOp::put(config, self.permits.to_string(), None)])
                .or_else([
                    TxnOp::get(config, None),
                    one_under(&readers),
                    one_under(&writers),
                ]);
            // Safe to send twice: a second run finds our own value.
            let what = format!("store the size of {}", self.name);
            let resp = retrying_txn(etcd, &what, timeout, &txn).await?;
            if resp.succeeded() {
                log::debug!("[{}] {config} = {} (created)", self.name, self.permits);
                return Ok(());
            }
            if !read_at(&resp, 0)?.kvs().is_empty() {
                return self.stored_and_alone(&resp, 0, &prefix);
            }
            no_read_write_key(&resp, 1, &prefix)?;
            backoff.pause().await;
        }
    }
}

impl SemaphoreKeys {
    /// Admit one permit: core's semaphore over the internal mutex on the
    /// client's own session and the permit keys.
    pub(crate) fn admit(
        &self,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Option<EtcdLock>>> + Send + 'static {
        let this = self.clone();
        async move {
            let lock = Layout::Key {
                name: &this.lock_name,
                via: Via::ClientSession,
                claim: Claim::Lock,
            };
            let admission = Admission {
                lock: KeyContender {
                    client: &this.client,
                    prefix: &this.lock_prefix,
                    layout: lock,
                },
                permits: KeyContender {
                    client: &this.client,
                    prefix: &this.lease_prefix,
                    layout: Layout::Permits(&this),
                },
                // No round trip: the size was checked when the handle was
                // made, and every permit's create transaction checks it
                // again (and stores it again if it was deleted).
                size: (),
            };
            let won = engine::admit(&admission, deadline).await?;
            Ok(won.map(|a| EtcdKey::held(this.client.clone(), a, "permit")))
        }
    }
}

/// A win of the internal mutex `<name>/locks` (on the client's own
/// session) is given back by deleting its key: awaited, so that a
/// `try_acquire` right after finds the mutex free.
impl Unlock for Acquired {
    fn unlock(self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.delete()
    }
}

/// The semaphore `prefix` refused when either of the two reads at `at`
/// and `at + 1` of `resp` (a read-write lock's readers' and writers'
/// keys) found a key.
fn no_read_write_key(resp: &TxnResponse, at: usize, prefix: &str) -> Result<()> {
    for at in [at, at + 1] {
        if let Some(kv) = read_at(resp, at)?.kvs().first() {
            let theirs = "a read-write lock";
            return Err(other_layout(prefix, "a semaphore", theirs, kv.key()));
        }
    }
    Ok(())
}
