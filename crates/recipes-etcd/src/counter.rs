//! The shared counter: the key `<name>` holds the value as decimal text
//! (readable with `etcdctl get`); its version is the key's `version` (the
//! number of puts since it was created, 0 while absent), so a write is a
//! transaction comparing it. A name whose `<name>/` prefix holds another
//! recipe's keys at their depth (a lock's, an election's, a semaphore's,
//! a read-write lock's, a double barrier's, a group's member:
//! [`clashes`]) is refused; keys of names nested below (`<name>/x`, a
//! counter; `<name>/x/<lease hex>`, a lock) are not. A write compares the
//! key's version and that no key under the prefix was created since the
//! read it checked them in (a newer key, not another recipe's, costs a
//! read and a try again, never a conflict).
//! A wait reads the key, then watches it from the revision of that read
//! (etcd's history: no write after the read goes unheard).

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use parking_lot::Mutex;
use recipes_core::store::{CounterBackend, SetIf};
use recipes_core::{CounterKind, Error, Result, Versioned};

use crate::barrier::{Changes, Epoch, EtcdWaits};
use crate::client::EtcdClient;
use crate::group::layout;
use crate::names::{key_prefix, other_layout, validate_name};
use crate::rpc::{from_etcd, header_revision, read_at, retrying_txn};
use crate::watch::Watch;

/// A counter backend on etcd; see the module.
#[derive(Debug, Clone)]
pub struct EtcdCounter {
    client: EtcdClient,
    name: String,
    kind: CounterKind,
    waits: EtcdWaits,
    /// The version and the revision of this object's last read that found
    /// no other recipe's keys under the name: a write at that version
    /// guards against keys created since that revision, with no read of
    /// its own.
    checked: Arc<Mutex<Option<(u64, i64)>>>,
}

impl EtcdCounter {
    pub(crate) fn new(client: &EtcdClient, name: &str, kind: CounterKind) -> Result<EtcdCounter> {
        validate_name("counter", name)?;
        Ok(EtcdCounter {
            waits: EtcdWaits {
                client: client.clone(),
                name: name.to_owned(),
                count: 0,
            },
            client: client.clone(),
            name: name.to_owned(),
            kind,
            checked: Arc::default(),
        })
    }

    /// Refuse the name when the reads at 0 (the key) and 1 (the keys
    /// under the prefix) of `resp` show another recipe; else the value
    /// read.
    fn decode(&self, resp: &etcd_client::TxnResponse) -> Result<Versioned> {
        let prefix = key_prefix(&self.name);
        let under = read_at(resp, 1)?;
        if let Some(kv) = under.kvs().iter().find(|kv| clashes(&prefix, kv)) {
            return Err(other_layout(
                &prefix,
                "a counter",
                "another recipe's keys",
                kv.key(),
            ));
        }
        let read = read_at(resp, 0)?;
        let Some(kv) = read.kvs().first() else {
            return Ok(Versioned {
                value: 0,
                version: 0,
            });
        };
        let text = String::from_utf8_lossy(kv.value());
        let value = text
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|v| self.kind.fits(*v))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "the etcd key {} holds {text:?}, not a {} counter: open it with the recipe \
                     that wrote it, or choose another name",
                    recipes_core::store::quote(&self.name),
                    self.kind.describe()
                ))
            })?;
        Ok(Versioned {
            value,
            version: u64::try_from(kv.version()).unwrap_or(0),
        })
    }

    /// [`decode`](Self::decode), and the revision read at, kept as
    /// [`checked`](Self::checked).
    fn decode_checked(&self, resp: &etcd_client::TxnResponse) -> Result<(Versioned, i64)> {
        let (now, rev) = (self.decode(resp)?, header_revision(resp)?);
        *self.checked.lock() = Some((now.version, rev));
        Ok((now, rev))
    }

    /// The value, and the revision it was read at.
    async fn read(
        &self,
        etcd: &etcd_client::Client,
        timeout: std::time::Duration,
    ) -> Result<(Versioned, i64)> {
        let txn = Txn::new().and_then(self.reads());
        let what = format!("read the counter {}", self.name);
        let resp = retrying_txn(etcd, &what, timeout, &txn).await?;
        self.decode_checked(&resp)
    }

    fn reads(&self) -> [TxnOp; 2] {
        let keys = GetOptions::new().with_prefix();
        [
            TxnOp::get(self.name.as_str(), None),
            TxnOp::get(key_prefix(&self.name), Some(keys)),
        ]
    }

    /// `ops` when the key is still at `version` and no other recipe's keys
    /// exist; else the counter as the same transaction read it.
    fn guarded(&self, what: &'static str, version: u64, ops: Vec<TxnOp>) -> Result<SetIf> {
        let me = self.clone();
        let want = i64::try_from(version).unwrap_or(i64::MAX);
        self.client
            .read_with(what, move |etcd, timeout| async move {
                let name = me.name.as_str();
                let prefix = key_prefix(name);
                // The layout as of `checked`: refused, or clear of others
                // (the last read's, when it saw this version: no read).
                let last = *me.checked.lock();
                let (mut now, mut checked) = match last {
                    Some((seen, rev)) if seen == version => (None, rev),
                    _ => {
                        let (now, rev) = me.read(&etcd, timeout).await?;
                        (Some(now), rev)
                    }
                };
                loop {
                    if let Some(now) = now.filter(|n| n.version != version) {
                        return Ok(SetIf::Conflict(Some(now)));
                    }
                    let since = checked.saturating_add(1);
                    let txn = Txn::new()
                        .when([
                            Compare::version(name, CompareOp::Equal, want),
                            Compare::create_revision(prefix.as_str(), CompareOp::Less, since)
                                .with_prefix(),
                        ])
                        .and_then(ops.clone())
                        .or_else(me.reads());
                    // Sent once: a resent put would find its own version and
                    // say "conflict" although it landed, and add would add
                    // twice.
                    let resp = etcd
                        .clone()
                        .txn(txn)
                        .await
                        .map_err(|e| from_etcd(&format!("{what} {name}"), e))?;
                    if resp.succeeded() {
                        return Ok(SetIf::Set);
                    }
                    // A key created under the name since: refused if another
                    // recipe's, else tried again on this read.
                    let (read, rev) = me.decode_checked(&resp)?;
                    (now, checked) = (Some(read), rev);
                }
            })
    }
}

/// Whether `kv`, under the counter's `prefix`, is another recipe's on the
/// name: a contender, queue entry or semaphore key at its depth
/// ([`layout`]), a semaphore's size `config`, a double barrier's flag
/// `ready`, or a key one level below on a lease (a group's member).
fn clashes(prefix: &str, kv: &etcd_client::KeyValue) -> bool {
    let Some(rest) = kv.key().strip_prefix(prefix.as_bytes()) else {
        return false;
    };
    let level = !rest.contains(&b'/');
    let marks = matches!(rest, b"config" | b"ready");
    layout(rest, kv.lease()).is_some() || (level && (kv.lease() != 0 || marks))
}

impl CounterBackend for EtcdCounter {
    type Waits = EtcdWaits;

    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> CounterKind {
        self.kind
    }

    fn get(&self) -> Result<Versioned> {
        let me = self.clone();
        self.client
            .read_with("read the counter", move |etcd, timeout| async move {
                me.read(&etcd, timeout).await.map(|(now, _)| now)
            })
    }

    fn set_if(&self, version: u64, value: i64) -> Result<bool> {
        self.set_if_seen(version, value).map(|r| r == SetIf::Set)
    }

    fn set_if_seen(&self, version: u64, value: i64) -> Result<SetIf> {
        let put = TxnOp::put(self.name.as_str(), value.to_string(), None);
        self.guarded("write the counter", version, vec![put])
    }

    fn delete_if(&self, version: u64) -> Result<bool> {
        let delete = TxnOp::delete(self.name.as_str(), None);
        self.guarded("delete the counter", version, vec![delete])
            .map(|r| r == SetIf::Set)
    }

    fn waits(&self) -> &EtcdWaits {
        &self.waits
    }

    async fn read_armed(&self, _epoch: &Epoch) -> Result<(Versioned, Changes)> {
        let etcd = self.waits.etcd()?;
        let timeout = self.client.rpc_timeout();
        let (now, rev) = self.read(&etcd, timeout).await?;
        let watch = Watch::key_after(&etcd, &self.name, rev, timeout).await?;
        Ok((now, Changes(watch)))
    }
}
