//! The etcd mutex: etcd's `concurrency` layout, one-transaction acquire,
//! a synced watch on the one key that must go.
//!
//! # Protocol
//!
//! A lock named `/locks/x` has the key prefix `/locks/x/`; a contender owns
//! `/locks/x/<lease id in hex>`, bound to its client's lease. The owner is
//! the contender key, exactly one level below the prefix, with the lowest
//! `create_revision`. Go's `concurrency.Mutex` and `etcdctl lock` use the
//! same layout and rule (except that they count nested keys too), so they
//! contend with this mutex correctly.
//!
//! 1. One transaction: if our key does not exist, put it with our lease;
//!    either way read it and the oldest keys under the prefix. When ours is
//!    the oldest contender, the lock is ours and the fence is the
//!    transaction's header revision. Alongside it, a synced watch on our
//!    own key starts (see `watch.rs`): its deletion is loss, while waiting
//!    and while held.
//! 2. Otherwise find the contender created just before ours, add a synced
//!    watch on it to the same stream, then read again: its deletion is now
//!    certain to be seen. When it goes, read again — a contender further
//!    ahead may still be there. The read that finds none ahead of us (and
//!    our key still there) confirms ownership; its header revision is the
//!    fence.
//!
//! The fence equals what Go's `Mutex.Header().Revision` and `etcdctl lock`'s
//! `ETCD_LOCK_REV` give their holders, so mixed holders share one strictly
//! increasing sequence: each confirming read happens after the previous
//! holder's key was deleted, and that deletion came after the previous
//! holder's own confirming read.
//!
//! # Under pause and partition
//!
//! A guard's loss signal fires when the session's local deadline passes
//! without an acknowledged keep-alive (a partition, a paused process, a
//! stalled runtime), when a keep-alive reply says the lease is gone, when
//! our key is deleted (a watch on it; etcd 3.4.23 can revoke a lease that is
//! still kept alive, etcd#15247), at release, and when the client closes.
//! The deadline is computed from send times, so it always ends before the
//! server's lease does (with clocks within 500 ppm). What is **not**
//! guaranteed: that a holder stops working in time — a process paused right
//! after checking its signal runs on after the server gave the lock away.
//! That is what the fencing token and [`EtcdLock`]'s fenced writes are for.

use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};
use recipes_core::{Error, MutexBackend, Result, Runtime};
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::error::retrying;
use crate::lock::EtcdLock;
use crate::names::{contender_key, is_contender, key_prefix, validate_name};
use crate::session::{HandleQueue, Session, Turns};
use crate::watch::WatchSet;

/// A mutex shared with every process that locks the same name through
/// etcd's `concurrency` package (Go's `concurrency.Mutex`, `etcdctl lock`).
///
/// Made by [`EtcdClient::mutex`]. Not reentrant. Threads sharing one
/// handle take turns in the process: the second waits, with no key in etcd,
/// until the first one's guard is gone. Separate handles of one name
/// contend in etcd, like separate clients: when the client's lease already
/// has an acquisition of the name, the next handle's key is bound to
/// another lease from the client's pool (see [`EtcdClient`]), so two
/// holders are never one identity in etcd.
///
/// # Under pause and partition
///
/// Guaranteed (clocks within 500 ppm): a guard's loss signal fires before
/// etcd can expire the client's lease and let another contender in; the
/// fencing token strictly increases across holders, `etcdctl lock`'s
/// included; fenced writes through [`EtcdLock`] are refused once our key is
/// gone. Not guaranteed: that the holder notices in time — a pause right
/// after checking the signal outlives the lease, and only the fence stops
/// the stale holder's writes. A partitioned holder loses the guard at its
/// local deadline even if etcd still keeps the lease.
pub type Mutex = recipes_core::Mutex<EtcdMutex>;

/// How many keys one ownership read returns. Nested locks' keys (which do
/// not count) can fill a page; the read then goes on below the page.
pub(crate) const PAGE: i64 = 16;

/// How long to wait before retrying a failed read.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// The etcd mutex backend; use it through [`Mutex`], which documents what
/// holds under pause and partition.
#[derive(Debug, Clone)]
pub struct EtcdMutex {
    client: EtcdClient,
    name: String,
    prefix: String,
    // Shared by clones: they are one handle.
    queue: HandleQueue,
}

impl EtcdMutex {
    pub(crate) fn new(client: EtcdClient, name: &str) -> Result<EtcdMutex> {
        validate_name(name)?;
        Ok(EtcdMutex {
            client,
            name: name.to_owned(),
            prefix: key_prefix(name),
            queue: HandleQueue::default(),
        })
    }

    /// The key prefix its contenders' keys live under (`<name>/`).
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }
}

impl MutexBackend for EtcdMutex {
    type Lease = EtcdLock;

    fn name(&self) -> &str {
        &self.name
    }

    fn acquire(&self, deadline: Option<StdInstant>) -> Result<Option<EtcdLock>> {
        let this = self.clone();
        let acquired = self.client.runtime().call_until("lock", None, async move {
            let deadline = deadline.map(Instant::from_std);
            let via = Via::Handle(&this.queue);
            acquire(
                &this.client,
                &this.name,
                &this.prefix,
                via,
                Claim::Lock,
                deadline,
            )
            .await
        })?;
        Ok(acquired.map(|a| EtcdLock::held(self.client.clone(), a)))
    }
}

/// A key that owns the lock, ready to become an [`EtcdLock`].
#[derive(Debug)]
pub(crate) struct Acquired {
    pub(crate) session: Arc<Session>,
    pub(crate) key: String,
    pub(crate) create_revision: i64,
    pub(crate) fence: i64,
    /// Watches our key since before the confirming read, when it did.
    pub(crate) watches: Option<WatchSet>,
    /// Deletes the key if this is dropped before a lock is made of it.
    pub(crate) cleanup: Cleanup,
    /// The handle's turn, kept while the lock is held.
    pub(crate) handle_turn: Option<OwnedMutexGuard<()>>,
}

/// How an acquisition keeps clear of this process's other acquisitions of
/// the name (see the `session` module).
#[derive(Clone, Copy)]
pub(crate) enum Via<'a> {
    /// A handle's: take the handle's turn, then a session whose turn at the
    /// name is free — the client's, or one from its pool.
    Handle(&'a HandleQueue),
    /// Wait for the turn at the name on the client's own session (a
    /// semaphore's internal mutex).
    ClientSession,
}

/// What a contender's key holds, and what confirms that it won.
#[derive(Clone, Copy)]
pub(crate) enum Claim<'a> {
    /// A mutex's key, with no value. The read that finds no contender
    /// ahead confirms the win; its header revision is the fence.
    Lock,
    /// An election candidate's key, with this value. After that read, our
    /// key is put again (same value, guarded by its `create_revision`);
    /// that write's revision is the fence (see the `election` module).
    Campaign(&'a [u8]),
}

impl<'a> Claim<'a> {
    fn value(self) -> &'a [u8] {
        match self {
            Claim::Lock => &[],
            Claim::Campaign(value) => value,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Claim::Lock => "lock",
            Claim::Campaign(_) => "campaign on",
        }
    }
}

/// The outcome of one attempt.
enum Attempt {
    Acquired(Box<Acquired>),
    TimedOut,
    /// The session was lost or our key vanished while waiting: start over
    /// with a new key.
    Restart,
}

/// What to do next in an attempt.
pub(crate) enum Next {
    /// Ours is the oldest contender, confirmed by a read at this revision.
    Owner { fence: i64 },
    /// Wait for this contender, the one just ahead of ours, to go.
    Wait(Vec<u8>),
    /// Read who is ahead of us.
    Check,
    /// Our key is gone.
    OursGone,
}

/// Contend until the lock (or election, as `claim` says) is ours or
/// `deadline`.
///
/// The deadline bounds the wait only: the transaction and its read always
/// run, so a try-lock of a free lock succeeds. A stuck request is cut off an
/// RPC timeout after the deadline; every way out but a win deletes our key.
pub(crate) async fn acquire(
    client: &EtcdClient,
    name: &str,
    prefix: &str,
    via: Via<'_>,
    claim: Claim<'_>,
    deadline: Option<Instant>,
) -> Result<Option<Acquired>> {
    let handle_turn = match via {
        Via::Handle(queue) => match queue.turn(deadline).await {
            Some(t) => Some(t),
            None => return Ok(None),
        },
        Via::ClientSession => None,
    };
    loop {
        let Some((session, turn)) = session_turn(client, name, via, deadline).await? else {
            return Ok(None);
        };
        let rt = client.runtime().clone();
        let outcome = match deadline {
            Some(d) => {
                let hard = d + session.rpc_timeout();
                let attempt = attempt(rt, &session, prefix, claim, turn, Some(d));
                match tokio::time::timeout_at(hard, attempt).await {
                    Ok(r) => r?,
                    // The attempt was dropped: its cleanup runs.
                    Err(_) => Attempt::TimedOut,
                }
            }
            None => attempt(rt, &session, prefix, claim, turn, None).await?,
        };
        match outcome {
            Attempt::Acquired(mut a) => {
                a.handle_turn = handle_turn;
                return Ok(Some(*a));
            }
            Attempt::TimedOut => return Ok(None),
            Attempt::Restart if passed(deadline) => return Ok(None),
            Attempt::Restart => {
                log::debug!("[{}] starting over on {prefix}", session.label());
            }
        }
    }
}

/// A session and its turn at `name`, as `via` says; `None` when the
/// deadline passed first.
pub(crate) async fn session_turn(
    client: &EtcdClient,
    name: &str,
    via: Via<'_>,
    deadline: Option<Instant>,
) -> Result<Option<(Arc<Session>, OwnedMutexGuard<()>)>> {
    match via {
        Via::Handle(_) => client.session_for(name).await.map(Some),
        Via::ClientSession => {
            let session = client.live_session().await?;
            Ok(session
                .queue_turn(name, deadline)
                .await
                .map(|turn| (session, turn)))
        }
    }
}

async fn attempt(
    rt: Runtime,
    session: &Arc<Session>,
    prefix: &str,
    claim: Claim<'_>,
    turn: OwnedMutexGuard<()>,
    deadline: Option<Instant>,
) -> Result<Attempt> {
    let key = contender_key(prefix, session.lease());
    let mut cleanup = Cleanup {
        rt: Some(rt),
        session: session.clone(),
        key: key.clone(),
        create_revision: None,
        turn: Some(turn),
    };
    let etcd = session.etcd()?;
    let rpc_timeout = session.rpc_timeout();
    let ours = || {
        TxnOp::put(
            key.clone(),
            claim.value().to_vec(),
            Some(PutOptions::new().with_lease(session.lease())),
        )
    };
    let oldest = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(PAGE)
        .with_keys_only();
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([ours(), TxnOp::get(prefix, Some(oldest.clone()))])
        .or_else([
            TxnOp::get(key.clone(), None),
            TxnOp::get(prefix, Some(oldest)),
        ]);
    // The watch on our own key is opened alongside the transaction: it
    // reports our key's deletion while we wait and after we hold.
    let mut watch_etcd = etcd.clone();
    let what = format!("{} {prefix}", claim.what());
    let (resp, opened) = tokio::join!(
        // Safe to send twice: a second run finds our key and reads it.
        retrying(&what, rpc_timeout, || txn_request(&etcd, &txn)),
        WatchSet::open(&mut watch_etcd, &key, rpc_timeout),
    );
    // On error the cleanup deletes the key: the put may have been applied.
    let resp = resp?;
    let mut watches = opened
        .map_err(|e| log::debug!("[{}] watch on {key} failed: {e}", session.label()))
        .ok();
    let header = header_revision(&resp)?;
    let oldest = read_at(&resp, 1)?;
    let create_revision = if resp.succeeded() {
        header
    } else {
        // Our key existed (a leftover of this lease, held by no guard of
        // ours: this process's queue sees to that). Go on with it as Go
        // does, with our value.
        let existing = read_at(&resp, 0)?;
        let Some(kv) = existing.kvs().first() else {
            // Gone between the compare and the read: impossible in one txn.
            return Err(unexpected(&format!(
                "our key vanished inside the {} transaction",
                claim.what()
            )));
        };
        let rev = kv.create_revision();
        cleanup.create_revision = Some(rev);
        if kv.value() != claim.value()
            && guarded(&etcd, rpc_timeout, &key, rev, ours())
                .await?
                .is_none()
        {
            cleanup.run().await;
            return Ok(Attempt::Restart);
        }
        rev
    };
    cleanup.create_revision = Some(create_revision);
    log::debug!(
        "[{}] {key} created at revision {create_revision}",
        session.label()
    );
    let mut next = decide_from_oldest(&oldest, prefix, &key, create_revision, header);
    loop {
        next = match next {
            Next::Owner {
                fence: confirmed_at,
            } => {
                let fence = match claim {
                    Claim::Lock => Some(confirmed_at),
                    // The win-confirming write: its revision is the fence.
                    Claim::Campaign(_) => {
                        guarded(&etcd, rpc_timeout, &key, create_revision, ours()).await?
                    }
                };
                match fence {
                    Some(fence) => {
                        // The watch covers our key from the fence on only
                        // if it existed by then; otherwise the guard's watch
                        // starts afresh (and reads the key again).
                        let watches = watches.filter(|w| w.synced_at() <= fence);
                        let acquired = Acquired {
                            session: session.clone(),
                            key,
                            create_revision,
                            fence,
                            watches,
                            cleanup,
                            handle_turn: None,
                        };
                        return Ok(Attempt::Acquired(Box::new(acquired)));
                    }
                    None => Next::OursGone,
                }
            }
            Next::OursGone => {
                log::debug!("[{}] {key} vanished while waiting", session.label());
                cleanup.run().await;
                return Ok(Attempt::Restart);
            }
            Next::Check => {
                if session.is_lost() {
                    cleanup.run().await;
                    return Ok(Attempt::Restart);
                }
                match check_owner(&etcd, rpc_timeout, prefix, &key, create_revision).await {
                    Ok(next) => next,
                    Err(e) if e.is_retryable() && !passed(deadline) => {
                        log::debug!("[{}] ownership read failed: {e}; retrying", session.label());
                        tokio::time::sleep(RETRY_PAUSE).await;
                        Next::Check
                    }
                    Err(e) => return Err(e),
                }
            }
            Next::Wait(ahead) => {
                if passed(deadline) {
                    cleanup.run().await;
                    return Ok(Attempt::TimedOut);
                }
                if session.is_lost() {
                    cleanup.run().await;
                    return Ok(Attempt::Restart);
                }
                let outcome = match watches.as_mut() {
                    // Both watches were confirmed before the read that named
                    // `ahead`: neither deletion can be missed.
                    Some(w) if w.ahead() == Some(ahead.as_slice()) => {
                        let wake = wake_at(session, deadline);
                        tokio::select! {
                            gone = w.next() => Some(gone.map(drop)),
                            _ = tokio::time::sleep_until(wake) => None,
                            _ = session.lost() => None,
                        }
                    }
                    Some(w) => {
                        log::debug!(
                            "[{}] {key} waits for {}",
                            session.label(),
                            String::from_utf8_lossy(&ahead)
                        );
                        // Read again once the watch exists.
                        Some(w.watch_ahead(&ahead, rpc_timeout).await)
                    }
                    None => match WatchSet::open(&mut watch_etcd, &key, rpc_timeout).await {
                        Ok(w) => {
                            watches = Some(w);
                            Some(Ok(()))
                        }
                        Err(e) => Some(Err(e)),
                    },
                };
                match outcome {
                    // Something went, or a watch was added: read again.
                    Some(Ok(())) => Next::Check,
                    Some(Err(e)) if e.is_retryable() => {
                        log::debug!("[{}] watch broke: {e}", session.label());
                        watches = None;
                        tokio::time::sleep(RETRY_PAUSE).await;
                        Next::Check
                    }
                    Some(Err(e)) => return Err(e),
                    // Woken to look at the deadline and the session.
                    None => Next::Wait(ahead),
                }
            }
        };
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
    let txn = Txn::new()
        .when([Compare::create_revision(
            key,
            CompareOp::Equal,
            create_revision,
        )])
        .and_then([op]);
    let resp = retrying(&format!("put {key}"), rpc_timeout, || {
        txn_request(etcd, &txn)
    })
    .await?;
    if !resp.succeeded() {
        return Ok(None);
    }
    header_revision(&resp).map(Some)
}

/// One sending of `txn` (a fresh handle per try, for [`retrying`]).
pub(crate) fn txn_request(
    etcd: &etcd_client::Client,
    txn: &Txn,
) -> impl std::future::Future<Output = std::result::Result<TxnResponse, etcd_client::Error>> {
    let (mut etcd, txn) = (etcd.clone(), txn.clone());
    async move { etcd.txn(txn).await }
}

pub(crate) fn passed(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// When a waiter wakes up at the latest: the acquisition's deadline, or the
/// session's local deadline (to notice a lost session).
pub(crate) fn wake_at(session: &Session, deadline: Option<Instant>) -> Instant {
    let lease_end = session
        .epoch()
        .valid_until()
        .map(|v| Instant::from_std(v.to_instant()))
        .unwrap_or_else(|| Instant::now() + session.ttl());
    match deadline {
        Some(d) => d.min(lease_end),
        None => lease_end,
    }
}

/// Decide from the acquire transaction's page of oldest keys.
pub(crate) fn decide_from_oldest(
    oldest: &GetResponse,
    prefix: &str,
    key: &str,
    create_revision: i64,
    header: i64,
) -> Next {
    let contenders: Vec<_> = oldest
        .kvs()
        .iter()
        .filter(|kv| is_contender(prefix, kv.key()))
        .collect();
    match contenders.first() {
        Some(first)
            if first.key() == key.as_bytes() && first.create_revision() == create_revision =>
        {
            Next::Owner { fence: header }
        }
        Some(_) => {
            // The contender just ahead of ours, if ours is on the page.
            match contenders.iter().position(|kv| kv.key() == key.as_bytes()) {
                Some(i) if i > 0 => Next::Wait(contenders[i - 1].key().to_vec()),
                _ => Next::Check,
            }
        }
        // Only nested locks' keys on the page: read on.
        None => Next::Check,
    }
}

/// One read (a read-only transaction, linearizable): does our key still
/// exist, and which contender was created just before it? Pages past
/// nested locks' keys.
pub(crate) async fn check_owner(
    etcd: &etcd_client::Client,
    rpc_timeout: Duration,
    prefix: &str,
    key: &str,
    create_revision: i64,
) -> Result<Next> {
    let mut below = create_revision - 1;
    loop {
        let ahead = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(below)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(PAGE)
            .with_keys_only();
        let txn = Txn::new().and_then([
            TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
            TxnOp::get(prefix, Some(ahead)),
        ]);
        let resp = retrying(&format!("read {prefix}"), rpc_timeout, || {
            txn_request(etcd, &txn)
        })
        .await?;
        let header = header_revision(&resp)?;
        let (ours, ahead) = (read_at(&resp, 0)?, read_at(&resp, 1)?);
        if ours
            .kvs()
            .first()
            .is_none_or(|kv| kv.create_revision() != create_revision)
        {
            return Ok(Next::OursGone);
        }
        // The revision bound is the server's filter too; checking it here
        // keeps a `below` of 0 (which etcd reads as "no bound") harmless.
        let is_ahead = |kv: &&etcd_client::KeyValue| {
            kv.create_revision() < create_revision && is_contender(prefix, kv.key())
        };
        if let Some(kv) = ahead.kvs().iter().find(is_ahead) {
            return Ok(Next::Wait(kv.key().to_vec()));
        }
        let lowest = ahead.kvs().last().map(|kv| kv.create_revision());
        match lowest {
            // Nothing (or only nested keys) ahead: ours is the oldest. A
            // key created below `lowest` while we paged would have a newer
            // revision, so the newest read confirms it.
            Some(lowest) if ahead.more() && lowest > 1 => below = lowest - 1,
            _ => return Ok(Next::Owner { fence: header }),
        }
    }
}

pub(crate) fn header_revision(resp: &TxnResponse) -> Result<i64> {
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| unexpected("a transaction reply without a header"))
}

/// The `index`th reply of a transaction, which must be a range read.
pub(crate) fn read_at(resp: &TxnResponse, index: usize) -> Result<GetResponse> {
    match resp.op_responses().into_iter().nth(index) {
        Some(TxnOpResponse::Get(get)) => Ok(get),
        _ => Err(unexpected("a transaction reply without its reads")),
    }
}

pub(crate) fn unexpected(what: &str) -> Error {
    Error::Backend {
        message: format!("unexpected reply from etcd: {what}"),
        retryable: false,
        source: None,
    }
}

/// Deletes our key (unless disarmed) however an acquisition ends: error,
/// timeout, restart, or the future being dropped. It holds this process's
/// turn at the name until the key is gone, so the next acquisition of the
/// name through this session cannot find the old key.
#[derive(Debug)]
pub(crate) struct Cleanup {
    // `None` once run or disarmed.
    pub(crate) rt: Option<Runtime>,
    pub(crate) session: Arc<Session>,
    pub(crate) key: String,
    /// `None` while the put's outcome is unknown.
    pub(crate) create_revision: Option<i64>,
    pub(crate) turn: Option<OwnedMutexGuard<()>>,
}

impl Cleanup {
    /// The key is held: hand over the turn, delete nothing.
    pub(crate) fn disarm(mut self) -> Option<OwnedMutexGuard<()>> {
        self.rt = None;
        self.turn.take()
    }

    /// Delete the key now, on the caller's task.
    pub(crate) async fn run(mut self) {
        self.rt = None;
        let turn = self.turn.take();
        let turns = Turns::new(turn, None);
        delete_until_done(
            self.session.clone(),
            self.key.clone(),
            self.create_revision,
            turns,
        )
        .await;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            let turns = Turns::new(self.turn.take(), None);
            let task = delete_until_done(
                self.session.clone(),
                std::mem::take(&mut self.key),
                self.create_revision,
                turns,
            );
            if !rt.spawn(task) {
                log::debug!(
                    "[{}] client closed: the lease removes the key",
                    self.session.label()
                );
            }
        }
    }
}

/// Delete our key: guarded by its create revision when we know it, so a
/// late retry never deletes a newer key.
pub(crate) async fn delete_key(
    session: &Session,
    key: &str,
    create_revision: Option<i64>,
) -> Result<()> {
    let etcd = session.etcd()?;
    let what = format!("delete {key}");
    match create_revision {
        Some(rev) => {
            let txn = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, rev)])
                .and_then([TxnOp::delete(key, None)]);
            retrying(&what, session.rpc_timeout(), || txn_request(&etcd, &txn)).await?;
        }
        None => {
            retrying(&what, session.rpc_timeout(), || {
                let mut etcd = etcd.clone();
                async move { etcd.delete(key, None).await }
            })
            .await?;
        }
    }
    Ok(())
}

/// Delete our key, retrying until done or the session is lost (its lease
/// then takes the key along, or is revoked). Gives the turns back
/// afterwards.
pub(crate) async fn delete_until_done(
    session: Arc<Session>,
    key: String,
    create_revision: Option<i64>,
    turn: Turns,
) {
    let mut pause = RETRY_PAUSE;
    loop {
        match delete_key(&session, &key, create_revision).await {
            Ok(()) => break,
            Err(_) if session.is_lost() => break,
            Err(e) => {
                log::warn!("[{}] delete {key} failed: {e}; retrying", session.label());
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
    if create_revision.is_none() && !session.is_lost() {
        // The put's reply never came; the request may still be applied
        // after our delete. Look once more after an RPC timeout.
        tokio::time::sleep(session.rpc_timeout()).await;
        let _ = delete_key(&session, &key, None).await;
    }
    drop(turn);
}

impl EtcdClient {
    /// A mutex named `name` (etcd's `concurrency` layout: keys
    /// `<name>/<lease id>`), shared with Go's `concurrency.Mutex` and
    /// `etcdctl lock <name>`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name that is empty, does not start
    /// with `/`, ends with `/`, has an empty component or a control
    /// character.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), recipes_etcd::Error> {
    /// let client = recipes_etcd::EtcdClient::connect(["127.0.0.1:2379"])?;
    /// let mutex = client.mutex("/locks/nightly-report")?;
    /// let guard = mutex.lock()?;
    /// // Pass guard.token() with every write to the protected resource.
    /// println!("fence {}", guard.token());
    /// guard.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        Ok(Mutex::from_backend(EtcdMutex::new(self.clone(), name)?))
    }
}
