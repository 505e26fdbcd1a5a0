//! The engine under seeded, randomized schedules: contenders with random
//! deadlines, cancelled acquisitions, lost replies, failed reads, spurious
//! wake-ups and expiring sessions, all on tokio's paused clock. Every run
//! asserts mutual exclusion (at most the rule's holders whose loss signal
//! has not fired: one mutex holder or latch leader, `n` permits, many
//! readers or one writer), a read-write lock's fairness (no reader passes a writer queued
//! before it), fence order (each accepted mutex holder's or writer's fence
//! above every earlier one's, each reader's above every earlier writer's)
//! and cleanup (no entry left at the end).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::contend::contend;
use super::decide::{Role, Rule};
use super::sim_store::{paused_runtime, FenceBy, Rng, SimDriver, SimWon, Store};

/// An accepted win: contender, entry, role, fence, and when.
type Win = (usize, i64, Role, i64, Duration);

#[derive(Debug, Default)]
struct Checker {
    /// Accepted holders: (contender, created, role, its loss signal).
    holding: Vec<(usize, i64, Role, crate::loss::LossSignal)>,
    /// The highest fence of any accepted win, and of any writer's.
    highest_fence: Option<i64>,
    highest_writer_fence: Option<i64>,
    /// Every accepted win in order: contender, entry, role, fence, and
    /// when (on the paused clock, from the start).
    wins: Vec<Win>,
    started: Option<Instant>,
}

impl Checker {
    fn won(&mut self, seed: u64, who: usize, w: &SimWon, rule: Rule, store: &Store) {
        self.holding.retain(|(_, _, _, lost)| !lost.is_lost());
        if w.lost.is_lost() {
            return; // lost at birth: the guard says so at once
        }
        let holders: Vec<_> = self.holding.iter().map(|(c, e, r, _)| (c, e, r)).collect();
        let excludes = match (rule, w.role) {
            (Rule::Leases(n), _) => self.holding.len() < n,
            (Rule::ReadWrite, Role::Reader) => {
                // Fair: no writer queued before this reader is still there.
                assert!(
                    !store.writer_before(w.created),
                    "seed {seed}: reader {} passed a queued writer",
                    w.created
                );
                self.holding.iter().all(|h| h.2 == Role::Reader)
            }
            _ => self.holding.is_empty(),
        };
        assert!(
            excludes,
            "seed {seed}: contender {who} won {} ({:?}) while {holders:?} hold",
            w.created, w.role
        );
        let ordered = match (rule, w.role) {
            (Rule::Leases(_), _) => None,
            // A reader's fence is above every earlier writer's.
            (Rule::ReadWrite, Role::Reader) => Some(self.highest_writer_fence),
            // A writer's, or a mutex holder's, above every earlier fence.
            _ => Some(self.highest_fence),
        };
        if let Some(Some(h)) = ordered {
            assert!(
                w.fence > h,
                "seed {seed}: fence {} ({:?}) after {h} (contender {who})",
                w.fence,
                w.role
            );
        }
        self.highest_fence = self.highest_fence.max(Some(w.fence));
        if w.role != Role::Reader {
            self.highest_writer_fence = self.highest_writer_fence.max(Some(w.fence));
        }
        self.holding.push((who, w.created, w.role, w.lost.clone()));
        let at = self.started.get_or_insert_with(Instant::now).elapsed();
        self.wins.push((who, w.created, w.role, w.fence, at));
    }

    fn released(&mut self, created: i64) {
        self.holding.retain(|(_, e, _, _)| *e != created);
    }
}

/// One schedule; returns its accepted wins in order.
fn run(seed: u64, contenders: usize, rounds: usize, rule: Rule) -> Vec<Win> {
    paused_runtime().block_on(async move {
        let mut pick = Rng::new(seed ^ 0x5eed);
        let fault_percent = pick.below(15);
        let fence_by = if pick.chance(50) {
            FenceBy::ReadRevision
        } else {
            FenceBy::CreateRevision
        };
        let store = Store::new(seed, fault_percent);
        let checker = Arc::new(Mutex::new(Checker::default()));
        let mut tasks = Vec::new();
        for who in 0..contenders {
            let driver = SimDriver::new(store.clone(), rule, fence_by);
            let (store, checker) = (store.clone(), checker.clone());
            let mut rng = Rng::new(seed.wrapping_mul(31).wrapping_add(who as u64));
            tasks.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    if rule == Rule::ReadWrite {
                        let writes = rng.chance(40);
                        *driver.role.lock() = if writes { Role::Writer } else { Role::Reader };
                    }
                    let deadline = match rng.below(4) {
                        0 => None,
                        1 => Some(Instant::now()),
                        _ => Some(Instant::now() + Duration::from_millis(rng.below(80))),
                    };
                    // Sometimes the caller gives up before the deadline:
                    // the acquisition's future is dropped mid-way.
                    let cancel_after = rng.chance(20).then(|| Duration::from_millis(rng.below(30)));
                    let acquired = match cancel_after {
                        Some(after) => {
                            match tokio::time::timeout(after, contend(&driver, deadline)).await {
                                Ok(r) => r,
                                Err(_) => continue,
                            }
                        }
                        None => contend(&driver, deadline).await,
                    };
                    let won = match acquired {
                        Ok(Some(won)) => won,
                        // An acquisition holds nothing until it wins: lost
                        // replies, failed reads and expired sessions cost
                        // it time, never the acquisition itself.
                        Err(e) if deadline.is_none() => {
                            panic!("seed {seed}: an acquisition without a deadline failed: {e}")
                        }
                        Ok(None) | Err(_) => continue,
                    };
                    checker.lock().won(seed, who, &won, rule, &store);
                    tokio::time::sleep(Duration::from_millis(rng.below(15))).await;
                    checker.lock().released(won.created);
                    store.release(won.created);
                }
            }));
        }
        // Chaos: now and then a session expires, as the server would do it.
        let chaos = {
            let store = store.clone();
            let mut rng = Rng::new(seed ^ 0xc4a05);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(1 + rng.below(40))).await;
                    if rng.chance(fault_percent * 2) {
                        let live = store.live_sessions();
                        if !live.is_empty() {
                            let victim = live[rng.below(live.len() as u64) as usize];
                            if rng.chance(50) {
                                store.expire(victim);
                            } else {
                                let lag = Duration::from_millis(rng.below(30));
                                store.cut_off(victim, lag);
                            }
                        }
                    }
                }
            })
        };
        for t in tasks {
            if let Err(e) = t.await {
                panic!("seed {seed}: a contender panicked: {e}");
            }
        }
        chaos.abort();
        // Background removals of dropped acquisitions finish on their own.
        let quiet = Instant::now() + Duration::from_secs(5);
        while store.entry_count() > 0 && Instant::now() < quiet {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(store.entry_count(), 0, "seed {seed}: entries left behind");
        let wins = std::mem::take(&mut checker.lock().wins);
        wins
    })
}

fn seeds() -> std::ops::Range<u64> {
    let n = std::env::var("RECIPES_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    0..n
}

/// Every seed under `rule`, whose holder is one at a time (a mutex's, a
/// latch's leader): the checker asserts exclusion and fence order.
fn one_at_a_time(rule: Rule) {
    let mut wins = 0;
    for seed in seeds() {
        wins += run(seed, 2 + (seed % 4) as usize, 6, rule).len();
    }
    assert!(
        wins > 0,
        "no schedule ever acquired: the simulation is broken"
    );
}

#[test]
fn a_mutex_under_random_schedules_excludes_fences_in_order_and_leaves_nothing() {
    one_at_a_time(Rule::Mutex);
}

#[test]
fn a_latch_under_random_schedules_has_one_leader_fences_in_order_and_leaves_nothing() {
    one_at_a_time(Rule::Latch);
}

#[test]
fn n_leases_under_random_schedules_admit_at_most_n_and_leave_nothing() {
    let mut wins = 0;
    for seed in seeds() {
        let n = 1 + (seed % 3) as usize;
        wins += run(seed, 3 + (seed % 4) as usize, 5, Rule::Leases(n)).len();
    }
    assert!(
        wins > 0,
        "no schedule ever acquired: the simulation is broken"
    );
}

#[test]
fn a_read_write_lock_under_random_schedules_is_exclusive_fair_and_fenced() {
    let (mut readers, mut writers) = (0, 0);
    for seed in seeds() {
        for (_, _, role, _, _) in run(seed, 3 + (seed % 4) as usize, 6, Rule::ReadWrite) {
            match role {
                Role::Reader => readers += 1,
                _ => writers += 1,
            }
        }
    }
    assert!(
        readers > 0 && writers > 0,
        "readers won {readers} times, writers {writers}: the simulation is broken"
    );
}

#[test]
fn a_replayed_seed_runs_the_same_schedule() {
    for seed in [7, 99, 1234] {
        let first = run(seed, 4, 6, Rule::Mutex);
        assert!(!first.is_empty(), "seed {seed}: nothing won");
        assert_eq!(
            first,
            run(seed, 4, 6, Rule::Mutex),
            "seed {seed} replayed differently"
        );
    }
    assert_ne!(
        run(7, 4, 6, Rule::Mutex),
        run(99, 4, 6, Rule::Mutex),
        "seeds pick schedules"
    );
}

/// A stopped acquisition (a latch or a selector closing) has removed its
/// entry by the time it returns, wherever the stop caught it — entering,
/// reading, waiting, starting over after a lost reply — and answers
/// `Ok(None)`: the holder's entry is the only one left.
#[test]
fn a_stopped_acquisition_has_left_the_queue_when_it_returns() {
    use super::stop::until_stopped;
    use crate::loss::{LossReason, LossTrigger};
    for seed in seeds() {
        paused_runtime().block_on(async move {
            let mut rng = Rng::new(seed ^ 0x570b);
            let store = Store::new(seed, rng.below(15));
            let holder = SimDriver::new(store.clone(), Rule::Mutex, FenceBy::CreateRevision);
            let held = contend(&holder, None).await.unwrap();
            assert!(held.is_some(), "seed {seed}: the first contender won");
            let waiter = SimDriver::new(store.clone(), Rule::Mutex, FenceBy::CreateRevision);
            let closing = LossTrigger::root();
            let stop_after = Duration::from_millis(rng.below(40));
            let stop = closing.clone();
            tokio::spawn(async move {
                tokio::time::sleep(stop_after).await;
                stop.fire(LossReason::Closed);
            });
            let stopped = until_stopped(Some(closing.signal()), contend(&waiter, None)).await;
            assert!(
                matches!(stopped, Ok(None)),
                "seed {seed}: a stopped acquisition answered {stopped:?}"
            );
            assert_eq!(
                store.entry_count(),
                1,
                "seed {seed}: the stopped acquisition's entry is left"
            );
        });
    }
}
