//! A session's lease: its local deadline, the thread that fires loss when the
//! deadline passes, and the loss policy.

use std::fmt;
use std::sync::{Arc, OnceLock};
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
    /// The process's watcher, its thread started on first use.
    fn get() -> Result<&'static Watcher> {
        static WATCHER: OnceLock<std::result::Result<&'static Watcher, String>> = OnceLock::new();
        let watcher = WATCHER.get_or_init(|| {
            let watcher: &'static Watcher = Box::leak(Box::new(Watcher {
                epochs: Mutex::new(Vec::new()),
                wake: Condvar::new(),
            }));
            std::thread::Builder::new()
                .name("recipes-deadline".into())
                .spawn(move || watcher.run())
                .map(|_| watcher)
                .map_err(|e| e.to_string())
        });
        watcher.clone().map_err(|e| {
            let e = std::io::Error::other(e);
            Error::backend("cannot spawn the lease deadline thread", false, e)
        })
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
                for trigger in due {
                    trigger.fire(LossReason::DeadlineExpired);
                }
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
            let now = w.lease.clock.now();
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
        if self.trigger.is_fired() || self.shared.expired() {
            return false;
        }
        let updated = self.shared.tracker.lock().acknowledged(sent_at, granted);
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
mod tests {
    use super::*;
    use crate::clock::{system_clock, Clock, ManualClock};

    fn at(ms: u64) -> BootInstant {
        BootInstant::from_since_boot(Duration::from_millis(ms))
    }

    #[test]
    fn the_deadline_thread_fires_when_valid_until_passes() {
        let root = LossTrigger::root();
        let lease = SessionLease::start("t", &root, system_clock(), Duration::ZERO).unwrap();
        let sent = BootInstant::now();
        lease.acknowledged(sent, Duration::from_millis(300));
        let sig = lease.signal();
        assert!(!sig.is_lost());
        // Wait on the channel alone: the thread must fire it.
        let fired = sig.receiver().recv_timeout(Duration::from_secs(5));
        assert!(fired.is_err(), "disconnected = fired");
        let lost_at = BootInstant::now();
        assert_eq!(sig.reason(), Some(LossReason::DeadlineExpired));
        // Never before the deadline (a lower bound: not scaled).
        assert!(
            lost_at >= sent + Duration::from_millis(299),
            "{lost_at:?} vs {sent:?}"
        );
        assert!(
            !root.is_fired(),
            "a session's loss does not close the client"
        );
    }

    #[test]
    fn acknowledgements_push_the_deadline_and_late_ones_are_ignored() {
        let clock = ManualClock::new(at(1000));
        let root = LossTrigger::root();
        let lease = SessionLease::start("t", &root, clock.clone(), Duration::ZERO).unwrap();
        assert!(lease.acknowledged(at(1000), Duration::from_secs(2)));
        clock.advance(Duration::from_millis(1500));
        assert!(lease.acknowledged(at(2400), Duration::from_secs(2)));
        assert!(!lease.acknowledged(at(2000), Duration::from_secs(2)));
        assert_eq!(lease.valid_until(), Some(at(4398)));
        clock.advance(Duration::from_millis(1800)); // now 4300
        assert!(!lease.is_lost());
        clock.advance(Duration::from_millis(100)); // now 4400
        assert!(lease.is_lost());
    }

    #[test]
    fn a_paused_thread_sees_loss_before_the_deadline_thread_runs() {
        // Simulate a process pause: the clock jumps past the deadline and the
        // user's thread reads the signal before any deadline thread has run.
        // Here no deadline thread exists at all, so only the clock read in
        // `is_lost` can report the loss.
        let clock = ManualClock::new(at(0));
        let shared = Arc::new(LeaseClock {
            clock: clock.clone(),
            tracker: Mutex::new(DeadlineTracker::new(Duration::ZERO)),
        });
        let session = LossTrigger::with_lease(&LossTrigger::root(), shared.clone());
        shared
            .tracker
            .lock()
            .acknowledged(at(0), Duration::from_secs(10));
        let guard = session.child().signal();
        assert!(!guard.is_lost());
        clock.advance(Duration::from_secs(11));
        assert!(!session.is_fired(), "nothing fired the signal");
        assert!(guard.is_lost());
        assert_eq!(guard.reason(), Some(LossReason::DeadlineExpired));
        assert_eq!(
            guard.wait_timeout(Duration::ZERO),
            Some(LossReason::DeadlineExpired)
        );
    }

    #[test]
    fn a_stalled_clock_read_before_sending_only_makes_us_more_careful() {
        // The heartbeat thread read the send time, then stalled 3 s before the
        // request left. The deadline is anchored at the early reading: the
        // server's timer restarted later than we assume, never earlier.
        let clock = ManualClock::new(at(10_000));
        let lease =
            SessionLease::start("t", &LossTrigger::root(), clock.clone(), Duration::ZERO).unwrap();
        let sent_at = clock.now();
        clock.advance(Duration::from_secs(3)); // the stall
        lease.acknowledged(sent_at, Duration::from_secs(5));
        assert_eq!(lease.valid_until(), Some(at(14_995)));
        clock.advance(Duration::from_millis(1995));
        assert!(
            lease.is_lost(),
            "lost 5 s after the early reading, not after the send"
        );
    }

    #[test]
    fn an_epoch_once_lost_stays_lost() {
        let clock = ManualClock::new(at(0));
        let lease =
            SessionLease::start("t", &LossTrigger::root(), clock.clone(), Duration::ZERO).unwrap();
        lease.acknowledged(at(0), Duration::from_secs(1));
        clock.advance(Duration::from_secs(2));
        assert!(lease.is_lost());
        assert!(!lease.acknowledged(clock.now(), Duration::from_secs(10)));
        assert!(lease.is_lost());
    }

    #[test]
    fn closing_the_parent_fires_the_session_and_its_guards() {
        let root = LossTrigger::root();
        let lease = SessionLease::start("t", &root, system_clock(), Duration::ZERO).unwrap();
        lease.acknowledged(BootInstant::now(), Duration::from_secs(60));
        let guard = lease.trigger().child().signal();
        root.fire(LossReason::Closed);
        assert_eq!(
            guard.wait_timeout(Duration::from_secs(5)),
            Some(LossReason::Closed)
        );
        assert!(guard.valid_until().unwrap() <= BootInstant::now());
    }

    /// Threads of this process (0 where `/proc` does not say).
    fn threads() -> usize {
        std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
    }

    #[test]
    fn many_epochs_share_one_deadline_thread_and_each_fires_at_its_own_deadline() {
        let root = LossTrigger::root();
        let (started, threads_before) = (BootInstant::now(), threads());
        let leases: Vec<_> = (0..40u64)
            .map(|i| {
                let lease = SessionLease::start("t", &root, system_clock(), Duration::ZERO);
                let lease = lease.unwrap();
                // Every fourth one far off: it must not fire.
                let ttl = if i % 4 == 3 { 600_000 } else { 50 + 10 * i };
                lease.acknowledged(started, Duration::from_millis(ttl));
                (lease, ttl)
            })
            .collect();
        // One thread for them all (the first epoch of this process starts
        // it), not one each.
        assert!(threads() <= threads_before + 1, "{} threads", threads());
        for (lease, ttl) in &leases {
            if *ttl > 60_000 {
                continue;
            }
            let fired = lease
                .signal()
                .receiver()
                .recv_timeout(Duration::from_secs(10));
            assert!(fired.is_err(), "disconnected = fired");
            let lost_at = BootInstant::now();
            assert_eq!(lease.signal().reason(), Some(LossReason::DeadlineExpired));
            // Never before its own deadline (a lower bound: not scaled).
            let deadline = lease.valid_until().unwrap();
            assert!(lost_at >= deadline, "{lost_at:?} before {deadline:?}");
        }
        for (lease, ttl) in &leases {
            assert_eq!(lease.is_lost(), *ttl < 60_000);
        }
    }

    #[test]
    fn a_shorter_grant_brings_the_deadline_in_and_it_fires_there() {
        let lease =
            SessionLease::start("t", &LossTrigger::root(), system_clock(), Duration::ZERO).unwrap();
        lease.acknowledged(BootInstant::now(), Duration::from_secs(600));
        let sig = lease.signal();
        // Let the thread go to sleep on the far deadline first.
        let asleep = sig.receiver().recv_timeout(Duration::from_millis(50));
        assert!(matches!(
            asleep,
            Err(crossbeam_channel::RecvTimeoutError::Timeout)
        ));
        lease.acknowledged(BootInstant::now(), Duration::from_millis(100));
        // Fired by the thread (the channel disconnects), long before the
        // far deadline: at the nearer one. (The wake-up the acknowledgement
        // sends only makes it prompt: the thread's own look, every
        // `MAX_NAP`, would find it too; no bound here tells the two apart.)
        let fired = sig.receiver().recv_timeout(Duration::from_secs(60));
        assert!(fired.is_err(), "disconnected = fired");
        assert_eq!(sig.reason(), Some(LossReason::DeadlineExpired));
    }

    #[test]
    fn dropping_the_lease_fires_closed() {
        let lease =
            SessionLease::start("t", &LossTrigger::root(), system_clock(), Duration::ZERO).unwrap();
        let sig = lease.signal();
        drop(lease);
        assert_eq!(sig.reason(), Some(LossReason::Closed));
    }
}
