//! Our contender key in etcd: what names it before it exists, what it is
//! once it won, its deletion on every way out, and writes guarded by it.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use recipes_core::store::{until_done, Backoff, Turn, Turns};
use recipes_core::{LossReason, Result};

use crate::hub::{Interest, WatchHub};
use crate::names::named_once;
use crate::rpc::{header_revision, retrying_delete, retrying_txn};
use crate::session::Session;

/// Names our key before it exists (the engine's ticket): enough to delete
/// it even if the create's reply was lost. It holds this process's turn at
/// the name until the key is gone, so that the next acquisition of the name
/// through this session cannot find the old key.
#[derive(Debug)]
pub(crate) struct Ticket {
    pub(crate) session: Arc<Session>,
    pub(crate) key: String,
    /// `None` while the put's outcome is unknown.
    pub(crate) create_revision: Option<i64>,
    pub(crate) turn: Option<Turn>,
}

impl Ticket {
    /// Delete the key; see [`delete_until_done`].
    pub(crate) async fn remove(self) {
        let turns = Turns::new(self.turn, None);
        delete_until_done(self.session, self.key, self.create_revision, turns).await;
    }
}

/// Our key once it exists: its session (lease) and `create_revision`, the
/// name's prefix under which it lives, and the watch it is heard on.
#[derive(Clone)]
pub(crate) struct OwnKey {
    pub(crate) session: Arc<Session>,
    pub(crate) key: String,
    pub(crate) create_revision: i64,
    pub(crate) prefix: String,
    /// The prefix of the client's watch that hears our key: the name's
    /// (`prefix`), or a reader's lease's reader keys (`contend.rs`).
    pub(crate) heard_on: String,
    pub(crate) watches: WatchHub,
}

impl std::fmt::Debug for OwnKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnKey")
            .field("key", &self.key)
            .field("create_revision", &self.create_revision)
            .finish_non_exhaustive()
    }
}

/// A key that won, ready to become an [`EtcdLock`](crate::EtcdLock) (or,
/// for a semaphore's internal mutex, to be deleted again).
#[derive(Debug)]
pub(crate) struct Acquired {
    pub(crate) own: OwnKey,
    pub(crate) fence: i64,
    /// Hears our key's deletion since the fence.
    pub(crate) watch: Option<Interest>,
    /// This process's turns at the name, kept while the key exists.
    pub(crate) turns: Turns,
}

impl Acquired {
    /// Made from the engine's win: `interest` hears our key under
    /// `heard_on` on the client's watch stream `watches`; the key lives
    /// under the name's `prefix`.
    pub(crate) fn new(
        ticket: Ticket,
        (prefix, heard_on, watches): (&str, String, WatchHub),
        create_revision: i64,
        fence: i64,
        interest: Interest,
    ) -> Acquired {
        let own = OwnKey {
            session: ticket.session,
            key: ticket.key,
            create_revision,
            prefix: prefix.to_owned(),
            heard_on,
            watches,
        };
        Acquired {
            own,
            fence,
            watch: Some(interest),
            turns: Turns::new(ticket.turn, None),
        }
    }

    /// Delete the key at once; see [`delete_until_done`].
    pub(crate) async fn delete(self) {
        let OwnKey {
            session,
            key,
            create_revision,
            ..
        } = self.own;
        delete_until_done(session, key, Some(create_revision), self.turns).await;
    }
}

/// Run `op` only while our key has `create_revision`; the write's revision,
/// or `None` when our key is gone. Sent again after a retryable failure: a
/// second put of the same value and lease means the same, and its revision
/// is as good a fence (it too comes after the read that confirmed us).
pub(crate) async fn guarded(
    etcd: &etcd_client::Client,
    rpc_timeout: std::time::Duration,
    key: &str,
    create_revision: i64,
    op: TxnOp,
) -> Result<Option<i64>> {
    let txn = if_ours(key, Some(create_revision), [op]);
    let resp = retrying_txn(etcd, &format!("put {key}"), rpc_timeout, &txn).await?;
    if !resp.succeeded() {
        return Ok(None);
    }
    header_revision(&resp).map(Some)
}

/// Delete our key: guarded by its create revision when we know it, so a
/// late retry never deletes a newer key of the same name; a key named
/// once ([`named_once`]) has no newer key, and is deleted as is (what a
/// late resend finds is nothing, or this very key put by a late create).
/// A single-use session's lease is revoked instead, which takes the key
/// along.
pub(crate) async fn delete_key(
    session: &Session,
    key: &str,
    create_revision: Option<i64>,
) -> Result<()> {
    if session.is_single_use() {
        return session.revoke(LossReason::Released).await;
    }
    let (etcd, what) = (session.store_ref()?, format!("delete {key}"));
    let timeout = session.rpc_timeout();
    match create_revision.filter(|_| !named_once(key)) {
        None => retrying_delete(etcd, &what, timeout, key).await,
        guard => {
            let txn = if_ours(key, guard, [TxnOp::delete(key, None)]);
            retrying_txn(etcd, &what, timeout, &txn).await.map(drop)
        }
    }
}

/// `ops` in one transaction, guarded by `create_revision(key) == rev` when
/// `rev` is known.
pub(crate) fn if_ours(key: &str, rev: Option<i64>, ops: impl Into<Vec<TxnOp>>) -> Txn {
    let ours = rev.map(|rev| Compare::create_revision(key, CompareOp::Equal, rev));
    Txn::new().when(Vec::from_iter(ours)).and_then(ops)
}

/// Delete our key, retrying until done or the session is lost (its lease
/// then takes the key along, or is revoked); end a single-use session
/// instead. Gives the turns back afterwards.
pub(crate) async fn delete_until_done(
    session: Arc<Session>,
    key: String,
    create_revision: Option<i64>,
    turns: Turns,
) {
    if session.is_single_use() {
        return session.end(LossReason::Released).await;
    }
    let what = format!("[{}] delete {key}", session.label());
    let (lost, delete) = (
        || session.is_lost(),
        || delete_key(&session, &key, create_revision),
    );
    until_done(&what, Backoff::RETRY, lost, delete).await;
    if create_revision.is_none() && !session.is_lost() {
        // The put's reply never came; the request may still be applied
        // after our delete. Look once more after an RPC timeout, in the
        // background: the caller need not wait for it, the turns do.
        tokio::spawn(async move {
            tokio::time::sleep(session.rpc_timeout()).await;
            let _ = delete_key(&session, &key, None).await;
            drop(turns);
        });
    }
}
