//! A session's lease: its local deadline, the thread that fires loss when the
//! deadline passes, and the loss policy.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::clock::{BootInstant, SharedClock};
use crate::deadline::DeadlineTracker;
use crate::error::{Error, Result};
use crate::loss::{LossReason, LossSignal, LossTrigger};

/// What a dropped connection means for the locks a session holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LossPolicy {
    /// Ride out disconnects shorter than the lease deadline: a lock is lost
    /// only when the deadline passes without an acknowledgement, or the
    /// server says it is gone. A ZooKeeper leader election disconnects every
    /// client for a fraction of a second; this keeps the fleet's locks.
    #[default]
    Deadline,
    /// Any disconnect is loss (Curator's standard connection-state policy).
    OnDisconnect,
}

/// Internal state shared by a [`SessionLease`], the deadline thread and every
/// loss signal derived from it.
pub(crate) struct LeaseClock {
    clock: SharedClock,
    tracker: Mutex<DeadlineTracker>,
}

impl LeaseClock {
    pub(crate) fn now(&self) -> BootInstant {
        self.clock.now()
    }

    pub(crate) fn valid_until(&self) -> Option<BootInstant> {
        self.tracker.lock().valid_until()
    }

    pub(crate) fn expired(&self) -> bool {
        let now = self.clock.now();
        self.tracker.lock().expired_at(now)
    }
}

/// The deadline thread re-reads the clock at least this often, so a host
/// suspend (which stops std's monotonic timers but not the boot clock)
/// delays the signal by no more than this.
const MAX_NAP: Duration = Duration::from_millis(100);

/// One epoch of a session's validity: fed acknowledgements, it keeps the
/// local lease deadline and fires its loss signal when the deadline passes.
///
/// A small dedicated thread does the firing, never a runtime: a busy or
/// stalled runtime must not delay a loss. It is the process's one deadline
/// thread (`Watcher`), which watches every epoch: an epoch costs no thread
/// of its own to start or to end (session mode on PostgreSQL starts one per
/// acquisition). Once fired, an epoch stays lost; a backend that carries on
/// starts a new `SessionLease` (and new lock nodes or keys) — it never
/// regains a lease on old ones.
pub struct SessionLease {
    shared: Arc<LeaseClock>,
    trigger: LossTrigger,
    watcher: &'static Watcher,
}

/// The process's deadline thread and the epochs it watches: it sleeps until
/// the nearest deadline (at most [`MAX_NAP`]), fires every epoch whose
/// deadline passed, and forgets the ended ones. Whoever changes what it
/// must see (a new epoch, an acknowledgement, a clock to re-read, an end)
/// takes `epochs`' lock before waking it, so no wake-up falls between its
/// look and its sleep.
struct Watcher {
    epochs: Mutex<Vec<Watched>>,
    wake: Condvar,
}

struct Watched {
    lease: Arc<LeaseClock>,
    trigger: LossTrigger,
}

impl Watcher {
    /// The process's watcher, its thread started on first use (tried
    /// again on the next use when the spawn failed).
    fn get() -> Result<&'static Watcher> {
        static WATCHER: Mutex<Option<&'static Watcher>> = Mutex::new(None);
        let mut slot = WATCHER.lock();
        if let Some(watcher) = *slot {
            return Ok(watcher);
        }
        let watcher: &'static Watcher = Box::leak(Box::new(Watcher {
            epochs: Mutex::new(Vec::new()),
            wake: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("recipes-deadline".into())
            .spawn(move || watcher.keep_running())
            .map_err(|e| Error::backend("cannot spawn the lease deadline thread", false, e))?;
        *slot = Some(watcher);
        Ok(watcher)
    }

    /// [`run`](Self::run), again after a panic: every lease's loss rides
    /// on this one thread. (A hook that panics is caught where it runs,
    /// in the signal; this is for anything else.)
    fn keep_running(&self) {
        loop {
            let run = std::panic::AssertUnwindSafe(|| self.run());
            if std::panic::catch_unwind(run).is_err() {
                log::error!("the lease deadline thread panicked; it goes on watching");
            }
        }
    }

    /// Wake the thread to look again (see [`Watcher`]).
    fn look_again(&self) {
        drop(self.epochs.lock());
        self.wake.notify_all();
    }

    fn run(&self) {
        log::trace!("lease deadline thread started");
        let mut epochs = self.epochs.lock();
        loop {
            let (nap, due) = Self::look(&mut epochs);
            if due.is_empty() {
                // With no epoch to watch, asleep until one starts.
                if epochs.is_empty() {
                    self.wake.wait(&mut epochs);
                } else {
                    self.wake.wait_for(&mut epochs, nap);
                }
                continue;
            }
            // Fired unlocked: a trigger's hooks and children run here.
            MutexGuard::unlocked(&mut epochs, || {
                LossTrigger::fire_all(&due, LossReason::DeadlineExpired);
            });
        }
    }

    /// Drop the ended epochs and take out those past their deadline (to
    /// fire); how long to sleep until the nearest other deadline.
    fn look(epochs: &mut Vec<Watched>) -> (Duration, Vec<LossTrigger>) {
        let mut nap = MAX_NAP;
        let mut due = Vec::new();
        epochs.retain(|w| {
            // An ended epoch's trigger has fired (`Closed`, on drop).
            if w.trigger.is_fired() {
                return false;
            }
            let tracker = w.lease.tracker.lock();
            // A clock that panics tells no time: the lease may be gone.
            let read = std::panic::AssertUnwindSafe(|| w.lease.clock.now());
            let Ok(now) = std::panic::catch_unwind(read) else {
                log::error!("a lease clock panicked: its epoch is taken as lost");
                due.push(w.trigger.clone());
                return false;
            };
            match tracker.valid_until() {
                Some(v) if now >= v => {
                    due.push(w.trigger.clone());
                    false
                }
                Some(v) => {
                    nap = nap.min(v - now);
                    true
                }
                None => true,
            }
        });
        (nap, due)
    }
}

impl SessionLease {
    /// Start an epoch whose signal is a child of `parent` (so closing the
    /// client fires it), reading `clock`, with `slack` on top of the
    /// clock-drift margin.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] if the deadline thread cannot be spawned.
    pub fn start(
        name: &str,
        parent: &LossTrigger,
        clock: SharedClock,
        slack: Duration,
    ) -> Result<SessionLease> {
        let watcher = Watcher::get()?;
        let shared = Arc::new(LeaseClock {
            clock,
            tracker: Mutex::new(DeadlineTracker::new(slack)),
        });
        let trigger = LossTrigger::with_lease(parent, shared.clone());
        log::trace!("[{name}] lease epoch started");
        watcher.epochs.lock().push(Watched {
            lease: shared.clone(),
            trigger: trigger.clone(),
        });
        watcher.wake.notify_all();
        Ok(SessionLease {
            shared,
            trigger,
            watcher,
        })
    }

    /// Record that the request sent at `sent_at` was acknowledged with a
    /// lease of `granted`; see [`DeadlineTracker::acknowledged`]. Ignored
    /// once the epoch is lost.
    pub fn acknowledged(&self, sent_at: BootInstant, granted: Duration) -> bool {
        if self.trigger.is_fired() {
            return false;
        }
        let updated = {
            // The clock is read under the tracker's lock: a reader that saw
            // the deadline pass read it before we did, so we see it passed
            // too, and a lost epoch never comes back.
            let mut tracker = self.shared.tracker.lock();
            if tracker.expired_at(self.shared.now()) {
                return false;
            }
            tracker.acknowledged(sent_at, granted)
        };
        // A later deadline needs no look; an earlier one (a shorter grant)
        // does. Acknowledgements come at renewals: always look.
        self.watcher.look_again();
        if let Some(until) = self.shared.valid_until() {
            let margin = until.saturating_duration_since(self.shared.now());
            crate::metrics::lease_margin(self.trigger.store(), margin);
        }
        updated
    }

    /// The local lease deadline.
    pub fn valid_until(&self) -> Option<BootInstant> {
        self.shared.valid_until()
    }

    /// The lease length granted by the newest acknowledgement.
    pub fn granted(&self) -> Option<Duration> {
        self.shared.tracker.lock().granted()
    }

    /// Send time of the newest acknowledged request.
    pub fn last_acknowledged_send(&self) -> Option<BootInstant> {
        self.shared.tracker.lock().last_acknowledged_send()
    }

    /// The clock this lease reads.
    pub fn now(&self) -> BootInstant {
        self.shared.now()
    }

    /// Fire the loss signal now (the server said the lease is gone).
    pub fn fire(&self, reason: LossReason) -> bool {
        self.trigger.fire(reason)
    }

    /// Whether this epoch is lost (fired, or past its deadline).
    pub fn is_lost(&self) -> bool {
        self.trigger.signal().is_lost()
    }

    /// The epoch's loss signal.
    pub fn signal(&self) -> LossSignal {
        self.trigger.signal()
    }

    /// The epoch's trigger, to derive per-guard triggers with
    /// [`LossTrigger::child`].
    pub fn trigger(&self) -> &LossTrigger {
        &self.trigger
    }

    /// Make the deadline thread read the clock now (for clocks that jump,
    /// such as [`ManualClock`](crate::store::ManualClock)).
    pub fn recheck(&self) {
        self.watcher.look_again();
    }
}

impl Drop for SessionLease {
    fn drop(&mut self) {
        self.trigger.fire(LossReason::Closed);
        // Forgotten at the thread's next look: no wake-up needed.
    }
}

impl fmt::Debug for SessionLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLease")
            .field("valid_until", &self.valid_until())
            .field("lost", &self.trigger.signal().reason())
            .finish()
    }
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
