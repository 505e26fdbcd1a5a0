//! `LeaderLatch`: Curator's latch layout, with events and fences.
//!
//! Layout: `<path>/_c_<uuid>-latch-<seq10>`, data = the participant id. The
//! participant whose node is first in the queue leads; the others watch
//! their predecessor. Leadership is held while our node exists under our
//! current session and the session's lease deadline has not passed. After
//! any loss the latch starts over with a new node: it never regains
//! leadership on an old one.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use recipes_core::{Error, FencingToken, HeldLease, LossReason, LossSignal, Result};
use tokio::sync::watch;

use crate::client::ZkClient;
use crate::error::from_zk;
use crate::lock_internals::{acquire, Contender};
use crate::names::{queue_order, validate_path};
use crate::node_lease::ZkNodeLease;

/// What happened to a participant's leadership.
#[derive(Debug, Clone)]
pub enum LatchEvent {
    /// This participant leads, with this fence, until `lost` fires.
    Gained {
        /// The fencing token of this term (our node's czxid).
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

/// A participant as the store shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    /// The participant id (the node's data).
    pub id: String,
    /// The participant's node.
    pub node: String,
    /// Whether it is first in the queue.
    pub is_leader: bool,
}

#[derive(Default)]
struct LatchState {
    started: bool,
    finished: bool,
    leading: Option<(FencingToken, LossSignal)>,
}

struct LatchInner {
    client: ZkClient,
    contender: Contender,
    id: String,
    state: Mutex<LatchState>,
    changed: Condvar,
    events: (Sender<LatchEvent>, Receiver<LatchEvent>),
    closed: watch::Sender<bool>,
}

/// A leader latch: among all participants on a path, one leads.
///
/// # Under pause and partition
///
/// [`has_leadership`](LeaderLatch::has_leadership) reads the session's
/// lease deadline, so after a pause it reports `false` before any event is
/// delivered. A term's [`LatchEvent::Gained`] carries its fence: write with
/// it, and the resource refuses a deposed leader.
pub struct LeaderLatch {
    inner: Arc<LatchInner>,
}

impl LeaderLatch {
    /// Join the election: create our node and follow it in the background.
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
        if !self.inner.client.runtime().spawn(run(inner)) {
            log::warn!(
                "[path={}] latch not started: client closed",
                self.inner.contender.dir
            );
        }
    }

    /// Whether this participant leads now.
    pub fn has_leadership(&self) -> bool {
        matches!(&self.inner.state.lock().leading, Some((_, lost)) if !lost.is_lost())
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

    /// Block until this participant leads or `timeout` passes.
    pub fn await_leadership(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.inner.state.lock();
        loop {
            if matches!(&st.leading, Some((_, lost)) if !lost.is_lost()) {
                return true;
            }
            if self.inner.changed.wait_until(&mut st, deadline).timed_out() {
                return matches!(&st.leading, Some((_, lost)) if !lost.is_lost());
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

    /// Every participant in queue order.
    ///
    /// # Errors
    ///
    /// Backend errors.
    pub fn participants(&self) -> Result<Vec<Participant>> {
        participants(&self.inner.client, &self.inner.contender.dir)
    }

    /// The current leader, if any.
    ///
    /// # Errors
    ///
    /// Backend errors.
    pub fn leader(&self) -> Result<Option<Participant>> {
        Ok(self.participants()?.into_iter().next())
    }

    /// Leave the election: give up leadership (our node is deleted) and stop.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] if the node could not be deleted within the RPC
    /// timeout (it is still deleted in the background).
    pub fn close(&self) -> Result<()> {
        self.inner.closed.send_replace(true);
        let timeout = self.inner.client.rpc_timeout();
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
        // Never blocks: the task sees the flag and deletes our node.
        self.inner.closed.send_replace(true);
    }
}

impl fmt::Debug for LeaderLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderLatch")
            .field("path", &self.inner.contender.dir)
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

/// The latch's life on the runtime: contend, lead until loss, start over.
async fn run(inner: Arc<LatchInner>) {
    let mut close = inner.closed.subscribe();
    let mut pause = Duration::from_millis(50);
    let label = format!("[path={} id={}]", inner.contender.dir, inner.id);
    loop {
        if *close.borrow() {
            break;
        }
        let acquired = tokio::select! {
            r = acquire(&inner.client, &inner.contender, None) => r,
            () = closed(&mut close) => break,
        };
        let lease = match acquired {
            Ok(Some(a)) => ZkNodeLease::held(inner.client.clone(), a),
            Ok(None) => continue,
            Err(Error::Closed) => break,
            Err(e) => {
                log::warn!("{label} latch: {e}; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        pause = Duration::from_millis(50);
        let token = FencingToken(lease.czxid() as u64);
        let lost = lease.loss_signal().clone();
        log::info!("{label} leadership gained (fence {token})");
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
        lease.release_async().await;
        if ended.is_none() {
            break;
        }
    }
    inner.state.lock().finished = true;
    inner.changed.notify_all();
}

/// Participants of a latch or selector at `dir`, in queue order.
pub(crate) fn participants(client: &ZkClient, dir: &str) -> Result<Vec<Participant>> {
    let (c, dir) = (client.clone(), dir.to_owned());
    client.call("list participants", async move {
        let session = c.live_session().await?;
        let children = match session.zk().list_children(&dir).await {
            Ok(ch) => ch,
            Err(zookeeper_client::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(from_zk(&format!("list {dir}"), e)),
        };
        let anchor = children
            .iter()
            .filter_map(|c| crate::names::sequence_of(c))
            .min()
            .unwrap_or(0);
        let mut out = Vec::new();
        for (_, name) in queue_order(&children, anchor) {
            let node = format!("{dir}/{name}");
            match session.zk().get_data(&node).await {
                Ok((data, _)) => out.push(Participant {
                    id: String::from_utf8_lossy(&data).into_owned(),
                    node,
                    is_leader: false,
                }),
                Err(zookeeper_client::Error::NoNode) => {}
                Err(e) => return Err(from_zk(&format!("read {node}"), e)),
            }
        }
        if let Some(first) = out.first_mut() {
            first.is_leader = true;
        }
        Ok(out)
    })
}

impl ZkClient {
    /// A leader latch at `path` for the participant `id` (Curator's
    /// `LeaderLatch` layout). Call [`start`](LeaderLatch::start) to join.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad path or an empty id.
    pub fn leader_latch(&self, path: &str, id: &str) -> Result<LeaderLatch> {
        validate_path(path)?;
        if id.is_empty() {
            return Err(Error::invalid(
                "a latch participant id must not be empty; use e.g. the host name",
            ));
        }
        let (closed, _) = watch::channel(false);
        Ok(LeaderLatch {
            inner: Arc::new(LatchInner {
                client: self.clone(),
                contender: Contender {
                    dir: path.to_owned(),
                    lock_name: "latch-",
                    data: id.as_bytes().to_vec(),
                    max_leases: 1,
                },
                id: id.to_owned(),
                state: Mutex::new(LatchState::default()),
                changed: Condvar::new(),
                events: crossbeam_channel::unbounded(),
                closed,
            }),
        })
    }
}
