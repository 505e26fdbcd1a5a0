//! A semaphore's permit keys: the permit layout of the contend driver
//! (`contend.rs`); the first N in create order hold.
//!
//! - **enter**: one transaction — if our key does not exist and the size
//!   key still holds our N, put the key and read every permit key — after
//!   an interest in the prefix's deletions on the client's watch stream
//!   (`hub`: the held permit's loss watch too).
//! - **list**: one read of the permit keys up to ours (`listing.rs`).
//! - **wait**: for any deletion under the permit prefix after the read
//!   (`contend.rs`), then read again.
//! - **confirm**: the admitting read's revision; permits have no fence.

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use recipes_core::store::engine::Listing;
use recipes_core::{Error, Result};
use tokio::time::Instant;

use crate::listing::{listing, oldest_first};
use crate::names::Key;
use crate::rpc::{header_revision, read_at, retrying_txn};
use crate::semaphore::SemaphoreKeys;
use crate::session::{lease_gone, Session};

impl SemaphoreKeys {
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
        let (prefix, all) = (self.lease_prefix.as_str(), oldest_first());
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
        // A turn that neither created nor found our key, nor failed, found
        // the size key deleted and stored it again: only someone deleting
        // it again and again makes turn after turn. Bounded all the same:
        // past the RPC timeout a retryable `Timeout`, and the engine starts
        // over with its backoff until the call's deadline.
        let timeout = session.rpc_timeout();
        let until = Instant::now() + timeout;
        loop {
            // Safe to send twice: a second run finds our key and reads it.
            let resp = retrying_txn(&etcd, &what, timeout, &txn)
                .await
                .map_err(|e| lease_gone(session, e))?;
            let header = header_revision(&resp)?;
            if resp.succeeded() {
                let queue = listing(read_at(&resp, 1)?.kvs(), prefix, key, header, header);
                return Ok((header, Some(queue)));
            }
            // An earlier sending put our key: go on with it.
            if let Some(kv) = read_at(&resp, 0)?.kvs().first() {
                let rev = kv.create_revision();
                let queue = listing(read_at(&resp, 2)?.kvs(), prefix, key, rev, header);
                return Ok((rev, Some(queue)));
            }
            match read_at(&resp, 1)?.kvs().first() {
                Some(kv) => self.check_stored(kv.value())?,
                // Deleted by hand since: store it again and retry.
                None => self.ensure_size(&etcd, timeout).await?,
            }
            if Instant::now() >= until {
                return Err(Error::Timeout {
                    what: format!("{what}: {config} was deleted again after each try to store it"),
                    after: timeout,
                });
            }
        }
    }
}
