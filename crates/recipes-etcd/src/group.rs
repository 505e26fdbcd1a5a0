//! Group membership as the store's verbs of the core group loops
//! ([`recipes_core::store::engine::group`]).
//!
//! Layout: a member is the key `<name>/<id>` on its client's lease,
//! holding the member's data; any key exactly one level below `<name>/`
//! is a member (keys nested deeper belong to other names). A member
//! leaves when its lease expires: within the TTL of a crash. A key
//! `<name>/<lease hex>` (or `<lease hex>-<n>`) on that very lease is a
//! lock's or election's contender, and `<name>/waiters/<k>`, `read/<k>`,
//! `write/<k>`, where `<k>` is `<lease hex>-<n>` on that lease or Go's
//! `<unix nanos>`, a double barrier's or read-write lock's: a group
//! refuses such a name. Other keys there (a member of the group
//! `<name>/read`) are other names'.
//!
//! A read opens a synced watch on the prefix `<name>/` first, then reads
//! it: whatever changes after the read, the watch hears. The view's
//! version is the revision of the read (it only rises — unless an older
//! backup of the cluster is restored without `--bump-revision`; it counts every
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
use recipes_core::store::{id_taken, until_done, within, Backoff, EntryWatcher};
use recipes_core::{Error, LossReason, Result};

use crate::barrier::{Changes, Epoch, EtcdWaits};
use crate::client::EtcdClient;
use crate::names::{is_contender, key_prefix, other_layout, validate_name};
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
    matches!(layout(rest, lease), Some(Layout::Contender | Layout::Queue))
}

/// What a key `<name>/<rest>` on `lease` is of a recipe on `<name>`, by
/// its shape at exactly its depth (a key deeper, or of another shape,
/// belongs to a name nested below).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `<lease hex>` or `<lease hex>-<n>` on that very lease: a lock's or
    /// an election's contender.
    Contender,
    /// `read/`, `write/` or `waiters/` then `<lease hex>-<n>` on that
    /// lease, or Go's `<unix nanos>`: a read-write lock's or a double
    /// barrier's entry.
    Queue,
    /// `locks/<lease hex>` or `leases/<lease hex>-<n>` on that lease: a
    /// semaphore's internal mutex's contender or permit.
    Semaphore,
}

/// See [`Layout`].
pub(crate) fn layout(rest: &[u8], lease: i64) -> Option<Layout> {
    let (dir, last) = match rest.iter().position(|&c| c == b'/') {
        None => (None, rest),
        Some(i) => (Some(&rest[..i]), &rest[i + 1..]),
    };
    let own = format!("{lease:x}");
    let after_lease = lease != 0 && last.starts_with(own.as_bytes());
    // `<lease hex>` alone, or `<lease hex>-<n>` (a key named once).
    let alone = after_lease && last.len() == own.len();
    let once = after_lease && last.get(own.len()) == Some(&b'-') && is_contender("", last);
    let go = !last.is_empty() && last.iter().all(u8::is_ascii_digit);
    match dir {
        None if alone || once => Some(Layout::Contender),
        Some(b"read" | b"write" | b"waiters") if once || go => Some(Layout::Queue),
        Some(b"locks") if alone => Some(Layout::Semaphore),
        Some(b"leases") if once => Some(Layout::Semaphore),
        _ => None,
    }
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

    type Member = MemberKey;

    fn member(&self, ticket: &Ticket) -> MemberKey {
        MemberKey {
            session: ticket.session.clone(),
            key: ticket.key.clone(),
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

/// Our member's key, followed by core's `watch_held` until it is deleted
/// or on another lease.
pub struct MemberKey {
    session: Arc<Session>,
    key: String,
}

/// One watch of our member's key, and the lease it must stay on.
pub struct MemberWatch {
    watch: Watch,
    lease: i64,
}

impl EntryWatcher for MemberKey {
    type Watch = MemberWatch;

    /// Read our key, then watch it from that read on: `None` when it is
    /// absent or on another lease.
    async fn watch(&self) -> Result<Option<MemberWatch>> {
        let (etcd, timeout) = (self.session.store()?, self.session.rpc_timeout());
        let read = retrying_get(&etcd, timeout, &self.key, None).await?;
        let lease = self.session.id();
        if read.kvs().first().is_none_or(|kv| kv.lease() != lease) {
            return Ok(None);
        }
        let rev = read.header().map_or(0, |h| h.revision());
        let watch = Watch::key_after(&etcd, &self.key, rev, timeout).await?;
        Ok(Some(MemberWatch { watch, lease }))
    }

    /// Our key deleted, or put on another lease; an error when the watch
    /// broke.
    async fn deleted(w: &mut MemberWatch) -> Result<()> {
        loop {
            let resp = w.watch.next().await?;
            let changed = resp.events().iter().any(|ev| match ev.event_type() {
                EventType::Delete => true,
                EventType::Put => ev.kv().is_none_or(|kv| kv.lease() != w.lease),
            });
            if changed {
                return Ok(());
            }
        }
    }
}

impl std::fmt::Debug for MemberWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberWatch")
            .field("lease", &self.lease)
            .finish()
    }
}

impl std::fmt::Debug for MemberKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberKey").field("key", &self.key).finish()
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
