//! The leader latch and the leader selector, written once over a store's
//! contend step ([`LatchBackend`], [`SelectorBackend`]). The ZooKeeper and
//! etcd crates implement the traits and export these types under their own
//! names, with what holds under pause and partition for their store.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::loss::{LossReason, LossSignal, LossTrigger};
use crate::runtime::Runtime;

/// What happened to a latch participant's leadership.
///
/// Events arrive on a channel after the fact: under a pause a `Lost` event
/// can come late, so check the `lost` signal of `Gained` (it reads the
/// clock) rather than waiting for `Lost`.
#[derive(Debug, Clone)]
pub enum LatchEvent {
    /// This participant leads, with this fence, until `lost` fires.
    Gained {
        /// The fencing token of this term.
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

/// A participant of a latch or selector as the store shows it at the moment
/// of the read — under partition or pause, possibly no longer so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    /// The participant id (its node's data, or its key's value).
    pub id: String,
    /// Where it lives in the store: its node path (ZooKeeper) or its key
    /// (etcd).
    pub holder: String,
    /// Whether it is first in line: the leader.
    pub is_leader: bool,
}

/// Check a latch or selector participant id (`what` names which): it must
/// not be empty.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for an empty id.
pub fn validate_participant_id(what: &str, id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::invalid(format!(
            "a {what} participant id must not be empty; use e.g. the host name"
        )));
    }
    Ok(())
}

/// A store's side of a [`LeaderLatch`]: campaigns that run as tasks on the
/// client's runtime.
pub trait LatchBackend: Send + Sync + 'static {
    /// A won term, held until [`end`](LatchBackend::end).
    type Term: Send + 'static;

    /// The latch's name (path or election name).
    fn name(&self) -> &str;

    /// This participant's id.
    fn id(&self) -> &str;

    /// The runtime the latch's task runs on.
    fn runtime(&self) -> &Runtime;

    /// Campaign until this participant leads (`Some`), or until the
    /// campaign should start over (`None`). Dropping the future abandons the
    /// campaign; the store's entry is removed in the background.
    fn contend(&self) -> impl Future<Output = Result<Option<Self::Term>>> + Send + '_;

    /// The term's fencing token.
    fn token(term: &Self::Term) -> FencingToken;

    /// The term's loss signal.
    fn loss_signal(term: &Self::Term) -> LossSignal;

    /// End a term: delete its entry, retrying until that is done or the
    /// session is lost.
    fn end(term: Self::Term) -> impl Future<Output = ()> + Send;

    /// Every participant, first in line first.
    ///
    /// # Errors
    ///
    /// Backend errors.
    fn participants(&self) -> Result<Vec<Participant>>;

    /// How long [`LeaderLatch::close`] waits for the term to end.
    fn close_timeout(&self) -> Duration;
}

#[derive(Default)]
struct LatchState {
    started: bool,
    finished: bool,
    leading: Option<(FencingToken, LossSignal)>,
}

struct LatchInner<B> {
    backend: B,
    state: Mutex<LatchState>,
    changed: Condvar,
    events: (Sender<LatchEvent>, Receiver<LatchEvent>),
    // Fired by close and drop; the latch's task ends when it sees it.
    closing: LossTrigger,
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
pub struct LeaderLatch<B: LatchBackend> {
    inner: Arc<LatchInner<B>>,
}

impl<B: LatchBackend> LeaderLatch<B> {
    /// A latch over `backend`; call [`start`](LeaderLatch::start) to join.
    pub fn from_backend(backend: B) -> LeaderLatch<B> {
        LeaderLatch {
            inner: Arc::new(LatchInner {
                backend,
                state: Mutex::new(LatchState::default()),
                changed: Condvar::new(),
                events: crossbeam_channel::unbounded(),
                closing: LossTrigger::root(),
            }),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.inner.backend
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
        if !self.inner.backend.runtime().spawn(run(inner)) {
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
        self.inner.backend.id()
    }

    /// Every participant, first in line first (the first leads); a
    /// snapshot that may be stale by the time it is used.
    ///
    /// # Errors
    ///
    /// Backend errors.
    pub fn participants(&self) -> Result<Vec<Participant>> {
        self.inner.backend.participants()
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
    /// the entry is deleted — or the session is lost, which takes it.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] if that took longer than the backend allows (the
    /// entry is still deleted in the background, or goes with the session).
    pub fn close(&self) -> Result<()> {
        self.inner.closing.fire(LossReason::Closed);
        let timeout = self.inner.backend.close_timeout();
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

impl<B: LatchBackend> Drop for LeaderLatch<B> {
    fn drop(&mut self) {
        // Never blocks: the task sees it and deletes our entry.
        self.inner.closing.fire(LossReason::Closed);
    }
}

impl<B: LatchBackend> fmt::Debug for LeaderLatch<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderLatch")
            .field("name", &self.inner.backend.name())
            .field("id", &self.id())
            .field("leading", &self.has_leadership())
            .finish()
    }
}

fn leading(st: &LatchState) -> Option<(FencingToken, LossSignal)> {
    st.leading.clone().filter(|(_, lost)| !lost.is_lost())
}

impl<B: LatchBackend> LatchInner<B> {
    fn label(&self) -> String {
        format!("[{} id={}]", self.backend.name(), self.backend.id())
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
struct Finish<B: LatchBackend>(Arc<LatchInner<B>>);

impl<B: LatchBackend> Drop for Finish<B> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// The latch's life on the runtime: campaign, lead until loss, start over.
async fn run<B: LatchBackend>(inner: Arc<LatchInner<B>>) {
    let _finish = Finish(inner.clone());
    let closing = inner.closing.signal();
    let label = inner.label();
    let mut backoff = Backoff::RECOVER;
    loop {
        if closing.is_lost() {
            break;
        }
        let won = tokio::select! {
            r = inner.backend.contend() => r,
            _ = closing.fired() => break,
        };
        let term = match won {
            Ok(Some(term)) => term,
            Ok(None) => continue,
            Err(Error::Closed) => break,
            Err(e) => {
                log::warn!("{label} latch: {e}; campaigning again");
                tokio::select! {
                    () = backoff.pause() => {}
                    _ = closing.fired() => break,
                }
                continue;
            }
        };
        backoff.reset();
        let token = B::token(&term);
        let lost = B::loss_signal(&term);
        log::info!("{label} leadership gained (fence {token})");
        inner.set_leading(Some((token, lost.clone())));
        inner.emit(LatchEvent::Gained {
            token,
            lost: lost.clone(),
        });
        let ended = tokio::select! {
            reason = lost.fired() => Some(reason),
            _ = closing.fired() => None,
        };
        inner.set_leading(None);
        let reason = ended.unwrap_or(LossReason::Released);
        log::info!("{label} leadership lost: {reason}");
        inner.emit(LatchEvent::Lost { reason });
        B::end(term).await;
        if ended.is_none() {
            break;
        }
    }
}

/// A store's side of a [`LeaderSelector`]: waiting for leadership on the
/// selector's own thread.
pub trait SelectorBackend: Send + Sync + 'static {
    /// What the closure gets while leading: a held lock or leadership, with
    /// its fence, loss signal and fenced writes.
    type Guard: Send + 'static;

    /// The selector's name (path or election name).
    fn name(&self) -> &str;

    /// This participant's id.
    fn id(&self) -> &str;

    /// Block until leading (`Some`), or until `closing` fires (`None`).
    ///
    /// # Errors
    ///
    /// Backend errors; [`Error::Closed`] once the client is closed.
    fn contend(&self, closing: &LossSignal) -> Result<Option<Self::Guard>>;

    /// The trigger of the guard's loss signal (fired when the selector
    /// closes, to tell the closure to stop).
    fn trigger(guard: &Self::Guard) -> &LossTrigger;

    /// The guard's fencing token.
    fn token(guard: &Self::Guard) -> FencingToken;

    /// Give leadership up, waiting for the store.
    ///
    /// # Errors
    ///
    /// When the store did not confirm; the release goes on in the
    /// background (or the session's end takes it).
    fn release(guard: Self::Guard) -> Result<()>;

    /// Every participant, first in line first.
    ///
    /// # Errors
    ///
    /// Backend errors.
    fn participants(&self) -> Result<Vec<Participant>>;
}

/// Runs a closure while this participant leads.
///
/// The closure runs on the selector's own thread, never on the runtime. It
/// gets the held guard (fence, loss signal, fenced writes); when leadership
/// may be gone — or the selector is closed — the guard's loss signal fires
/// and the closure must stop. After it returns, leadership is given up and,
/// with `requeue`, the selector contends again with a new entry.
///
/// Two closures may run at once if a leader is paused past its lease: the
/// old one finds its loss signal fired when it resumes, and its writes
/// fenced with the guard's token are refused. Do not rely on the closure
/// having stopped; rely on the fence.
pub struct LeaderSelector<B: SelectorBackend> {
    backend: Arc<B>,
    closing: LossTrigger,
    // The current term's trigger, fired when the selector closes.
    term: Arc<Mutex<Option<LossTrigger>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl<B: SelectorBackend> LeaderSelector<B> {
    /// A selector over `backend`; call [`start`](LeaderSelector::start)
    /// with the closure to run while leading.
    pub fn from_backend(backend: B) -> LeaderSelector<B> {
        LeaderSelector {
            backend: Arc::new(backend),
            closing: LossTrigger::root(),
            term: Arc::new(Mutex::new(None)),
            thread: Mutex::new(None),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Start the selector's thread: contend, run `leader` with the held
    /// guard while leading, give leadership up when it returns, and contend
    /// again if `requeue`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if already started (or closed);
    /// [`Error::Backend`] if the thread cannot be spawned.
    pub fn start<F>(&self, requeue: bool, mut leader: F) -> Result<()>
    where
        F: FnMut(&B::Guard) + Send + 'static,
    {
        let mut thread = self.thread.lock();
        if thread.is_some() || self.closing.is_fired() {
            return Err(Error::invalid(
                "the selector is already started (or closed); make another one",
            ));
        }
        let (backend, term) = (self.backend.clone(), self.term.clone());
        let closing = self.closing.signal();
        let label = format!("[{} id={}]", backend.name(), backend.id());
        let mut backoff = Backoff::RECOVER;
        let spawned = std::thread::Builder::new()
            .name("recipes-selector".into())
            .spawn(move || loop {
                let guard = match backend.contend(&closing) {
                    Ok(Some(guard)) => guard,
                    Ok(None) | Err(Error::Closed) => return,
                    Err(e) => {
                        log::warn!("{label} selector: {e}; contending again");
                        if closing.wait_timeout(backoff.next_pause()).is_some() {
                            return;
                        }
                        continue;
                    }
                };
                backoff.reset();
                let trigger = B::trigger(&guard).clone();
                *term.lock() = Some(trigger.clone());
                // After publishing the trigger: a close from now on fires
                // it; one before is seen here.
                if closing.is_lost() {
                    trigger.fire(LossReason::Closed);
                }
                log::info!("{label} running as leader (fence {})", B::token(&guard));
                leader(&guard);
                *term.lock() = None;
                log::info!("{label} giving leadership up");
                if let Err(e) = B::release(guard) {
                    log::warn!("{label} release failed: {e}; retrying in the background");
                }
                if !requeue || closing.is_lost() {
                    return;
                }
            })
            .map_err(|e| Error::backend("cannot spawn the selector thread", false, e))?;
        *thread = Some(spawned);
        Ok(())
    }

    /// Whether the closure is running as leader now (reads the lease
    /// deadline).
    pub fn has_leadership(&self) -> bool {
        self.term
            .lock()
            .as_ref()
            .is_some_and(|t| !t.signal().is_lost())
    }

    /// This participant's id.
    pub fn id(&self) -> &str {
        self.backend.id()
    }

    /// Every participant, first in line first (the first leads).
    ///
    /// # Errors
    ///
    /// Backend errors.
    pub fn participants(&self) -> Result<Vec<Participant>> {
        self.backend.participants()
    }

    /// Stop: tell a running closure to stop (its guard's loss signal fires
    /// with [`LossReason::Closed`]), wait for it to return, give leadership
    /// up and stop contending. Blocks until the closure returns and the
    /// release is confirmed (or handed to the background after an error).
    pub fn close(&self) {
        self.stop();
        if let Some(thread) = self.thread.lock().take() {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }

    fn stop(&self) {
        self.closing.fire(LossReason::Closed);
        if let Some(t) = self.term.lock().as_ref() {
            t.fire(LossReason::Closed);
        }
    }
}

impl<B: SelectorBackend> Drop for LeaderSelector<B> {
    fn drop(&mut self) {
        // Tell the closure and the campaign to stop, without waiting.
        self.stop();
    }
}

impl<B: SelectorBackend> fmt::Debug for LeaderSelector<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderSelector")
            .field("name", &self.backend.name())
            .field("id", &self.backend.id())
            .field("leading", &self.has_leadership())
            .finish()
    }
}
