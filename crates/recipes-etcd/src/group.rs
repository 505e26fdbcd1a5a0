//! Group membership as the store's verbs of the core group loops
//! ([`recipes_core::store::engine::group`]).
//!
//! Layout: a member is the key `<name>/<id>` on its client's lease,
//! holding the member's data; any key exactly one level below `<name>/`
//! is a member (keys nested deeper belong to other names). A member
//! leaves when its lease expires: within the TTL of a crash. A key
//! `<name>/<lease hex>` (or `<lease hex>-<n>`) on that very lease is a
//! lock's or election's contender, and `<name>/waiters/…`, `read/…`,
//! `write/…` a double barrier's or read-write lock's: a group refuses such
//! a name.
//!
//! A read opens a synced watch on the prefix `<name>/` first, then reads
//! it: whatever changes after the read, the watch hears. The view's
//! version is the revision of the read (it only rises; it counts every
//! write of the cluster, so a watch cannot say how many changes it
//! missed: [`GroupView::changes`] is `None`).
//!
//! A joined member watches its own key from the revision it read it at:
//! the key deleted, or put on another lease, while our lease lives — an
//! `etcdctl del`, a restore — is the membership's loss.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp};
use recipes_core::store::engine::group::{GroupStore, GroupView, Member};
use recipes_core::store::engine::WaitStore;
use recipes_core::store::{id_taken, until_done, within, Backoff};
use recipes_core::{Error, LossReason, Result};

use crate::barrier::{Changes, Epoch, EtcdWaits};
use crate::client::EtcdClient;
use crate::names::{key_prefix, other_layout, validate_name};
use crate::rpc::{from_etcd, header_revision, read_at, retrying_get, retrying_txn};
use crate::session::Session;
use crate::watch::Watch;

/// An etcd group: a member is the key `<name>/<id>` on its client's lease,
/// holding its data; a view's version is the revision of its read
/// (`changes` is `None`); a watch opens a synced prefix watch on `<name>/`
/// before each read.
pub type Group = recipes_core::Group<EtcdWaits>;

impl EtcdWaits {
    pub(crate) fn group(client: &EtcdClient, name: &str) -> Result<EtcdWaits> {
        validate_name("group", name)?;
        Ok(EtcdWaits {
            client: client.clone(),
            name: name.to_owned(),
            count: 0,
        })
    }

    /// The members among the keys under `<name>/`, refusing another
    /// recipe's layout.
    fn members(&self, kvs: &[etcd_client::KeyValue]) -> Result<Vec<Member>> {
        let prefix = key_prefix(&self.name);
        let mut members = Vec::new();
        for kv in kvs {
            let Some(rest) = kv.key().strip_prefix(prefix.as_bytes()) else {
                continue;
            };
            if is_other_recipe(rest, kv.lease()) {
                let theirs = "keys of another recipe (a lock, an election, a semaphore, a \
                              double barrier or a read-write lock)";
                return Err(other_layout(&prefix, "a group", theirs, kv.key()));
            }
            if rest.contains(&b'/') {
                continue;
            }
            members.push(Member {
                id: String::from_utf8_lossy(rest).into_owned(),
                data: kv.value().to_vec(),
            });
        }
        members.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(members)
    }
}

/// Whether the key `<name>/<rest>` on `lease` is another recipe's: a
/// contender named after its own lease, a double barrier's or read-write
/// lock's key.
fn is_other_recipe(rest: &[u8], lease: i64) -> bool {
    let own = format!("{lease:x}");
    let contender = lease != 0
        && rest.starts_with(own.as_bytes())
        && (rest.len() == own.len() || rest[own.len()] == b'-');
    let nested = ["waiters/", "read/", "write/"];
    contender || nested.iter().any(|n| rest.starts_with(n.as_bytes()))
}

/// Names our member: its session (lease) and key.
#[derive(Debug)]
pub struct Ticket {
    session: Arc<Session>,
    key: String,
}

impl GroupStore for EtcdWaits {
    type Ticket = Ticket;

    fn ticket(&self, epoch: &Epoch, id: &str) -> Ticket {
        Ticket {
            session: epoch.0.session.clone(),
            key: format!("{}{id}", key_prefix(&self.name)),
        }
    }

    async fn join(&self, epoch: &Epoch, ticket: &Ticket, data: &[u8]) -> Result<bool> {
        let etcd = self.etcd()?;
        let lease = epoch.0.session.id();
        let key = ticket.key.as_str();
        let absent = Compare::create_revision(key, CompareOp::Equal, 0);
        let put = TxnOp::put(key, data, Some(PutOptions::new().with_lease(lease)));
        let under = GetOptions::new().with_prefix();
        let txn = Txn::new()
            .when([absent])
            .and_then([put])
            .or_else([TxnOp::get(key, None)]);
        // The layout first: a name holding another recipe's keys is
        // refused before anything is written.
        let layout = Txn::new().and_then([TxnOp::get(key_prefix(&self.name), Some(under))]);
        let what = format!("read the group {}", self.name);
        let seen = retrying_txn(&etcd, &what, self.rpc_timeout(), &layout).await?;
        self.members(read_at(&seen, 0)?.kvs())?;
        // Sent once: a resent put that finds the key on our lease could
        // not tell a lost reply from another membership of ours; the
        // engine resends after an unknown outcome, and tells them apart.
        let what = format!("put {key}");
        let sent = within(&what, self.rpc_timeout(), async {
            let mut etcd = etcd.clone();
            etcd.txn(txn).await.map_err(|e| match from_etcd(&what, e) {
                e if e.is_retryable() => Error::Indeterminate { what: what.clone() },
                e => e,
            })
        });
        let resp = sent.await?;
        if resp.succeeded() {
            return Ok(true);
        }
        let got = read_at(&resp, 0)?;
        match got.kvs().first() {
            // On our lease: a lost reply, or another membership of ours
            // (the engine tells).
            Some(kv) if kv.lease() == lease => Ok(false),
            Some(_) => {
                let id = key.strip_prefix(&key_prefix(&self.name)).unwrap_or(key);
                Err(id_taken(&self.name, id))
            }
            None => Err(crate::rpc::unexpected("a member key that vanished")),
        }
    }

    async fn read(&self, _epoch: &Epoch, arm: bool) -> Result<(GroupView, Option<Changes>)> {
        let etcd = self.etcd()?;
        let prefix = key_prefix(&self.name);
        let watch = if arm {
            Some(Changes(
                Watch::prefix(&etcd, &prefix, self.rpc_timeout()).await?,
            ))
        } else {
            None
        };
        let txn = Txn::new().and_then([TxnOp::get(
            prefix.as_str(),
            Some(GetOptions::new().with_prefix()),
        )]);
        let what = format!("read the group {}", self.name);
        let resp = retrying_txn(&etcd, &what, self.rpc_timeout(), &txn).await?;
        let members = self.members(read_at(&resp, 0)?.kvs())?;
        let view = GroupView {
            members,
            version: u64::try_from(header_revision(&resp)?).unwrap_or(0),
            changes: None,
        };
        Ok((view, watch))
    }

    fn gone(&self, ticket: &Ticket) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (session, key) = (ticket.session.clone(), ticket.key.clone());
        async move {
            let mut backoff = Backoff::RETRY;
            loop {
                match ours_until_changed(&session, &key).await {
                    Ok(true) => return,
                    Ok(false) => backoff.reset(),
                    Err(e) => {
                        log::debug!("[{}] watch on {key} failed: {e}", session.label());
                        backoff.pause().await;
                    }
                }
            }
        }
    }

    async fn remove(ticket: Ticket) {
        let session = ticket.session;
        if session.is_single_use() {
            return session.end(LossReason::Released).await;
        }
        let what = format!("[{}] delete {}", session.label(), ticket.key);
        let delete = || delete_ours(&session, &ticket.key);
        until_done(&what, Backoff::RETRY, || session.is_lost(), delete).await;
    }
}

/// Read our member's `key`, then watch it from that read on: `true` once it
/// is absent or on another lease, `false` when the watch broke (read and
/// watch again).
async fn ours_until_changed(session: &Session, key: &str) -> Result<bool> {
    let (etcd, timeout) = (session.store()?, session.rpc_timeout());
    let read = retrying_get(&etcd, timeout, key, None).await?;
    let ours = |kv: &etcd_client::KeyValue| kv.lease() == session.id();
    if !read.kvs().first().is_some_and(ours) {
        return Ok(true);
    }
    let rev = read.header().map_or(0, |h| h.revision());
    let mut watch = Watch::key_after(&etcd, key, rev, timeout).await?;
    loop {
        let Ok(resp) = watch.next().await else {
            return Ok(false);
        };
        let changed = resp.events().iter().any(|ev| match ev.event_type() {
            EventType::Delete => true,
            EventType::Put => !ev.kv().is_some_and(ours),
        });
        if changed {
            return Ok(true);
        }
    }
}

/// Delete `key` if it is still on our lease: another client's member of
/// the same id is never touched.
async fn delete_ours(session: &Session, key: &str) -> Result<()> {
    let ours = Compare::lease(key, CompareOp::Equal, session.id());
    let txn = Txn::new().when([ours]).and_then([TxnOp::delete(key, None)]);
    let etcd = session.store()?;
    retrying_txn(&etcd, &format!("delete {key}"), session.rpc_timeout(), &txn).await?;
    Ok(())
}
