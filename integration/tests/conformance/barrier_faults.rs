//! A double barrier across OS processes (the worker), on every store: one
//! member killed during enter leaves with its session and the others wait
//! for a full count of live members; one killed while the others leave
//! holds their leave only until its entry goes with its session; a
//! barrier tied to a setter that is killed goes down within its lease,
//! a plain one stays.

use std::time::Duration;

use integration::test_dir::TestDir;
use integration::worker::{worker_binary, Worker};
use integration::{scale, wait_until};
use recipes_core::Client;

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

/// A worker sets a barrier tied to its session and a plain one, and is
/// killed: our waiter on the tied one goes through within the lease (never
/// before the kill), the plain one stays up.
pub fn a_tied_barrier_falls_within_the_lease_of_its_killed_setter<K: Kit>(kit: &K, ttl: Duration) {
    let (tied, plain) = (name("tied-killed"), name("plain-killed"));
    let dir = TestDir::new("tied-killed");
    let mut setter = Worker::start(&worker_binary(), "setter", dir.path());
    setter.ok(&kit.worker_connect(ttl), Duration::from_secs(15));
    setter.ok(&format!("barrier-set {tied} tied"), Duration::from_secs(10));
    setter.ok(&format!("barrier-set {plain}"), Duration::from_secs(10));
    let client = kit.connect(ttl).expect("connect");
    let barrier = client.barrier(&tied).unwrap();
    assert!(
        !barrier.wait_timeout(Duration::from_millis(100)).unwrap(),
        "tied: up while its setter lives"
    );
    let waiter = std::thread::spawn(move || {
        let down = barrier
            .wait_timeout(scale(Duration::from_secs(60)))
            .unwrap();
        (down, std::time::Instant::now())
    });
    let killed_at = std::time::Instant::now();
    setter.kill();
    let (down, at) = waiter.join().unwrap();
    assert!(down, "the tied barrier fell");
    let bound = kit.granted(ttl) + kit.expiry_granularity() + Duration::from_secs(2);
    assert!(
        at >= killed_at && at - killed_at <= scale(bound),
        "fell {:?} after the kill; the lease is {:?}",
        at - killed_at,
        kit.granted(ttl)
    );
    let p = client.barrier(&plain).unwrap();
    assert!(
        !p.wait_timeout(Duration::from_millis(100)).unwrap(),
        "plain: stays"
    );
    p.remove().unwrap();
}
