//! The lease deadline's tests.

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

/// A hook that panics on the deadline thread (a logger, a metrics
/// recorder) neither stops that thread nor keeps any other lease's loss
/// from firing, now or later.
#[test]
fn a_panicking_loss_hook_leaves_every_other_lease_firing_on_time() {
    let root = LossTrigger::root();
    let start = |ms| {
        let lease = SessionLease::start("t", &root, system_clock(), Duration::ZERO).unwrap();
        lease.acknowledged(BootInstant::now(), Duration::from_millis(ms));
        lease
    };
    let a = start(50);
    a.signal().on_fire(|_| panic!("a hook that panics"));
    let b = start(300);
    let fired = b.signal().receiver().recv_timeout(Duration::from_secs(5));
    assert_eq!(
        fired,
        Err(crossbeam_channel::RecvTimeoutError::Disconnected)
    );
    assert_eq!(a.signal().reason(), Some(LossReason::DeadlineExpired));
    let c = start(50);
    let fired = c.signal().receiver().recv_timeout(Duration::from_secs(5));
    assert_eq!(
        fired,
        Err(crossbeam_channel::RecvTimeoutError::Disconnected)
    );
}

/// Epochs due together are all marked fired before any of their hooks
/// runs: a hook that blocks (a logger on a full pipe) holds up no other
/// lease's signal.
#[test]
fn a_blocked_loss_hook_delays_no_other_lease_due_with_it() {
    let root = LossTrigger::root();
    let clock = ManualClock::new(at(0));
    let start = || {
        let lease = SessionLease::start("t", &root, clock.clone(), Duration::ZERO).unwrap();
        lease.acknowledged(at(0), Duration::from_secs(1));
        lease
    };
    let (a, b) = (start(), start());
    let (entered_tx, entered) = crossbeam_channel::bounded(1);
    let (go, go_rx) = crossbeam_channel::bounded::<()>(0);
    let hook = move |_| {
        let _ = entered_tx.send(());
        let _ = go_rx.recv_timeout(Duration::from_secs(30));
    };
    a.signal().on_fire(hook.clone());
    b.signal().on_fire(hook);
    clock.advance(Duration::from_secs(2));
    a.recheck();
    // One hook runs and blocks; both signals have fired all the same.
    entered.recv_timeout(Duration::from_secs(5)).unwrap();
    for lease in [&a, &b] {
        let fired = lease
            .signal()
            .receiver()
            .recv_timeout(Duration::from_secs(5));
        assert_eq!(
            fired,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        );
    }
    drop(go);
}

/// A clock whose next read runs a hook once, after reading: for a test
/// that needs time to pass, and another thread to look, at the instant the
/// code under test reads the clock.
struct HookClock {
    inner: Arc<ManualClock>,
    hook: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl fmt::Debug for HookClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookClock")
            .field("now", &self.inner.now())
            .finish()
    }
}

impl Clock for HookClock {
    fn now(&self) -> BootInstant {
        let now = self.inner.now();
        let hook = self.hook.lock().take();
        if let Some(hook) = hook {
            hook();
        }
        now
    }
}

#[test]
fn an_acknowledgement_racing_the_deadline_never_revives_a_lost_epoch() {
    let manual = ManualClock::new(at(0));
    let clock = Arc::new(HookClock {
        inner: manual.clone(),
        hook: Mutex::new(None),
    });
    let lease =
        SessionLease::start("t", &LossTrigger::root(), clock.clone(), Duration::ZERO).unwrap();
    lease.acknowledged(at(0), Duration::from_secs(1));
    let until = lease.valid_until().unwrap();
    manual.advance(until - at(0) - Duration::from_millis(1));
    // The acknowledgement of a renewal sent at 500 ms reads the clock 1 ms
    // before the deadline; right after that read the deadline passes and
    // another thread looks at the signal.
    let (seen_tx, seen) = crossbeam_channel::bounded(1);
    let (looked_tx, looked) = crossbeam_channel::bounded::<()>(1);
    let signal = lease.signal();
    let passes = manual.clone();
    *clock.hook.lock() = Some(Box::new(move || {
        passes.advance(Duration::from_millis(2));
        std::thread::spawn(move || {
            let _ = seen_tx.send(signal.is_lost());
            let _ = looked_tx.send(());
        });
        // The look may wait for the acknowledgement to finish: a bound,
        // not a synchronization.
        let _ = looked.recv_timeout(Duration::from_millis(200));
    }));
    lease.acknowledged(at(500), Duration::from_secs(1));
    let seen_lost = seen.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        !seen_lost || lease.is_lost(),
        "a thread saw the epoch lost, and a late acknowledgement revived it"
    );
}
