//! `LeaderLatch`: the election layout, with events and fences.
//!
//! Each participant campaigns in the background with its id as the value
//! (`<name>/<lease id in hex>` = id); the oldest candidate leads. A term is
//! held while our key exists and the client's lease deadline has not passed.
//! After any loss the latch starts over with a new key — and a new lease if
//! the session was lost: it never regains leadership on an old one.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use recipes_core::{
    ElectionBackend, Error, FencedLease, FencingToken, HeldLease, LossReason, LossSignal, Result,
};
use tokio::sync::watch;

use crate::client::EtcdClient;
use crate::election::{campaign, read_candidates, EtcdElection, EtcdLeadership};

/// What happened to a participant's leadership.
///
/// Events arrive on a channel after the fact: under a pause a `Lost` event
/// can come late, so check the `lost` signal of `Gained` (it reads the
/// clock) rather than waiting for `Lost`.
#[derive(Debug, Clone)]
pub enum LatchEvent {
    /// This participant leads, with this fence, until `lost` fires.
    Gained {
        /// The fencing token of this term (the revision of the write that
        /// confirmed the win).
        token: FencingToken,
        /// Fires when this term may be over.
        lost: LossSignal,
    },
    /// This participant's term ended.
    Lost {
        /// Why.
        reason: LossReason,
    },
}

/// A participant as etcd shows it at the moment of the read — under
/// partition or pause, possibly no longer so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    /// The participant id (the key's value).
    pub id: String,
    /// The participant's key, `<name>/<lease id in hex>`.
    pub key: String,
    /// Whether it is the oldest candidate, the leader.
    pub is_leader: bool,
}

#[derive(Default)]
struct LatchState {
    started: bool,
    finished: bool,
    leading: Option<(FencingToken, LossSignal)>,
}

struct LatchInner {
    election: EtcdElection,
    id: String,
    state: Mutex<LatchState>,
    changed: Condvar,
    events: (Sender<LatchEvent>, Receiver<LatchEvent>),
    closed: watch::Sender<bool>,
}

/// A leader latch: among all participants of an election name, one leads.
///
/// Made by [`EtcdClient::leader_latch`]; same API and events as the
/// ZooKeeper latch. Campaigns run on the client's runtime thread; events
/// are delivered on a channel and never block it.
///
/// # Under pause and partition
///
/// Guaranteed (clocks within 500 ppm): a term's loss signal fires before
/// etcd can expire the client's lease and let another participant lead;
/// [`has_leadership`](LeaderLatch::has_leadership) reads the lease deadline
/// itself, so after a pause it says `false` before any event is delivered;
/// fences strictly increase across terms; after a loss the latch campaigns
/// again with a new key (a new lease after a lost session), so its next term
/// has a higher fence. Not guaranteed: that the old leader stops in time — a
/// pause right after checking outlives the lease; write with the fence of
/// [`LatchEvent::Gained`] and the resource refuses a deposed leader. A
/// partitioned leader loses its term at the local deadline even if etcd
/// still keeps the lease.
pub struct LeaderLatch {
    inner: Arc<LatchInner>,
}

impl LeaderLatch {
    /// Join the election: campaign in the background and follow our key.
    /// Calling it twice does nothing more.
    pub fn start(&self) {
        {
            let mut st = self.inner.state.lock();
            if st.started {
                return;
            }
            st.started = true;
        }
        let inner = self.inner.clone();
        if !self.inner.election.client().runtime().spawn(run(inner)) {
            log::warn!(
                "[name={}] latch not started: client closed",
                self.inner.election.name()
            );
            let mut st = self.inner.state.lock();
            st.finished = true;
        }
    }

    /// Whether this participant leads now (reads the lease deadline).
    pub fn has_leadership(&self) -> bool {
        self.leadership().is_some()
    }

    /// The current term's fence and loss signal, while leading.
    pub fn leadership(&self) -> Option<(FencingToken, LossSignal)> {
        self.inner
            .state
            .lock()
            .leading
            .clone()
            .filter(|(_, lost)| !lost.is_lost())
    }

    /// Block until this participant leads or `timeout` passes; whether it
    /// leads.
    pub fn await_leadership(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let leads = |st: &LatchState| matches!(&st.leading, Some((_, lost)) if !lost.is_lost());
        let mut st = self.inner.state.lock();
        loop {
            if leads(&st) {
                return true;
            }
            if self.inner.changed.wait_until(&mut st, deadline).timed_out() {
                return leads(&st);
            }
        }
    }

    /// Leadership events, delivered without blocking the latch.
    pub fn events(&self) -> Receiver<LatchEvent> {
        self.inner.events.1.clone()
    }

    /// This participant's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Every participant, oldest first (the first leads), in one
    /// linearizable read; a snapshot that may be stale by the time it is
    /// used.
    ///
    /// # Errors
    ///
    /// Backend errors.
    pub fn participants(&self) -> Result<Vec<Participant>> {
        participants(&self.inner.election)
    }

    /// The current leader, if any.
    ///
    /// # Errors
    ///
    /// Backend errors.
    pub fn leader(&self) -> Result<Option<Participant>> {
        Ok(self.participants()?.into_iter().next())
    }

    /// Leave the election: end the term (its loss signal fires with
    /// [`LossReason::Released`]), delete our key and stop. Returns once our
    /// key is deleted — or once the session is lost, when the lease takes it.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] if that took longer than the lease's TTL (the key
    /// is still deleted in the background, or goes with the lease).
    pub fn close(&self) -> Result<()> {
        self.inner.closed.send_replace(true);
        // Resigning retries until the key is deleted or the session is lost:
        // within a TTL either way.
        let timeout = self.inner.election.client().session_ttl();
        let deadline = Instant::now() + timeout;
        let mut st = self.inner.state.lock();
        while st.started && !st.finished {
            if self.inner.changed.wait_until(&mut st, deadline).timed_out() {
                return Err(Error::Timeout {
                    what: "close the latch".into(),
                    after: timeout,
                });
            }
        }
        Ok(())
    }
}

impl Drop for LeaderLatch {
    fn drop(&mut self) {
        // Never blocks: the task sees the flag and deletes our key.
        self.inner.closed.send_replace(true);
    }
}

impl fmt::Debug for LeaderLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderLatch")
            .field("name", &self.inner.election.name())
            .field("id", &self.inner.id)
            .field("leading", &self.has_leadership())
            .finish()
    }
}

impl LatchInner {
    fn set_leading(&self, leading: Option<(FencingToken, LossSignal)>) {
        self.state.lock().leading = leading;
        self.changed.notify_all();
    }

    fn emit(&self, event: LatchEvent) {
        // The receiver end lives in `self`: sending cannot fail.
        let _ = self.events.0.send(event);
    }
}

async fn closed(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|c| *c).await;
}

/// The latch's life on the runtime: campaign, lead until loss, start over.
async fn run(inner: Arc<LatchInner>) {
    let mut close = inner.closed.subscribe();
    let mut pause = Duration::from_millis(50);
    let e = &inner.election;
    let label = format!("[name={} id={}]", e.name(), inner.id);
    loop {
        if *close.borrow() {
            break;
        }
        let run = campaign(
            e.client(),
            e.name(),
            e.key_prefix(),
            e.queue(),
            inner.id.as_bytes(),
            None,
        );
        let won = tokio::select! {
            r = run => r,
            () = closed(&mut close) => break,
        };
        let leadership = match won {
            Ok(Some(a)) => EtcdLeadership::held(e.client().clone(), a),
            Ok(None) => continue,
            Err(Error::Closed) => break,
            Err(err) => {
                log::warn!("{label} latch: {err}; campaigning again");
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = closed(&mut close) => break,
                }
                pause = (pause * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        pause = Duration::from_millis(50);
        let token = leadership.token();
        let lost = leadership.loss_signal().clone();
        inner.set_leading(Some((token, lost.clone())));
        inner.emit(LatchEvent::Gained {
            token,
            lost: lost.clone(),
        });
        let ended = tokio::select! {
            reason = lost.fired() => Some(reason),
            () = closed(&mut close) => None,
        };
        inner.set_leading(None);
        let reason = ended.unwrap_or(LossReason::Released);
        log::info!("{label} leadership lost: {reason}");
        inner.emit(LatchEvent::Lost { reason });
        leadership.resign_on_runtime().await;
        if ended.is_none() {
            break;
        }
    }
    inner.state.lock().finished = true;
    inner.changed.notify_all();
}

/// The participants of `election`, oldest first.
pub(crate) fn participants(election: &EtcdElection) -> Result<Vec<Participant>> {
    let (client, prefix) = (election.client().clone(), election.key_prefix().to_owned());
    election.client().call("list participants", async move {
        let session = client.live_session().await?;
        let candidates = read_candidates(&session.etcd()?, session.rpc_timeout(), &prefix).await?;
        Ok(candidates
            .into_iter()
            .enumerate()
            .map(|(i, c)| Participant {
                id: String::from_utf8_lossy(&c.info.value).into_owned(),
                key: c.info.holder,
                is_leader: i == 0,
            })
            .collect())
    })
}

/// A participant id: not empty.
pub(crate) fn validate_id(what: &str, id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::invalid(format!(
            "a {what} participant id must not be empty; use e.g. the host name"
        )));
    }
    Ok(())
}

impl EtcdClient {
    /// A leader latch on the election `name` for the participant `id` (the
    /// value of its key). Call [`start`](LeaderLatch::start) to join.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name (as for
    /// [`election`](EtcdClient::election)) or an empty id.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), recipes_etcd::Error> {
    /// use std::time::Duration;
    /// let client = recipes_etcd::EtcdClient::connect(["127.0.0.1:2379"])?;
    /// let latch = client.leader_latch("/elections/scheduler", "host-a")?;
    /// latch.start();
    /// if latch.await_leadership(Duration::from_secs(10)) {
    ///     let (fence, lost) = latch.leadership().expect("leads");
    ///     println!("leading with fence {fence}; lost: {}", lost.is_lost());
    /// }
    /// latch.close()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn leader_latch(&self, name: &str, id: &str) -> Result<LeaderLatch> {
        let election = EtcdElection::new(self.clone(), name)?;
        validate_id("latch", id)?;
        let (closed, _) = watch::channel(false);
        Ok(LeaderLatch {
            inner: Arc::new(LatchInner {
                election,
                id: id.to_owned(),
                state: Mutex::new(LatchState::default()),
                changed: Condvar::new(),
                events: crossbeam_channel::unbounded(),
                closed,
            }),
        })
    }
}
