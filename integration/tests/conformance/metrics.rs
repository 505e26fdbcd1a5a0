//! The metrics of `recipes_core::metrics`, read back through a recording
//! recorder after a scripted sequence — acquire, contend, lose, release,
//! lead, resign, fail — the same on every store. The recorder is global
//! (losses fire on the deadline thread and the runtime's): one per test
//! process, and each test labels its recipes with their names.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use integration::{scale, wait_until};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use parking_lot::Mutex as PlMutex;
use recipes_core::metrics::{
    ACQUIRE_SECONDS, ERRORS, HOLD_SECONDS, LEADER, LEADERSHIP_TRANSITIONS, LEASE_MARGIN_SECONDS,
    LOSSES,
};
use recipes_core::{BootInstant, Client, Error};

use super::Kit;

/// Every value recorded so far: a snapshot drains histograms, so they are
/// kept here across snapshots.
pub(super) struct Recorded {
    snapshotter: Snapshotter,
    histograms: PlMutex<HashMap<String, Vec<f64>>>,
}

pub(super) fn recorded() -> &'static Recorded {
    static RECORDED: OnceLock<Recorded> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this process");
        Recorded {
            snapshotter,
            histograms: PlMutex::new(HashMap::new()),
        }
    })
}

/// `name{k=v,…}` with the labels sorted: one series.
fn series(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

/// The counters and gauges now, and every histogram value so far, by
/// series.
fn read() -> (HashMap<String, f64>, HashMap<String, Vec<f64>>) {
    let rec = recorded();
    let mut scalars = HashMap::new();
    let mut histograms = rec.histograms.lock();
    for (key, _, _, value) in rec.snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
        let id = series(key.name(), &labels);
        match value {
            DebugValue::Counter(n) => drop(scalars.insert(id, n as f64)),
            DebugValue::Gauge(g) => drop(scalars.insert(id, g.into_inner())),
            DebugValue::Histogram(values) => histograms
                .entry(id)
                .or_default()
                .extend(values.into_iter().map(|v| v.into_inner())),
        }
    }
    (scalars, histograms.clone())
}

/// Whether this test runs alone in its process (nextest runs each test in
/// a process of its own and says so in `NEXTEST_EXECUTION_MODE`; `cargo
/// test` runs a binary's tests as threads of one), so that series labelled
/// only by store are its own.
pub(super) fn alone_in_this_process() -> bool {
    std::env::var("NEXTEST_EXECUTION_MODE").is_ok_and(|m| m == "process-per-test")
}

pub(super) fn scalar(name: &str, labels: &[(&str, &str)]) -> f64 {
    read().0.get(&series(name, labels)).copied().unwrap_or(0.0)
}

fn observations(name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    read()
        .1
        .get(&series(name, labels))
        .cloned()
        .unwrap_or_default()
}

/// A mutex acquired, contended (a timeout), lost (its entry deleted),
/// acquired by the other client and released; a read-write lock read and
/// written; an election led and resigned; a latch led and closed; a call
/// after close: each shows in the metrics with the labels the docs' table
/// gives.
pub fn metrics_follow_a_scripted_sequence<K: Kit>(kit: &K) {
    recorded();
    let lease = Duration::from_secs(2);
    let (a, b) = (kit.connect(lease).unwrap(), kit.connect(lease).unwrap());
    let store = a.store();
    let name = super::name("metrics");
    let (ma, mb) = (
        a.mutex(&name).unwrap().with_name_label(),
        b.mutex(&name).unwrap().with_name_label(),
    );
    let of = |extra: &[(&'static str, &'static str)]| {
        let mut labels = vec![
            ("store", store),
            ("recipe", "mutex"),
            ("name", name.as_str()),
        ];
        labels.extend_from_slice(extra);
        labels
    };

    let held = ma.try_lock().unwrap().expect("a free lock");
    assert!(mb
        .try_lock_for(Duration::from_millis(200))
        .unwrap()
        .is_none());
    kit.delete_entry(held.holder());
    wait_until(
        "the deleted holder's loss",
        scale(Duration::from_secs(10)),
        || held.is_lost(),
    );
    wait_until("the loss counted", scale(Duration::from_secs(5)), || {
        scalar(LOSSES, &of(&[("reason", "deleted")])) == 1.0
    });
    drop(held);
    let second = mb.try_lock_for(scale(Duration::from_secs(10))).unwrap();
    second
        .expect("the lock, once the first entry is gone")
        .release()
        .unwrap();

    let acquired = observations(ACQUIRE_SECONDS, &of(&[("outcome", "acquired")]));
    let timed_out = observations(ACQUIRE_SECONDS, &of(&[("outcome", "timed_out")]));
    assert_eq!(acquired.len(), 2, "two acquisitions: {acquired:?}");
    assert_eq!(timed_out.len(), 1, "one timed-out try: {timed_out:?}");
    assert!(timed_out[0] >= 0.2, "it waited its 200 ms: {timed_out:?}");
    assert_eq!(
        observations(HOLD_SECONDS, &of(&[])).len(),
        2,
        "two holdings ended"
    );
    assert_eq!(
        scalar(LOSSES, &of(&[("reason", "released")])),
        0.0,
        "a release is no loss"
    );

    // A read-write lock's sides are recipes of their own.
    let rw_name = super::name("metrics-rw");
    let rw = a.rw_lock(&rw_name).unwrap().with_name_label();
    rw.read().unwrap().release().unwrap();
    rw.write().unwrap().release().unwrap();
    for side in ["read_lock", "write_lock"] {
        let of_side = [
            ("store", store),
            ("recipe", side),
            ("name", rw_name.as_str()),
        ];
        let won = [&of_side[..], &[("outcome", "acquired")][..]].concat();
        assert_eq!(
            observations(ACQUIRE_SECONDS, &won).len(),
            1,
            "{side} taken once"
        );
        assert_eq!(
            observations(HOLD_SECONDS, &of_side).len(),
            1,
            "{side} held once"
        );
    }

    let election = super::name("metrics-election");
    let e = a.election(&election).unwrap().with_name_label();
    let led = [
        ("store", store),
        ("recipe", "election"),
        ("name", election.as_str()),
    ];
    let term = e.campaign(b"a").unwrap();
    assert_eq!(scalar(LEADER, &led), 1.0, "leading");
    assert_eq!(scalar(LEADERSHIP_TRANSITIONS, &led), 1.0);
    term.resign().unwrap();
    assert_eq!(scalar(LEADER, &led), 0.0, "no longer leading");
    assert_eq!(scalar(LEADERSHIP_TRANSITIONS, &led), 2.0);

    let latched = super::name("metrics-latch");
    let latch = a.leader_latch(&latched, "p1").unwrap().with_name_label();
    let of_latch = [
        ("store", store),
        ("recipe", "latch"),
        ("name", latched.as_str()),
    ];
    latch.start();
    assert!(latch.await_leadership(scale(Duration::from_secs(10))));
    wait_until("the latch's gauge", scale(Duration::from_secs(5)), || {
        scalar(LEADER, &of_latch) == 1.0
    });
    latch.close().unwrap();
    assert_eq!(
        scalar(LEADER, &of_latch),
        0.0,
        "the closed latch leads no more"
    );
    let latch_won = [("outcome", "acquired")];
    let waits = observations(ACQUIRE_SECONDS, &[&of_latch[..], &latch_won[..]].concat());
    assert_eq!(waits.len(), 1, "one term won: {waits:?}");

    // The margin's only label is the store: under plain `cargo test` the
    // other tests of this process record theirs too, with their own
    // leases; under nextest this test is alone in its process.
    let margins = observations(LEASE_MARGIN_SECONDS, &[("store", store)]);
    let granted = a.granted_ttl().max(b.granted_ttl()).as_secs_f64();
    let within = |m: &f64| (0.0..=granted).contains(m);
    assert!(!margins.is_empty(), "renewals leave a margin");
    assert!(margins.iter().all(|m| *m >= 0.0), "{margins:?}");
    if alone_in_this_process() {
        assert!(
            margins.iter().all(within),
            "margins within the granted lease ({granted} s): {margins:?}"
        );
    } else {
        assert!(margins.iter().any(within), "ours: {margins:?}");
    }
    for c in [&a, &b] {
        let left = c
            .valid_until()
            .map(|t| t.saturating_duration_since(BootInstant::now()));
        assert!(
            left.is_some_and(|l| l.as_secs_f64() <= granted),
            "{left:?} left of {granted} s"
        );
    }

    let closed = [("store", store), ("kind", "closed")];
    let before = scalar(ERRORS, &closed);
    a.close().unwrap();
    assert!(matches!(ma.try_lock(), Err(Error::Closed)));
    assert!(scalar(ERRORS, &closed) > before, "the failed call counted");
    b.close().unwrap();
}
