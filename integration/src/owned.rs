//! What a client's audit of its session's entries (PostgreSQL and Redis:
//! entries of its live session that no guard or waiter owns are released,
//! about once a TTL) must leave alone: every entry a guard or a waiter of
//! the client owns, of every recipe that queues.

use std::time::{Duration, Instant};

use recipes_core::Client;

/// Hold, on `c` for `over` (several audits: a short TTL), a semaphore's
/// permit, a read-write lock's read side, a leader latch's leadership,
/// and four threads taking and releasing one mutex behind each other;
/// panic if any guard is told it lost, the latch loses its leadership or
/// a thread never gets a turn.
pub fn every_owned_entry_stays<C: Client + Sync>(c: &C, prefix: &str, over: Duration) {
    let permit = c.semaphore(&format!("{prefix}/sem"), 2).unwrap();
    let permit = permit.acquire().unwrap();
    let rw = c.rw_lock(&format!("{prefix}/rw")).unwrap();
    let read = rw.read().unwrap();
    let latch = c.leader_latch(&format!("{prefix}/latch"), "a").unwrap();
    latch.start();
    assert!(latch.await_leadership(crate::scale(Duration::from_secs(10))));
    let lock = format!("{prefix}/mutex");
    let until = Instant::now() + over;
    let turns: Vec<usize> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let m = c.mutex(&lock).unwrap();
                    let mut turns = 0;
                    while Instant::now() < until {
                        let g = m.lock().unwrap();
                        std::thread::sleep(Duration::from_millis(5));
                        assert!(!g.lost().is_lost(), "a held mutex's entry was removed");
                        g.release().unwrap();
                        turns += 1;
                    }
                    turns
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert!(turns.iter().all(|&t| t > 0), "turns {turns:?}");
    assert!(!permit.lost().is_lost(), "the permit's entry was removed");
    assert!(!read.lost().is_lost(), "the reader's entry was removed");
    assert!(latch.has_leadership(), "the latch's entry was removed");
    permit.release().unwrap();
    read.release().unwrap();
    latch.close().unwrap();
}

/// A restore brought back an entry of `lock` that the client `ours` had
/// released, while `ours` still holds `kept` (a guard's loss signal): over
/// `over` (several audits) every entry `ours` owns stays
/// ([`every_owned_entry_stays`]), and by its end the stray is gone — so an
/// audit ran meanwhile: `other` takes `lock` at once — and `kept` has not
/// lost.
pub fn a_restored_entry_is_released<C: Client + Sync>(
    ours: &C,
    other: &C,
    lock: &str,
    kept: &recipes_core::LossSignal,
    over: Duration,
) {
    every_owned_entry_stays(ours, &format!("{lock}-owned"), over);
    let taken = other.mutex(lock).unwrap().try_lock().unwrap();
    let taken = taken.expect("the restored entry was released while the owned ones stayed");
    assert!(!kept.is_lost(), "the kept lock's entry stayed");
    taken.release().unwrap();
}
