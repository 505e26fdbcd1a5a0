//! The leader selector: run a closure while this participant leads; stop
//! it when leadership may be gone, then give leadership up and, if asked,
//! queue again.

use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use super::{participants, validate_participant_id, Participant};
use crate::backend::{ElectionBackend, LeadershipLease};
use crate::backoff::Backoff;
use crate::election::Leadership;
use crate::error::{Error, Result};
use crate::loss::{LossReason, LossSignal, LossTrigger};
use crate::metrics::Labels;

/// Campaign until leading (`Some`) or until `closing` fires (`None`, once
/// our entry is removed), on the election's runtime.
fn contend<E: ElectionBackend>(
    election: &E,
    id: &str,
    closing: &LossSignal,
    labels: &Labels,
) -> Result<Option<Leadership<E::Leadership>>> {
    let campaign = election.campaign_async(id.as_bytes().to_vec(), None, Some(closing.clone()));
    let won = labels.timed(|| {
        election
            .runtime()
            .call_until("queue for leadership", None, campaign)
    })?;
    Ok(won.map(|lease| Leadership::counted(lease, labels)))
}

/// Runs a closure while this participant leads.
///
/// The closure runs on the selector's own thread, never on the runtime. It
/// gets the held [`Leadership`] (fence, loss signal, fenced writes); when leadership
/// may be gone — or the selector is closed — the guard's loss signal fires
/// and the closure must stop. After it returns, leadership is given up and,
/// with `requeue`, the selector contends again with a new entry.
///
/// # Under pause and partition
///
/// The same on every store. Guaranteed (clocks within 500 ppm): the
/// closure's loss signal fires before the store can expire the session and
/// let another participant lead, and fences strictly increase from one
/// closure run to the next, across participants. Not guaranteed: that only
/// one closure runs at a time — a leader paused past its lease resumes
/// inside its closure while another runs; it finds its loss signal fired,
/// and its writes fenced with the token (or through the leadership's
/// fenced writes) are refused. Do not rely on the closure having stopped;
/// rely on the fence.
pub struct LeaderSelector<E: ElectionBackend> {
    election: Arc<E>,
    id: Arc<str>,
    closing: LossTrigger,
    // The current term's trigger, fired when the selector closes.
    term: Arc<Mutex<Option<LossTrigger>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    labels: Labels,
}

impl<E: ElectionBackend> LeaderSelector<E> {
    /// A selector on `election` for the participant `id` (its campaign
    /// value); call [`start`](LeaderSelector::start) with the closure to run
    /// while leading.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty id.
    pub fn new(election: E, id: &str) -> Result<LeaderSelector<E>> {
        validate_participant_id("selector", id)?;
        let labels = Labels::new(election.runtime().store(), "selector", election.name())
            .with_participant(id);
        Ok(LeaderSelector {
            labels,
            election: Arc::new(election),
            id: id.into(),
            closing: LossTrigger::root(),
            term: Arc::new(Mutex::new(None)),
            thread: Mutex::new(None),
        })
    }

    /// Label this selector's metrics with the election's name too (names
    /// are unbounded, so they are no label by default).
    pub fn with_name_label(mut self) -> LeaderSelector<E> {
        self.labels = self.labels.clone().with_name_label();
        self
    }

    /// The election it campaigns in.
    pub fn election(&self) -> &E {
        &self.election
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
        F: FnMut(&Leadership<E::Leadership>) + Send + 'static,
    {
        let mut thread = self.thread.lock();
        if thread.is_some() || self.closing.is_fired() {
            return Err(Error::invalid(
                "the selector is already started (or closed); make another one",
            ));
        }
        let (election, id, term) = (self.election.clone(), self.id.clone(), self.term.clone());
        let (closing, labels) = (self.closing.signal(), self.labels.clone());
        let label = format!("[{} id={id}]", election.name());
        let mut backoff = Backoff::RECOVER;
        let spawned = std::thread::Builder::new()
            .name("recipes-selector".into())
            .spawn(move || loop {
                let guard = match contend(&*election, &id, &closing, &labels) {
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
                let trigger = guard.lease().trigger().clone();
                *term.lock() = Some(trigger.clone());
                // After publishing the trigger: a close from now on fires
                // it; one before is seen here, and the closure never runs
                // for a term won as the selector closed.
                let give_up = |guard: Leadership<E::Leadership>| {
                    *term.lock() = None;
                    log::info!("{label} giving leadership up");
                    if let Err(e) = guard.resign() {
                        log::warn!("{label} release failed: {e}; retrying in the background");
                    }
                };
                if closing.is_lost() {
                    trigger.fire(LossReason::Closed);
                    return give_up(guard);
                }
                log::info!("{label} running as leader (fence {})", guard.token());
                // A panic ends this term, not the selector: leadership is
                // given up as after a return, and contended for again with
                // `requeue` (as Curator requeues after an exception).
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    leader(&guard);
                }));
                if ran.is_err() {
                    log::error!("{label} the leader's closure panicked; giving leadership up");
                }
                give_up(guard);
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
        &self.id
    }

    /// Every participant, first in line first (the first leads).
    ///
    /// # Errors
    ///
    /// Backend errors.
    pub fn participants(&self) -> Result<Vec<Participant>> {
        participants(&*self.election)
    }

    /// Stop: tell a running closure to stop (its guard's loss signal fires
    /// with [`LossReason::Closed`]), wait for it to return, give leadership
    /// up and stop contending. Blocks until the closure returns and the
    /// release is confirmed (or handed to the background after an error);
    /// a selector still waiting in line returns once its entry is deleted
    /// (or its session is lost), so no one lists it after.
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

impl<E: ElectionBackend> Drop for LeaderSelector<E> {
    fn drop(&mut self) {
        // Tell the closure and the campaign to stop, without waiting.
        self.stop();
    }
}

impl<E: ElectionBackend> fmt::Debug for LeaderSelector<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderSelector")
            .field("name", &self.election.name())
            .field("id", &self.id)
            .field("leading", &self.has_leadership())
            .finish()
    }
}
