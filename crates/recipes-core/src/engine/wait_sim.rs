//! The wait shape under seeded, randomized schedules on tokio's paused
//! clock: failed reads, lost replies, spurious wake-ups, expiring
//! sessions and killed processes. Asserts that a barrier's removal lets
//! every waiter through once and none before it, that nobody passes a
//! double barrier's enter before `count` members entered its round (a
//! stale flag included), that every live member's leave ends, and that
//! nothing is left in the store.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::gather::{self, DoubleBarrierStore, Flag};
use super::sim_store::{paused_runtime as rt, Rng};
use super::wait_sim_store::{Proc, Sim};

fn seeds() -> std::ops::Range<u64> {
    let n = std::env::var("RECIPES_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    0..n
}

/// Waiters on a set barrier; one removal at a random time. Returns the
/// reads the waiters made.
fn barrier_run(seed: u64) -> u64 {
    rt().block_on(async move {
        let mut pick = Rng::new(seed ^ 0xba5e);
        let fault_percent = if seed.is_multiple_of(3) {
            0
        } else {
            pick.below(20)
        };
        let sim = Sim::new(seed, fault_percent);
        sim.state.lock().barrier = true;
        let waiters = 2 + pick.below(8) as usize;
        let removed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
        let mut tasks = Vec::new();
        for w in 0..waiters {
            let (p, removed_at) = (Proc::new(&sim, 1), removed_at.clone());
            let timed = pick
                .chance(30)
                .then(|| Duration::from_millis(pick.below(100)));
            let expire_at = pick.chance(fault_percent).then(|| pick.below(60));
            let sim2 = sim.clone();
            tasks.push(tokio::spawn(async move {
                if let Some(after) = expire_at {
                    let p2 = p.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(after)).await;
                        p2.kill();
                    });
                }
                let deadline = timed.map(|d| Instant::now() + d);
                let down = gather::barrier_wait(&p, deadline).await;
                let now = Instant::now();
                match down {
                    Ok(true) => {
                        let at = removed_at
                            .lock()
                            .expect("seed {seed}: through before removal");
                        assert!(now >= at, "seed {seed}: waiter {w} through early");
                    }
                    Ok(false) => assert!(
                        deadline.is_some_and(|d| now >= d),
                        "seed {seed}: waiter {w} timed out before its deadline"
                    ),
                    Err(e) if deadline.is_some() => {
                        drop(e); // retryable past the deadline
                    }
                    Err(e) => panic!("seed {seed}: an unbounded wait failed: {e}"),
                }
                drop(sim2);
            }));
        }
        tokio::time::sleep(Duration::from_millis(pick.below(80))).await;
        {
            let mut st = sim.state.lock();
            *removed_at.lock() = Some(Instant::now());
            st.barrier = false;
            sim.bump(&mut st);
        }
        for t in tasks {
            if let Err(e) = t.await {
                panic!("seed {seed}: a waiter panicked: {e}");
            }
        }
        let st = sim.state.lock();
        if fault_percent == 0 {
            return st.reads;
        }
        0
    })
}

#[test]
fn a_barrier_removal_lets_every_waiter_through_once_and_none_before() {
    let (mut quiet_runs, mut quiet_reads) = (0, 0);
    for seed in seeds() {
        let reads = barrier_run(seed);
        if seed.is_multiple_of(3) {
            quiet_runs += 1;
            quiet_reads += reads;
        }
    }
    assert!(
        quiet_runs > 0 && quiet_reads > 0,
        "the simulation is broken"
    );
}

/// Without faults, each waiter reads twice: up, then down — one wake-up
/// each, no herd of re-reads.
#[test]
fn without_faults_a_removal_costs_each_waiter_one_read() {
    rt().block_on(async {
        let sim = Sim::new(1, 0);
        sim.state.lock().barrier = true;
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let p = Proc::new(&sim, 1);
                tokio::spawn(async move { gather::barrier_wait(&p, None).await.unwrap() })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(sim.state.lock().reads, 10, "each waiter read once");
        {
            let mut st = sim.state.lock();
            st.barrier = false;
            sim.bump(&mut st);
        }
        for t in tasks {
            assert!(t.await.unwrap());
        }
        assert_eq!(sim.state.lock().reads, 20, "each waiter woke once");
    });
}

/// One round of a double barrier: `count` steady processes and a few
/// spares (timed, or killed while entering or leaving) that come once the
/// steady ones are in, perhaps a stale flag left from an earlier round.
/// Returns how many passed.
fn double_run(seed: u64) -> usize {
    rt().block_on(async move {
        let mut pick = Rng::new(seed ^ 0xd0b1e);
        let fault_percent = pick.below(15);
        let sim = Sim::new(seed, fault_percent);
        if pick.chance(50) {
            sim.state.lock().flag = Some(Flag {
                set_at: 0,
                version: 0,
            });
        }
        let count = 1 + pick.below(5) as u32;
        let procs = count as usize + pick.below(3) as usize;
        let passed = Arc::new(Mutex::new(0usize));
        let mut tasks = Vec::new();
        for who in 0..procs {
            let spare = who >= count as usize;
            let mut p = Proc::new(&sim, count);
            p.steady = !spare;
            let (passed, sim2, p2) = (passed.clone(), sim.clone(), p.clone());
            let late = Duration::from_millis(pick.below(40));
            let timed = (spare && pick.chance(50)).then(|| Duration::from_millis(pick.below(200)));
            let kill_at =
                (spare && timed.is_none()).then(|| Duration::from_millis(pick.below(150)));
            let task = tokio::spawn(async move {
                // Spares come once every steady member is in: they never
                // complete a round without one (which would then wait
                // for ever, as it would on a real store).
                while spare && sim2.state.lock().steady_joined < count as usize {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                tokio::time::sleep(late).await;
                let deadline = timed.map(|d| Instant::now() + d);
                let joined = match gather::enter(&p, deadline).await {
                    Ok(Some(j)) => j,
                    Ok(None) => return,
                    // A retryable failure once the deadline passed.
                    Err(e) if deadline.is_some() && e.is_retryable() => return,
                    Err(e) => panic!("seed {seed}: enter failed: {e}"),
                };
                {
                    let st = sim2.state.lock();
                    let member = st
                        .members
                        .iter()
                        .find(|(n, _)| Proc::is_ours(&joined.ticket, n));
                    // Ours may have gone with its session since.
                    if let Some((_, (_, created))) = member {
                        let fair = st
                            .marks
                            .iter()
                            .any(|(rev, seen)| rev > created && *seen >= count as usize);
                        assert!(fair, "seed {seed}: {who} passed before {count} entered");
                    }
                }
                *passed.lock() += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
                match gather::leave(&p, joined.ticket, None).await {
                    Ok(done) => assert!(done, "seed {seed}: an unbounded leave timed out"),
                    Err(e) => panic!("seed {seed}: leave failed: {e}"),
                }
            });
            if let Some(at) = kill_at {
                let abort = task.abort_handle();
                tokio::spawn(async move {
                    tokio::time::sleep(at).await;
                    abort.abort();
                    p2.kill();
                });
            }
            tasks.push(task);
        }
        let watchdog = {
            let sim = sim.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(30)).await;
                let st = sim.state.lock();
                panic!(
                    "seed {seed}: stuck (count {count}, {procs} processes): flag {:?}, \
                     members {:?}, marks {:?}, sessions {:?}",
                    st.flag,
                    st.members,
                    st.marks,
                    st.sessions.keys().collect::<Vec<_>>()
                );
            })
        };
        for t in tasks {
            if let Err(e) = t.await {
                assert!(e.is_cancelled(), "seed {seed}: a member panicked: {e}");
            }
        }
        watchdog.abort();
        let quiet = Instant::now() + Duration::from_secs(5);
        while !sim.state.lock().members.is_empty() && Instant::now() < quiet {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let st = sim.state.lock();
        assert!(
            st.members.is_empty(),
            "seed {seed}: members left: {:?}",
            st.members
        );
        let n = *passed.lock();
        n
    })
}

#[test]
fn a_double_barrier_passes_nobody_early_and_leaves_nothing() {
    let mut passed = 0;
    for seed in seeds() {
        passed += double_run(seed);
    }
    assert!(passed > 0, "nobody ever passed: the simulation is broken");
}
