//! The shared counter and the count-down latch, the same on every store:
//! no add lost under contention between processes, compare-and-set by
//! version, a watch that accounts for every change, bad input refused with
//! nothing written.

use std::time::{Duration, Instant};

use integration::scale;
use integration::test_dir::TestDir;
use integration::worker::{worker_binary, Worker};
use recipes_core::{Client, Versioned};

use super::{field, invalid, name, Kit};

/// `processes` worker processes each `add(1)` `adds` times to one counter:
/// it ends at exactly `processes × adds`, at that version (one write per
/// add), and is gone once deleted.
pub fn processes_add_without_losing_one<K: Kit>(kit: &K, processes: usize, adds: usize) {
    let name = name("counter-add");
    let dir = TestDir::new("counter-add");
    let threads: Vec<_> = (0..processes)
        .map(|i| {
            let mut w = Worker::start(&worker_binary(), &format!("add{i}"), dir.path());
            w.ok(
                &kit.worker_connect(Duration::from_secs(10)),
                Duration::from_secs(15),
            );
            let name = name.clone();
            std::thread::spawn(move || {
                let reply = w.ok(
                    &format!("count-add {name} {adds}"),
                    Duration::from_secs(300),
                );
                field(&reply, "conflicts")
                    .parse::<u64>()
                    .expect("conflicts")
            })
        })
        .collect();
    let conflicts: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let client = kit.connect(Duration::from_secs(10)).expect("connect");
    let counter = client.counter(&name).unwrap();
    let total = (processes * adds) as i64;
    assert_eq!(
        counter.get().unwrap(),
        Versioned {
            value: total,
            version: total as u64
        },
        "{processes} processes × {adds} adds ({conflicts} conflicts retried)"
    );
    assert!(counter.delete().unwrap());
    assert_eq!(counter.get().unwrap().version, 0);
    assert!(kit.entries_under(&name).is_empty(), "nothing left");
}

/// `set_if` by version, `set`, `add` with a negative delta, the 64-bit
/// kind, and a watch that sees every write or counts the ones it missed.
pub fn compare_and_set_by_version_and_watch<K: Kit>(kit: &K) {
    let client = kit.connect(Duration::from_secs(10)).expect("connect");
    let name = name("counter-cas");
    let c = client.counter(&name).unwrap();
    assert_eq!(
        c.get().unwrap(),
        Versioned {
            value: 0,
            version: 0
        }
    );
    assert!(c.set_if(0, 5).unwrap(), "creates");
    assert!(!c.set_if(0, 6).unwrap(), "already exists");
    assert!(!c.set_if(7, 6).unwrap(), "a stale version");
    assert_eq!(
        c.get().unwrap(),
        Versioned {
            value: 5,
            version: 1
        }
    );
    assert_eq!(c.add(-3).unwrap(), 2);
    assert_eq!(
        c.set(40).unwrap(),
        Versioned {
            value: 40,
            version: 3
        }
    );

    let mut watch = c.watch().unwrap();
    let writer = {
        let c = client.counter(&name).unwrap();
        std::thread::spawn(move || {
            for _ in 0..20 {
                c.add(1).unwrap();
            }
        })
    };
    let (mut seen, mut missed) = (0, 0);
    let deadline = Instant::now() + scale(Duration::from_secs(30));
    while watch.last().value < 60 {
        assert!(Instant::now() < deadline, "the watch saw {seen} changes");
        let Some(change) = watch.next_timeout(Duration::from_secs(5)).unwrap() else {
            continue;
        };
        assert!(!change.restarted);
        seen += 1;
        missed += change.missed;
    }
    writer.join().unwrap();
    assert_eq!(seen + missed, 20, "every write seen or counted as missed");
    assert_eq!(watch.last().version, 23);
    assert_eq!(
        watch.next_timeout(Duration::from_millis(200)).unwrap(),
        None
    );

    let wide = client.counter64(&super::name("counter-64")).unwrap();
    let big = i64::from(i32::MAX) * 4;
    assert_eq!(wide.add(big).unwrap(), big);
    assert_eq!(wide.add(-big).unwrap(), 0);
    assert!(wide.delete().unwrap());
    assert!(c.delete().unwrap());
    assert!(!c.delete().unwrap());
}

/// A counter deleted and written again up to the version a watch saw, with
/// another value, between two of the watch's reads: the watch reports it
/// (restarted), it does not take the counter for unchanged.
pub fn a_watch_sees_a_counter_deleted_and_written_back_to_its_version<K: Kit>(kit: &K) {
    let client = kit.connect(Duration::from_secs(10)).expect("connect");
    let name = name("counter-rewritten");
    let c = client.counter(&name).unwrap();
    c.set(40).unwrap();
    c.add(1).unwrap();
    c.add(-1).unwrap();
    let mut watch = c.watch().unwrap();
    assert_eq!(
        watch.last(),
        Versioned {
            value: 40,
            version: 3
        }
    );
    assert!(c.delete().unwrap());
    c.set(1).unwrap();
    c.add(1).unwrap();
    c.add(1).unwrap();
    let change = watch.next_timeout(scale(Duration::from_secs(5))).unwrap();
    let change = change.expect("the watch reports the counter written again");
    assert_eq!(
        change.now,
        Versioned {
            value: 3,
            version: 3
        }
    );
    assert!(change.restarted, "{change:?}");
    assert!(c.delete().unwrap());
}

/// A value that overflows the 32-bit kind, a counter name that holds a
/// lock, the other kind's data: `InvalidArgument`, the counter and the
/// lock unchanged, nothing left behind.
pub fn bad_input_is_refused_and_changes_nothing<K: Kit>(kit: &K) {
    let client = kit.connect(Duration::from_secs(10)).expect("connect");
    let name = name("counter-bad");
    let c = client.counter(&name).unwrap();
    c.set(i64::from(i32::MAX) - 1).unwrap();
    let msg = invalid("an add past i32::MAX", c.add(2));
    assert!(msg.contains("64-bit"), "{msg}");
    invalid("a set below i32::MIN", c.set(i64::from(i32::MIN) - 1));
    invalid("set_if of a huge value", c.set_if(1, i64::MAX));
    assert_eq!(
        c.get().unwrap(),
        Versioned {
            value: i64::from(i32::MAX) - 1,
            version: 1
        },
        "unchanged"
    );
    assert!(c.delete().unwrap());

    // A name that holds a lock is not a counter.
    let locked = name.clone() + "-lock";
    let guard = client.mutex(&locked).unwrap().lock().unwrap();
    let on_lock = client.counter(&locked).unwrap();
    invalid("get on a lock's name", on_lock.get());
    invalid("add on a lock's name", on_lock.add(1));
    guard.check().expect("the lock is still held");
    guard.release().unwrap();

    // Bad names are refused as every recipe's are.
    for bad in ["", "/a\u{1}b"] {
        invalid(&format!("counter {bad:?}"), client.counter(bad));
    }
    assert_eq!(c.get().unwrap().version, 0);
    assert!(kit.entries_under(&name).is_empty(), "nothing left");
}

/// The count-down latch: set once, counted down from other threads, a
/// waiter released at zero; a timed wait on a closed latch times out.
pub fn a_count_down_latch_opens_at_zero<K: Kit>(kit: &K) {
    let client = kit.connect(Duration::from_secs(10)).expect("connect");
    let name = name("count-down");
    let latch = client.count_down_latch(&name).unwrap();
    invalid("a count of 0", latch.try_set_count(0));
    assert!(latch.try_set_count(3).unwrap());
    assert!(!latch.try_set_count(5).unwrap(), "already counting down");
    assert_eq!(latch.count().unwrap(), 3);
    assert!(!latch.wait_timeout(Duration::from_millis(300)).unwrap());
    let downs: Vec<_> = (0..3)
        .map(|_| {
            let latch = client.count_down_latch(&name).unwrap();
            std::thread::spawn(move || latch.count_down().unwrap())
        })
        .collect();
    assert!(latch.wait_timeout(scale(Duration::from_secs(20))).unwrap());
    for d in downs {
        d.join().unwrap();
    }
    assert_eq!(latch.count_down().unwrap(), 0, "stays at zero");
    assert_eq!(latch.count().unwrap(), 0);
    assert!(latch.counter().delete().unwrap());
}

/// A waiter blocked on the counter wakes on another client's write within
/// a bound: the store's notification (a watch, `NOTIFY`, pub/sub), where
/// a poll would have waited out its pause. Both waits: a watch's next
/// change, and a count-down latch's wait.
pub fn a_blocked_waiter_wakes_on_another_clients_write<K: Kit>(kit: &K) {
    let waiting = kit.connect(Duration::from_secs(10)).expect("connect");
    let writing = kit.connect(Duration::from_secs(10)).expect("connect");
    let name = name("counter-wake");
    let bound = scale(Duration::from_secs(1));

    let counter = waiting.counter(&name).unwrap();
    let (ready, settled) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let mut watch = counter.watch().unwrap();
        let idle = watch.next_timeout(Duration::from_millis(500)).unwrap();
        assert_eq!(idle, None, "nothing written yet");
        ready.send(()).unwrap();
        let change = watch.next_timeout(scale(Duration::from_secs(30))).unwrap();
        (change, Instant::now())
    });
    settled.recv().unwrap();
    let c = writing.counter(&name).unwrap();
    assert_eq!(c.add(7).unwrap(), 7);
    let written = Instant::now();
    let (change, woke) = waiter.join().unwrap();
    let change = change.expect("woken by the write");
    assert_eq!((change.now.value, change.missed), (7, 0));
    let late = woke.saturating_duration_since(written);
    assert!(late < bound, "the watch woke {late:?} after the write");
    assert!(c.delete().unwrap());

    let latch_name = name.clone() + "-latch";
    let latch = waiting.count_down_latch(&latch_name).unwrap();
    assert!(latch.try_set_count(1).unwrap());
    let (ready, settled) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        assert!(!latch.wait_timeout(Duration::from_millis(500)).unwrap());
        ready.send(()).unwrap();
        let open = latch.wait_timeout(scale(Duration::from_secs(30))).unwrap();
        (open, Instant::now(), latch)
    });
    settled.recv().unwrap();
    let theirs = writing.count_down_latch(&latch_name).unwrap();
    assert_eq!(theirs.count_down().unwrap(), 0);
    let written = Instant::now();
    let (open, woke, latch) = waiter.join().unwrap();
    assert!(open, "the latch opened");
    let late = woke.saturating_duration_since(written);
    assert!(
        late < bound,
        "the latch's wait woke {late:?} after the count down"
    );
    assert!(latch.counter().delete().unwrap());
    assert!(kit.entries_under(&name).is_empty(), "nothing left");
}
