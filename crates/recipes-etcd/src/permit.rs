//! A semaphore's permit keys `<name>/leases/<lease hex>-<n>`: the contend
//! driver that creates one and waits among them (the first N in create
//! order hold). A held one is an [`EtcdLock`](crate::EtcdLock).
//!
//! - **enter**: one transaction — if our key does not exist and
//!   `<name>/config` still holds our N, put the key with our lease and read
//!   every permit key in create order — joined with a synced watch on our
//!   own key, which becomes the held permit's loss watch.
//! - **list**: one read of every permit key in create order; our key
//!   counts only with its own `create_revision`.
//! - **wait**: a synced watch on the whole permit prefix for any deletion
//!   (any permit's release can admit us; we are the one waiter the
//!   internal mutex lets in), then the engine reads again.
//! - **confirm**: the admitting read's revision; permits have no fence.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnResponse,
};
use recipes_core::engine::{ContendDriver, Entered, Listing};
use recipes_core::{LossSignal, Result};
use tokio::time::Instant;

use crate::key::{Acquired, Ticket};
use crate::names::{is_contender, Key};
use crate::rpc::{header_revision, read_at, retrying, retrying_txn, unexpected};
use crate::semaphore::EtcdSemaphore;
use crate::session::Session;
use crate::watch::{PrefixWatch, WatchSet};

/// Tells apart the permit keys of one lease. A lease belongs to one client
/// in one process, so a process-wide counter makes `<lease>-<n>` unique.
static PERMIT_SEQ: AtomicU64 = AtomicU64::new(0);

/// One acquisition's driver of the permit keys.
pub(crate) struct PermitContender<'a> {
    pub(crate) semaphore: &'a EtcdSemaphore,
}

/// Our permit key while it waits.
pub(crate) struct PermitEntry {
    etcd: etcd_client::Client,
    key: String,
    id: Key,
    create_revision: i64,
    /// On our own key, since the create.
    own: Option<WatchSet>,
    /// On the permit prefix, once we had to wait.
    waiting: Option<PrefixWatch>,
}

impl PermitContender<'_> {
    /// Every permit key, oldest first.
    fn all_permits(&self) -> (&str, GetOptions) {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_keys_only();
        (&self.semaphore.lease_prefix, options)
    }

    /// The permit keys of `read` in create order; ours only with its own
    /// `create_revision`.
    fn listing(
        &self,
        read: &GetResponse,
        key: &str,
        create_revision: i64,
        revision: i64,
    ) -> Listing<Key> {
        let prefix = &self.semaphore.lease_prefix;
        let contenders = read
            .kvs()
            .iter()
            .filter(|kv| is_contender(prefix, kv.key()))
            .filter(|kv| kv.key() != key.as_bytes() || kv.create_revision() == create_revision)
            .map(|kv| Key(kv.key().to_vec()))
            .collect();
        Listing {
            contenders,
            revision,
        }
    }

    /// Create our permit key if the stored size is ours, and list the
    /// permits in the same transaction; stores the size first if its key
    /// is missing. Returns our key's `create_revision` and the listing.
    async fn create(
        &self,
        etcd: &etcd_client::Client,
        session: &Session,
        key: &str,
    ) -> Result<(i64, Listing<Key>)> {
        let sem = self.semaphore;
        let config = sem.config_key.as_str();
        let (prefix, all) = self.all_permits();
        let lease = PutOptions::new().with_lease(session.lease());
        let txn = Txn::new()
            .when([
                Compare::create_revision(key, CompareOp::Equal, 0),
                Compare::value(config, CompareOp::Equal, sem.permits.to_string()),
            ])
            .and_then([
                TxnOp::put(key, Vec::new(), Some(lease)),
                TxnOp::get(prefix, Some(all.clone())),
            ])
            .or_else([
                TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
                TxnOp::get(config, None),
                TxnOp::get(prefix, Some(all)),
            ]);
        let what = format!("create a permit key of {}", sem.name);
        loop {
            // Safe to send twice: a second run finds our key and reads it.
            let resp: TxnResponse = retrying_txn(etcd, &what, session.rpc_timeout(), &txn).await?;
            let header = header_revision(&resp)?;
            if resp.succeeded() {
                let listing = self.listing(&read_at(&resp, 1)?, key, header, header);
                return Ok((header, listing));
            }
            // An earlier sending put our key: go on with it.
            if let Some(kv) = read_at(&resp, 0)?.kvs().first() {
                let rev = kv.create_revision();
                return Ok((rev, self.listing(&read_at(&resp, 2)?, key, rev, header)));
            }
            match read_at(&resp, 1)?.kvs().first() {
                Some(kv) => sem.check_stored(kv.value())?,
                // Deleted by hand since: store it again and retry.
                None => sem.ensure_size(session).await?,
            }
        }
    }
}

impl ContendDriver for PermitContender<'_> {
    type Epoch = Arc<Session>;
    type Ticket = Ticket;
    type Entry = PermitEntry;
    type Id = Key;
    type Won = Acquired;

    fn max_leases(&self) -> usize {
        self.semaphore.permits as usize
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        if !self.semaphore.client.runtime().spawn(task) {
            log::debug!(
                "[{}] client closed: the lease removes the key",
                self.semaphore.name
            );
        }
    }

    fn rpc_timeout(&self) -> Duration {
        self.semaphore.client.rpc_timeout()
    }

    async fn epoch(&self, _deadline: Option<Instant>) -> Result<Option<Arc<Session>>> {
        // Every permit key is distinct: no turn at a name to wait for.
        self.semaphore.client.live_session().await.map(Some)
    }

    fn epoch_signal(&self, session: &Arc<Session>) -> LossSignal {
        session.epoch().signal()
    }

    fn ticket(&self, session: &Arc<Session>) -> Ticket {
        let seq = PERMIT_SEQ.fetch_add(1, Ordering::Relaxed);
        let prefix = &self.semaphore.lease_prefix;
        Ticket {
            session: session.clone(),
            key: format!("{prefix}{:x}-{seq}", session.lease()),
            create_revision: None,
            turn: None,
        }
    }

    async fn enter(&self, session: &Arc<Session>, ticket: &mut Ticket) -> Result<Entered<Self>> {
        let (etcd, timeout) = (session.etcd()?, session.rpc_timeout());
        let key = ticket.key.clone();
        let (created, own) = tokio::join!(
            self.create(&etcd, session, &key),
            WatchSet::open(&etcd, &key, timeout),
        );
        let (create_revision, listing) = created?;
        ticket.create_revision = Some(create_revision);
        log::debug!(
            "[{}] {key} created at revision {create_revision}; {} permit key(s) of {}",
            session.label(),
            listing.contenders.len(),
            self.semaphore.permits
        );
        let own = own
            .map_err(|e| log::debug!("[{}] watch on {key} failed: {e}", session.label()))
            .ok();
        let entry = PermitEntry {
            etcd,
            id: Key(key.clone().into_bytes()),
            key,
            create_revision,
            own,
            waiting: None,
        };
        Ok((entry, Some(listing)))
    }

    fn ours<'e>(&self, entry: &'e PermitEntry) -> &'e Key {
        &entry.id
    }

    async fn list(&self, session: &Arc<Session>, entry: &mut PermitEntry) -> Result<Listing<Key>> {
        let what = format!("list the permits of {}", self.semaphore.name);
        let (prefix, all) = self.all_permits();
        let read = retrying(&what, session.rpc_timeout(), || {
            let (mut etcd, all) = (entry.etcd.clone(), all.clone());
            async move { etcd.get(prefix, Some(all)).await }
        })
        .await?;
        let revision = read
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| unexpected("a read without a header"))?;
        Ok(self.listing(&read, &entry.key, entry.create_revision, revision))
    }

    async fn wait(&self, session: &Arc<Session>, entry: &mut PermitEntry, _: &Key) -> Result<()> {
        let waited = match entry.waiting.as_mut() {
            // Confirmed before the read that found us waiting: no deletion
            // after that read can be missed.
            Some(w) => w.deleted().await,
            None => {
                log::debug!("[{}] {} waits for a permit", session.label(), entry.key);
                let prefix = &self.semaphore.lease_prefix;
                PrefixWatch::open(&entry.etcd, prefix, true, session.rpc_timeout())
                    .await
                    .map(|w| entry.waiting = Some(w))
            }
        };
        if waited.is_err() {
            entry.waiting = None;
        }
        waited
    }

    async fn confirm(
        &self,
        _: &Arc<Session>,
        _: &mut PermitEntry,
        listing: &Listing<Key>,
    ) -> Result<Option<i64>> {
        Ok(Some(listing.revision))
    }

    fn remove(ticket: Ticket) -> impl std::future::Future<Output = ()> + Send + 'static {
        ticket.remove()
    }

    fn won(&self, _: Arc<Session>, ticket: Ticket, entry: PermitEntry, admitted: i64) -> Acquired {
        log::debug!(
            "[{}] {} admitted at revision {admitted}",
            ticket.session.label(),
            ticket.key
        );
        Acquired::new(ticket, entry.create_revision, admitted, entry.own)
    }
}
