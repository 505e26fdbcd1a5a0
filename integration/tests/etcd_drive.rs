//! A client's runtime is driven by whichever caller is in a call: a held
//! lease is still renewed every time while other threads call the same
//! client in a tight loop and one waits in a long acquire, and its loss
//! deadline still fires on time when the server is black-holed.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::{scale, EtcdServer};
use recipes_core::{BootInstant, LossReason};
use recipes_etcd::EtcdClient;

/// A thread with more stack than the client's runtime thread: one that
/// drives the runtime when it is alone in a call.
fn big_stack<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new()
        .stack_size(16 << 20)
        .spawn(f)
        .unwrap()
}

#[test]
fn a_held_lease_is_renewed_while_threads_call_in_a_tight_loop_and_lost_on_time_when_black_holed_fault(
) {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let proxy = integration::Proxy::start(server.client_addr());
    let client = EtcdClient::builder([format!("http://{}", proxy.addr())])
        .ttl(SHORT_TTL)
        .connect()
        .unwrap();
    let name = lock_name("drive");
    let held = client.mutex(&name).unwrap().lock().unwrap();
    let lease = client.session_id().unwrap();

    // One thread waits in a long acquire of the held lock; four call the
    // same client in a tight loop, each on a lock of its own.
    let black_holed = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicUsize::new(0));
    let waiter = {
        let mutex = client.mutex(&name).unwrap();
        big_stack(move || {
            mutex
                .try_lock_for(Duration::from_secs(120))
                .map(|g| g.map(|g| g.token()))
        })
    };
    let loopers: Vec<_> = (0..4)
        .map(|i| {
            let mutex = client.mutex(&format!("{name}-loop-{i}")).unwrap();
            let (black_holed, stop, cycles) = (black_holed.clone(), stop.clone(), cycles.clone());
            big_stack(move || {
                let mut failures_before_black_hole = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let cycle = mutex.lock().and_then(|g| g.release());
                    match cycle {
                        Ok(()) => {
                            cycles.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) if !black_holed.load(Ordering::SeqCst) => {
                            failures_before_black_hole.push(e.to_string());
                        }
                        Err(_) => {}
                    }
                }
                failures_before_black_hole
            })
        })
        .collect();

    // Four TTLs: the guard is never lost, the server keeps the lease alive,
    // and the deadline moves on with each keep-alive.
    let watched = SHORT_TTL * 4;
    let started = Instant::now();
    let mut renewals = 0;
    let mut last_deadline = held.valid_until().unwrap();
    while started.elapsed() < watched {
        assert_eq!(
            held.lost().wait_timeout(Duration::from_millis(100)),
            None,
            "lost while threads called in a loop"
        );
        assert!(
            facts.lease_time_to_live(lease) > 0,
            "the server's lease ran out"
        );
        let deadline = held.valid_until().unwrap();
        if deadline > last_deadline {
            renewals += 1;
            last_deadline = deadline;
        }
    }
    let cycles_seen = cycles.load(Ordering::SeqCst);
    // A keep-alive every third of the TTL: about 12 in four TTLs.
    assert!(renewals >= 6, "{renewals} renewals in {watched:?}");
    assert!(cycles_seen > 20, "{cycles_seen} lock cycles in {watched:?}");
    assert!(!waiter.is_finished(), "the waiter is still waiting");

    // Black-holed while the loopers and the waiter are in their calls: the
    // guard is lost at its deadline, which no later acknowledgement moves.
    black_holed.store(true, Ordering::SeqCst);
    let black_holed_at = BootInstant::now();
    proxy.blackhole();
    let reason = held.lost().wait_timeout(scale(SHORT_TTL * 3));
    let seen_at = BootInstant::now();
    assert_eq!(reason, Some(LossReason::DeadlineExpired));
    let deadline = held.valid_until().unwrap();
    assert!(
        deadline <= black_holed_at + SHORT_TTL,
        "{deadline:?} vs {black_holed_at:?}"
    );
    assert!(
        seen_at <= deadline + scale(Duration::from_millis(300)),
        "fired late: seen at {seen_at:?}, deadline {deadline:?}"
    );

    stop.store(true, Ordering::SeqCst);
    proxy.restore();
    for l in loopers {
        let failures = l.join().unwrap();
        assert!(failures.is_empty(), "{failures:?}");
    }
    // The waiter's call ends (its session was lost with the guard's, or it
    // took the lock once the server expired the lease).
    if let Ok(Some(token)) = waiter.join().unwrap() {
        assert!(token > held.token());
    }
    drop(held);
    let _ = client.close();
}
