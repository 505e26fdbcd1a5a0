//! The leader latch: among all participants of an election, one leads;
//! the others wait in line, and events say when this one gains or loses.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use super::{participants, validate_participant_id, LatchEvent, Participant};
use crate::backend::{ElectionBackend, FencedLease, HeldLease, LeadershipLease};
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::loss::{LossReason, LossSignal, LossTrigger};
use crate::metrics::Labels;

#[derive(Default)]
struct LatchState {
    started: bool,
    finished: bool,
    leading: Option<(FencingToken, LossSignal)>,
}

struct LatchInner<E> {
    election: E,
    id: String,
    state: Mutex<LatchState>,
    changed: Condvar,
    events: (Sender<LatchEvent>, Receiver<LatchEvent>),
    // Fired by close and drop; the latch's task ends when it sees it.
    closing: LossTrigger,
    labels: Labels,
}

/// A leader latch: among all participants of a name, one leads.
///
/// Campaigns run on the client's runtime thread; events are delivered on a
/// channel and never block it. A term is held while the participant's
/// entry exists and the session's lease deadline has not passed; after any
/// loss the latch starts over with a new entry, so it never regains
/// leadership on an old one, and its next term has a higher fence.
/// [`has_leadership`](LeaderLatch::has_leadership) reads the lease deadline
/// itself: after a pause it says `false` before any event is delivered.
///
/// # Under pause and partition
///
/// The same on every store. Guaranteed (clocks within 500 ppm): a term's
/// loss signal fires before the store can expire the session and let
/// another participant lead; fences strictly increase across terms, and
/// after any loss the next term has a higher one. Not guaranteed: that the
/// old leader stops in time — write with the fence of
/// [`LatchEvent::Gained`] and the resource refuses a deposed leader. A
/// partitioned leader loses its term at the local deadline even if the
/// store still keeps its session.
pub struct LeaderLatch<E: ElectionBackend> {
    inner: Arc<LatchInner<E>>,
}

impl<E: ElectionBackend> LeaderLatch<E> {
    /// A latch on `election` for the participant `id` (its campaign value);
    /// call [`start`](LeaderLatch::start) to join.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty id.
    pub fn new(election: E, id: &str) -> Result<LeaderLatch<E>> {
        validate_participant_id("latch", id)?;
        let labels =
            Labels::new(election.runtime().store(), "latch", election.name()).with_participant(id);
        Ok(LeaderLatch {
            inner: Arc::new(LatchInner {
                labels,
                election,
                id: id.to_owned(),
                state: Mutex::new(LatchState::default()),
                changed: Condvar::new(),
                events: crossbeam_channel::unbounded(),
                closing: LossTrigger::root(),
            }),
        })
    }

    /// Label this latch's metrics with the election's name too (names are
    /// unbounded, so they are no label by default). Before
    /// [`start`](LeaderLatch::start) only; later it changes nothing.
    pub fn with_name_label(mut self) -> LeaderLatch<E> {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.labels = inner.labels.clone().with_name_label();
        }
        self
    }

    /// The election it campaigns in.
    pub fn election(&self) -> &E {
        &self.inner.election
    }

    /// Join the election: campaign in the background and follow our entry.
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
        if !self.inner.election.runtime().spawn(run(inner)) {
            log::warn!("{} latch not started: client closed", self.inner.label());
            self.inner.finish();
        }
    }

    /// Whether this participant leads now (reads the lease deadline).
    pub fn has_leadership(&self) -> bool {
        self.leadership().is_some()
    }

    /// The current term's fence and loss signal, while leading.
    pub fn leadership(&self) -> Option<(FencingToken, LossSignal)> {
        leading(&self.inner.state.lock())
    }

    /// Block until this participant leads or `timeout` passes; whether it
    /// leads.
    pub fn await_leadership(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut st = self.inner.state.lock();
        loop {
            if leading(&st).is_some() {
                return true;
            }
            match deadline {
                Some(d) => {
                    if self.inner.changed.wait_until(&mut st, d).timed_out() {
                        return leading(&st).is_some();
                    }
                }
                None => self.inner.changed.wait(&mut st),
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

    /// Every participant, first in line first (the first leads); a
    /// snapshot that may be stale by the time it is used.
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
    /// [`LossReason::Released`]), delete our entry and stop. Returns once
    /// the entry is deleted — or the session is lost, which takes it —
    /// whether it led or still waited in line: after `close`,
    /// [`participants`](LeaderLatch::participants) and other processes no
    /// longer list it, and it cannot be seen as the next leader.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] if that took longer than the backend allows (the
    /// entry is still deleted in the background, or goes with the session).
    pub fn close(&self) -> Result<()> {
        self.inner.closing.fire(LossReason::Closed);
        let timeout = self.inner.election.close_timeout();
        let deadline = crate::limits::deadline_in(timeout);
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

impl<E: ElectionBackend> Drop for LeaderLatch<E> {
    fn drop(&mut self) {
        // Never blocks: the task sees it and deletes our entry.
        self.inner.closing.fire(LossReason::Closed);
    }
}

impl<E: ElectionBackend> fmt::Debug for LeaderLatch<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderLatch")
            .field("name", &self.inner.election.name())
            .field("id", &self.id())
            .field("leading", &self.has_leadership())
            .finish()
    }
}

fn leading(st: &LatchState) -> Option<(FencingToken, LossSignal)> {
    st.leading.clone().filter(|(_, lost)| !lost.is_lost())
}

impl<E: ElectionBackend> LatchInner<E> {
    fn label(&self) -> String {
        format!("[{} id={}]", self.election.name(), self.id)
    }

    fn set_leading(&self, leading: Option<(FencingToken, LossSignal)>) {
        self.state.lock().leading = leading;
        self.changed.notify_all();
    }

    fn emit(&self, event: LatchEvent) {
        // The receiver end lives in `self`: sending cannot fail.
        let _ = self.events.0.send(event);
    }

    fn finish(&self) {
        self.state.lock().finished = true;
        self.changed.notify_all();
    }
}

/// Marks the latch finished however its task ends, cancelled with the
/// runtime included: `close` never waits for a task that is gone.
struct Finish<E: ElectionBackend>(Arc<LatchInner<E>>);

impl<E: ElectionBackend> Drop for Finish<E> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// The latch's life on the runtime: campaign, lead until loss, start over.
async fn run<E: ElectionBackend>(inner: Arc<LatchInner<E>>) {
    let _finish = Finish(inner.clone());
    let closing = inner.closing.signal();
    let label = inner.label();
    let mut backoff = Backoff::RECOVER;
    // In a stretch of errors retrying does not mend: told once.
    let mut failing = false;
    loop {
        if closing.is_lost() {
            break;
        }
        let started = std::time::Instant::now();
        let id = inner.id.as_bytes().to_vec();
        // A close stops the campaign, which returns once our entry is
        // removed: `close` waits for that, not only for this task.
        let won = (inner.election)
            .campaign_async(id, None, Some(closing.clone()))
            .await;
        if closing.is_lost() {
            // A term won as the latch closed is given up, never gained.
            if let Ok(Some(term)) = won {
                term.resign_async().await;
            }
            break;
        }
        inner.labels.acquisition(started, &won);
        let term = match won {
            Ok(Some(term)) => term,
            Ok(None) => continue,
            Err(Error::Closed) => break,
            Err(e) => {
                log::warn!("{label} latch: {e}; campaigning again");
                if !e.is_retryable() && !std::mem::replace(&mut failing, true) {
                    inner.emit(LatchEvent::Failed { error: e });
                }
                // Biased: a close seen at the same time as a pause's end
                // wins.
                tokio::select! {
                    biased;
                    _ = closing.fired() => break,
                    () = backoff.pause() => {}
                }
                continue;
            }
        };
        backoff.reset();
        failing = false;
        let token = term.token();
        let lost = term.loss_signal().clone();
        log::info!("{label} leadership gained (fence {token})");
        inner.labels.holding(&lost, true);
        let since = std::time::Instant::now();
        inner.set_leading(Some((token, lost.clone())));
        inner.emit(LatchEvent::Gained {
            token,
            lost: lost.clone(),
        });
        // A loss seen at the same time as a close is reported as the loss.
        let ended = tokio::select! {
            biased;
            reason = lost.fired() => Some(reason),
            _ = closing.fired() => None,
        };
        inner.set_leading(None);
        inner.labels.held(since);
        let reason = ended.unwrap_or(LossReason::Released);
        log::info!("{label} leadership lost: {reason}");
        inner.emit(LatchEvent::Lost { reason });
        term.resign_async().await;
        if ended.is_none() {
            break;
        }
    }
}
