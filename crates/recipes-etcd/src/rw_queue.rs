//! A read-write lock's queue in the layout of etcd's Go
//! `client/v3/experimental/recipes` `RWMutex`, so that Go's processes and
//! ours exclude each other:
//!
//! - a reader owns `<name>/read/<unique>`, a writer `<name>/write/<unique>`,
//!   on the session's lease, value empty, created once and never written
//!   again (Go orders by mod revision, we by create revision: the same
//!   order for keys nobody rewrites);
//! - a Go reader waits on the newest `<name>/write…` key older than its
//!   own, a Go writer on the newest key of any kind under `<name>/`; ours
//!   follow core's [`Rule::ReadWrite`](recipes_core::store::engine::Rule) over
//!   every key under `<name>/` in create order: `read/` keys are readers,
//!   every other key a writer (as a Go writer sees it);
//! - a **downgrade** leaves the write key alone (a Go writer queued behind
//!   waits on it) and puts a *marker*, a read key on the same lease whose
//!   value is the write key's name; our contenders count a write key so
//!   named as a reader at the write key's place, so our readers behind it
//!   enter while every writer behind it still waits. A Go reader sees a
//!   write key and waits: conservative, never unsafe. The read guard's
//!   release deletes both keys in one transaction; the lease's end takes
//!   both.
//!
//! A reader that waits on a writer also watches the readers' puts from the
//! revision of its read: the marker naming that writer wakes it (the
//! client's shared watch hears only deletions).

use std::collections::HashSet;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};
use recipes_core::store::engine::{Listing, Role};
use recipes_core::{Contender, Result};

use crate::key::delete_key;
use crate::names::{is_contender, other_layout, read_prefix, size_key, write_prefix, Key};
use crate::rpc::{header_revision, nested_at, read_in, retrying_get, retrying_txn, unexpected};
use crate::session::{lease_gone, Session};
use crate::watch::Watch;

/// One acquisition's view of a read-write lock's queue.
pub(crate) struct RwQueue {
    /// A writer's acquisition (else a reader's).
    pub(crate) write: bool,
    /// The write keys a downgrade's marker names in the last listing: they
    /// count as readers.
    downgraded: parking_lot::Mutex<HashSet<Vec<u8>>>,
}

/// Every key under a prefix with its value, oldest first.
pub(crate) fn everything() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
}

/// The write key that `kv` marks as downgraded, if `kv` is a marker.
fn marked<'a>(prefix: &str, kv: &'a KeyValue) -> Option<&'a [u8]> {
    let marker = kv.key().starts_with(read_prefix(prefix).as_bytes())
        && kv.value().starts_with(write_prefix(prefix).as_bytes());
    marker.then(|| kv.value())
}

/// Whether `key`, under `prefix`, holds a reader's place.
fn reads(prefix: &str, key: &[u8], downgraded: &HashSet<Vec<u8>>) -> bool {
    key.starts_with(read_prefix(prefix).as_bytes()) || downgraded.contains(key)
}

/// A compare that holds while no key lies under `prefix`.
pub(crate) fn none_under(prefix: &str) -> Compare {
    Compare::create_revision(prefix, CompareOp::Equal, 0).with_prefix()
}

/// The first key after every key that starts with `prefix` (etcd's
/// prefix range end).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The two ranges of keys under `prefix` that are no reader's: before
/// and after `<prefix>read/…` — every write key of ours or Go's (a
/// downgraded one included), every key that Go's reader or writer counts
/// as a writer (`<prefix>writeX`, any other key under the name), every
/// other recipe's.
fn outside_readers(prefix: &str) -> [(Vec<u8>, Vec<u8>); 2] {
    let readers = read_prefix(prefix);
    [
        (prefix.into(), readers.clone().into_bytes()),
        (prefix_end(&readers), prefix_end(prefix)),
    ]
}

/// Compares that hold while every key under `prefix` is a reader's: both
/// ranges of [`outside_readers`] are empty. In the common case each
/// costs the server a lookup, not a read.
fn only_readers(prefix: &str) -> [Compare; 2] {
    outside_readers(prefix)
        .map(|(from, to)| Compare::create_revision(from, CompareOp::Equal, 0).with_range(to))
}

/// Read one key under `prefix` (keys only), to name it in a refusal.
pub(crate) fn one_under(prefix: &str) -> TxnOp {
    let one = GetOptions::new()
        .with_prefix()
        .with_keys_only()
        .with_limit(1);
    TxnOp::get(prefix, Some(one))
}

impl RwQueue {
    pub(crate) fn new(write: bool) -> RwQueue {
        RwQueue {
            write,
            downgraded: parking_lot::Mutex::default(),
        }
    }

    /// The role of `key` (a key under `prefix`) in the last listing.
    pub(crate) fn role(&self, prefix: &str, key: &Key) -> Role {
        match reads(prefix, &key.0, &self.downgraded.lock()) {
            true => Role::Reader,
            false => Role::Writer,
        }
    }

    /// Every key under `prefix` up to ours (`key` with its own
    /// `create_revision`), oldest first, read at `revision`; remembers the
    /// write keys marked as downgraded anywhere in `kvs`.
    fn listing(
        &self,
        kvs: &[KeyValue],
        (prefix, key, create_revision): (&str, &str, i64),
        revision: i64,
    ) -> Listing<Key> {
        let mut downgraded = HashSet::new();
        let mut contenders = Vec::new();
        let mut done = false;
        for kv in kvs {
            if let Some(writer) = marked(prefix, kv) {
                downgraded.insert(writer.to_vec());
            }
            let ours = kv.key() == key.as_bytes();
            if done || (ours && kv.create_revision() != create_revision) {
                continue;
            }
            contenders.push(Key(kv.key().to_vec()));
            done = ours;
        }
        *self.downgraded.lock() = downgraded;
        Listing {
            contenders,
            revision,
        }
    }

    /// Create our key `key` and read the queue in one transaction. A
    /// semaphore's size key, or a lock's or an election's key one level
    /// below `prefix`, is [`Error::InvalidArgument`](recipes_core::Error)
    /// with nothing left behind.
    ///
    /// A reader first tries the common case in the same transaction: no
    /// key under `prefix` but readers' ([`only_readers`]). Its put then
    /// holds at once — every other key is a reader's, and every writer
    /// that comes later queues behind it — and the listing is ours alone,
    /// with nothing read. Otherwise the queue is read whole, as a
    /// writer's is, to find the writer ahead (and tell a downgraded one
    /// by its marker) or another recipe's key.
    pub(crate) async fn create(
        &self,
        session: &Session,
        prefix: &str,
        key: &str,
    ) -> Result<(i64, Listing<Key>)> {
        let (etcd, timeout) = (session.store_ref()?, session.rpc_timeout());
        let size = size_key(prefix);
        let lease = PutOptions::new().with_lease(session.id());
        let absent = Compare::create_revision(key, CompareOp::Equal, 0);
        let queue = Txn::new()
            .when([
                absent.clone(),
                Compare::create_revision(size.as_str(), CompareOp::Equal, 0),
            ])
            .and_then([
                TxnOp::put(key, "", Some(lease.clone())),
                TxnOp::get(prefix, Some(everything())),
            ])
            .or_else([
                TxnOp::get(key, None),
                TxnOp::get(prefix, Some(everything())),
                TxnOp::get(size.as_str(), Some(GetOptions::new().with_keys_only())),
            ]);
        let txn = match self.write {
            true => queue,
            false => {
                let [before, after] = only_readers(prefix);
                Txn::new()
                    .when([absent, before, after])
                    .and_then([TxnOp::put(key, "", Some(lease))])
                    .or_else([TxnOp::txn(queue)])
            }
        };
        // Safe to send twice: a second run finds our key and reads it.
        let resp = retrying_txn(etcd, &format!("enter {prefix}"), timeout, &txn)
            .await
            .map_err(|e| lease_gone(session, e))?;
        let header = header_revision(&resp)?;
        if !self.write && resp.succeeded() {
            self.downgraded.lock().clear();
            let ours = Listing {
                contenders: vec![Key(key.as_bytes().to_vec())],
                revision: header,
            };
            return Ok((header, ours));
        }
        let resp = match self.write {
            true => resp,
            false => nested_at(&resp, 0)?,
        };
        let ops = resp.op_responses();
        let rev = match resp.succeeded() {
            true => header,
            false => {
                if let Some(kv) = read_in(&ops, 2)?.kvs().first() {
                    let theirs = "a semaphore";
                    return Err(other_layout(prefix, "a read-write lock", theirs, kv.key()));
                }
                let ours = read_in(&ops, 0)?
                    .kvs()
                    .first()
                    .map(KeyValue::create_revision);
                ours.ok_or_else(|| unexpected("our new key vanished inside a transaction"))?
            }
        };
        let kvs = read_in(&ops, 1)?.kvs();
        if let Some(kv) = kvs.iter().find(|kv| is_contender(prefix, kv.key())) {
            delete_key(session, key, Some(rev)).await?;
            let theirs = "a lock or election";
            return Err(other_layout(prefix, "a read-write lock", theirs, kv.key()));
        }
        Ok((rev, self.listing(kvs, (prefix, key, rev), header)))
    }

    /// One read of the queue under `prefix`, up to ours.
    pub(crate) async fn list(
        &self,
        etcd: &etcd_client::Client,
        timeout: Duration,
        (prefix, key, create_revision): (&str, &str, i64),
    ) -> Result<Listing<Key>> {
        let read = retrying_get(etcd, timeout, prefix, Some(everything())).await?;
        let revision = read
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| unexpected("a read without a header"))?;
        let ours = (prefix, key, create_revision);
        Ok(self.listing(read.kvs(), ours, revision))
    }
}

/// Resolves when a marker naming `writer` is put under `prefix`'s readers
/// after revision `rev`; never, when the watch cannot be had (the wait for
/// the writer's deletion then lets the reader in, later).
pub(crate) async fn downgrade_of(
    etcd: &etcd_client::Client,
    prefix: &str,
    writer: &[u8],
    rev: i64,
    timeout: Duration,
) {
    let readers = read_prefix(prefix);
    let mut watch = match Watch::puts_after(etcd, &readers, rev, timeout).await {
        Ok(watch) => watch,
        Err(e) => {
            log::debug!("[{prefix}] no watch for a downgrade: {e}");
            return std::future::pending().await;
        }
    };
    loop {
        match watch.next().await {
            Ok(reply) => {
                let events = reply.events().iter();
                if events
                    .filter_map(|ev| ev.kv())
                    .any(|kv| kv.value() == writer)
                {
                    return;
                }
            }
            Err(e) => {
                log::debug!("[{prefix}] the watch for a downgrade broke: {e}");
                return std::future::pending().await;
            }
        }
    }
}

/// The read-write lock's contenders among `kvs` (every key under `prefix`,
/// oldest first), in queue order with their roles; `None` when no key of
/// a read-write lock is there. A marker is no contender of its own: the
/// write key it names is listed as a reader.
pub(crate) fn rw_contenders(kvs: &[KeyValue], prefix: &str) -> Option<Vec<Contender>> {
    let (read, write) = (read_prefix(prefix), write_prefix(prefix));
    let ours = |kv: &&KeyValue| {
        kv.key().starts_with(read.as_bytes()) || kv.key().starts_with(write.as_bytes())
    };
    if !kvs.iter().any(|kv| ours(&kv)) {
        return None;
    }
    let downgraded: HashSet<Vec<u8>> = kvs
        .iter()
        .filter_map(|kv| marked(prefix, kv))
        .map(<[u8]>::to_vec)
        .collect();
    let listed = kvs
        .iter()
        .filter(ours)
        .filter(|kv| marked(prefix, kv).is_none());
    Some(
        listed
            .map(|kv| Contender {
                holder: String::from_utf8_lossy(kv.key()).into_owned(),
                created: kv.create_revision(),
                value: kv.value().to_vec(),
                role: Some(match reads(prefix, kv.key(), &downgraded) {
                    true => Role::Reader,
                    false => Role::Writer,
                }),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ranges_outside_the_readers_hold_every_other_key_under_the_name() {
        let prefix = "/rw/x/";
        let ranges = outside_readers(prefix);
        let outside = |key: &str| {
            let key = key.as_bytes();
            ranges
                .iter()
                .any(|(from, to)| key >= from.as_slice() && key < to.as_slice())
        };
        for key in [
            "/rw/x/",
            "/rw/x/a",
            "/rw/x/read",
            "/rw/x/read0",
            "/rw/x/readx",
            "/rw/x/write",
            "/rw/x/write/1",
            "/rw/x/write0",
            "/rw/x/config",
            "/rw/x/zzz",
            "/rw/x/\u{ff}",
        ] {
            assert!(outside(key), "{key}");
        }
        for key in [
            "/rw/x/read/",
            "/rw/x/read/1-2",
            "/rw/x/read/~",
            "/rw/x0",
            "/rw/x",
            "/rw/",
        ] {
            assert!(!outside(key), "{key}");
        }
        assert_eq!(prefix_end("/a/"), b"/a0");
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80");
    }
}
