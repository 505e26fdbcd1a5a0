//! The queue of a lock, election or permit prefix as the engine reads it:
//! the contenders' keys in create order (one linearizable read, keys
//! only), ending at ours. Keys below the prefix that are no contenders —
//! a nested lock's, a semaphore's `config` — are read and skipped.

use std::time::Duration;

use etcd_client::{GetOptions, KeyValue, SortOrder, SortTarget};
use recipes_core::store::engine::Listing;
use recipes_core::Result;

use crate::names::{is_contender, Key};
use crate::rpc::{retrying_get, unexpected};

/// Every key under a prefix, oldest first, keys only.
pub(crate) fn oldest_first() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_keys_only()
}

/// The contenders under `prefix` among `kvs` (oldest first) up to ours,
/// `key`, which counts only with its own `create_revision`; without ours
/// when it is gone (the engine then starts over).
pub(crate) fn listing(
    kvs: &[KeyValue],
    prefix: &str,
    key: &str,
    create_revision: i64,
    revision: i64,
) -> Listing<Key> {
    let mut contenders = Vec::new();
    for kv in kvs.iter().filter(|kv| is_contender(prefix, kv.key())) {
        let ours = kv.key() == key.as_bytes();
        if ours && kv.create_revision() != create_revision {
            continue;
        }
        contenders.push(Key(kv.key().to_vec()));
        if ours {
            break;
        }
    }
    Listing {
        contenders,
        revision,
    }
}

/// One read of the contenders under `prefix` created up to ours.
pub(crate) async fn list(
    etcd: &etcd_client::Client,
    timeout: Duration,
    prefix: &str,
    key: &str,
    create_revision: i64,
) -> Result<Listing<Key>> {
    let upto = oldest_first().with_max_create_revision(create_revision);
    let read = retrying_get(etcd, timeout, prefix, Some(upto)).await?;
    let revision = read
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| unexpected("a read without a header"))?;
    Ok(listing(read.kvs(), prefix, key, create_revision, revision))
}
