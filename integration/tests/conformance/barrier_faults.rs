//! A double barrier across OS processes (the worker), on every store: one
//! member killed during enter leaves with its session and the others wait
//! for a full count of live members; one killed while the others leave
//! holds their leave only until its entry goes with its session.

use std::time::Duration;

use integration::test_dir::TestDir;
use integration::worker::{worker_binary, Worker};
use integration::{scale, wait_until};

use super::{name, Kit};

/// The members' entries under `n` (the flag, where it is one, left out).
fn members<K: Kit>(kit: &K, n: &str) -> Vec<String> {
    let mut all = kit.entries_under(n);
    all.retain(|e| !e.ends_with("/ready"));
    all
}

/// Five worker processes, count 4: A, B and C enter, A is killed; B and C
/// stay in enter (two live members) until D and E make four, then all
/// four pass. B, C and D leave while E stays; none of their leaves ends
/// while E's entry is there; E is killed and their leaves end within its
/// lease. Nothing is left.
pub fn a_double_barrier_outlives_a_member_killed_in_enter_and_one_in_leave<K: Kit>(
    kit: &K,
    ttl: Duration,
) {
    let n = name("double-procs");
    let dir = TestDir::new("double-procs");
    let granted = kit.granted(ttl);
    let bound = granted + kit.expiry_granularity() + Duration::from_secs(10);
    let mut w: Vec<Worker> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|label| {
            let mut worker = Worker::start(&worker_binary(), label, dir.path());
            worker.ok(&kit.worker_connect(ttl), Duration::from_secs(15));
            worker
        })
        .collect();
    let enter = format!("double-barrier {n} 4");
    for m in &mut w[..3] {
        m.send(&enter);
    }
    wait_until("A, B and C in", scale(Duration::from_secs(20)), || {
        members(kit, &n).len() == 3
    });
    w[0].kill();
    wait_until("A's entry gone with its session", scale(bound), || {
        members(kit, &n).len() == 2
    });
    for (i, m) in w[1..3].iter_mut().enumerate() {
        assert!(m.try_reply().is_none(), "member {i} entered with A dead");
    }
    for m in &mut w[3..] {
        m.send(&enter);
    }
    for m in &mut w[1..] {
        assert_eq!(m.reply(bound), Ok(String::new()), "entered{}", m.log_tail());
    }

    for m in &mut w[1..4] {
        m.send("leave");
    }
    wait_until(
        "only E's entry is left",
        scale(Duration::from_secs(20)),
        || members(kit, &n).len() == 1,
    );
    for m in &mut w[1..4] {
        assert!(m.try_reply().is_none(), "a leave ended with E still in");
    }
    w[4].kill();
    for m in &mut w[1..4] {
        assert_eq!(m.reply(bound), Ok(String::new()), "left{}", m.log_tail());
    }
    wait_until("nothing left", scale(Duration::from_secs(10)), || {
        members(kit, &n).is_empty()
    });
}
