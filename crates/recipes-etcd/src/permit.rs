//! A semaphore's permit keys: the permit layout of the contend driver
//! (`contend.rs`); the first N in create order hold.
//!
//! - **enter**: one transaction — if our key does not exist and the size
//!   key still holds our N, put the key and read every permit key — joined
//!   with a synced watch on our own key (the held permit's loss watch).
//! - **list**: one read of every permit key; ours counts only with its own
//!   `create_revision`.
//! - **wait**: a synced watch for any deletion under the permit prefix (we
//!   are the one waiter the internal mutex lets in), then read again.
//! - **confirm**: the admitting read's revision; permits have no fence.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};
use recipes_core::engine::Listing;
use recipes_core::Result;

use crate::contend::KeyEntry;
use crate::names::{is_contender, Key};
use crate::rpc::{header_revision, read_at, retrying_get, retrying_txn, unexpected};
use crate::semaphore::EtcdSemaphore;
use crate::session::Session;
use crate::watch::PrefixWatch;

impl EtcdSemaphore {
    /// Every permit key, oldest first.
    fn all_permits(&self) -> (&str, GetOptions) {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_keys_only();
        (&self.lease_prefix, options)
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
        let contenders = read
            .kvs()
            .iter()
            .filter(|kv| is_contender(&self.lease_prefix, kv.key()))
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
    pub(crate) async fn create_permit(
        &self,
        session: &Session,
        key: &str,
    ) -> Result<(i64, Option<Listing<Key>>)> {
        let etcd = session.store()?;
        let config = self.config_key.as_str();
        let (prefix, all) = self.all_permits();
        let lease = PutOptions::new().with_lease(session.id());
        let txn = Txn::new()
            .when([
                Compare::create_revision(key, CompareOp::Equal, 0),
                Compare::value(config, CompareOp::Equal, self.permits.to_string()),
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
        let what = format!("create a permit key of {}", self.name);
        loop {
            // Safe to send twice: a second run finds our key and reads it.
            let resp = retrying_txn(&etcd, &what, session.rpc_timeout(), &txn).await?;
            let header = header_revision(&resp)?;
            if resp.succeeded() {
                let listing = self.listing(&read_at(&resp, 1)?, key, header, header);
                return Ok((header, Some(listing)));
            }
            // An earlier sending put our key: go on with it.
            if let Some(kv) = read_at(&resp, 0)?.kvs().first() {
                let rev = kv.create_revision();
                let listing = self.listing(&read_at(&resp, 2)?, key, rev, header);
                return Ok((rev, Some(listing)));
            }
            match read_at(&resp, 1)?.kvs().first() {
                Some(kv) => self.check_stored(kv.value())?,
                // Deleted by hand since: store it again and retry.
                None => self.ensure_size(&etcd, session.rpc_timeout()).await?,
            }
        }
    }

    /// One read of every permit key.
    pub(crate) async fn list_permits(
        &self,
        entry: &KeyEntry,
        timeout: Duration,
    ) -> Result<Listing<Key>> {
        let (prefix, all) = self.all_permits();
        let read = retrying_get(&entry.etcd, timeout, prefix, Some(all)).await?;
        let revision = read
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| unexpected("a read without a header"))?;
        Ok(self.listing(&read, &entry.key, entry.create_revision, revision))
    }

    /// Set a synced watch for deletions under the permit prefix (the engine
    /// then reads again), or wait for one.
    pub(crate) async fn wait_for_permit(
        &self,
        session: &Session,
        entry: &mut KeyEntry,
    ) -> Result<()> {
        match entry.waiting.as_mut() {
            // Confirmed before the read that found us waiting: no deletion
            // after that read can be missed.
            Some(w) => w.deleted().await,
            None => {
                log::debug!("[{}] {} waits for a permit", session.label(), entry.key);
                let prefix = &self.lease_prefix;
                let watch = PrefixWatch::open(&entry.etcd, prefix, true, session.rpc_timeout());
                entry.waiting = Some(watch.await?);
                Ok(())
            }
        }
    }
}
