//! A client's runtime is driven by whichever caller is in a call: on every
//! store, a held lock's lease is still renewed every time while other
//! threads call the same client in a tight loop and one waits in a long
//! acquire, and its loss deadline still fires on time when the server is
//! black-holed.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::{scale, EtcdServer, PgServer, Proxy, RedisServer, ZkServer};
use recipes_core::{BootInstant, Client, LossReason};

/// Every client's TTL (ZooKeeper: its session timeout).
const TTL: Duration = Duration::from_secs(2);

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

/// The test's lock: nextest runs each test in a process of its own.
fn unique(store: &str) -> String {
    format!("/drive-{store}-{}", std::process::id())
}

/// The case, on `client` (connected through `proxy`); `server_keeps` says
/// whether the server still keeps the client's lease (its session `id`).
fn renewed_under_load_and_lost_on_time<C: Client>(
    client: C,
    proxy: &Proxy,
    name: &str,
    server_keeps: impl Fn(i64) -> bool,
) {
    let held = client.mutex(name).unwrap().lock().unwrap();
    let session = client.session_id().unwrap();

    // One thread waits in a long acquire of the held lock; four call the
    // same client in a tight loop, each on a lock of its own.
    let black_holed = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicUsize::new(0));
    let waiter = {
        let mutex = client.mutex(name).unwrap();
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

    // Four TTLs: the guard is never lost, the server keeps the lease
    // alive, and the deadline moves on with each renewal.
    let watched = TTL * 4;
    let started = Instant::now();
    let mut renewals = 0;
    let mut last_deadline = held.valid_until().unwrap();
    while started.elapsed() < watched {
        assert_eq!(
            held.lost().wait_timeout(Duration::from_millis(100)),
            None,
            "lost while threads called in a loop"
        );
        assert!(server_keeps(session), "the server's lease ran out");
        let deadline = held.valid_until().unwrap();
        if deadline > last_deadline {
            renewals += 1;
            last_deadline = deadline;
        }
    }
    let cycles_seen = cycles.load(Ordering::SeqCst);
    // A renewal every third of the TTL: about 12 in four TTLs.
    assert!(renewals >= 6, "{renewals} renewals in {watched:?}");
    assert!(cycles_seen > 20, "{cycles_seen} lock cycles in {watched:?}");
    assert!(!waiter.is_finished(), "the waiter is still waiting");

    // Black-holed while the loopers and the waiter are in their calls: the
    // guard is lost at its deadline, which no later acknowledgement moves.
    black_holed.store(true, Ordering::SeqCst);
    let black_holed_at = BootInstant::now();
    proxy.blackhole();
    let reason = held.lost().wait_timeout(scale(TTL * 3));
    let seen_at = BootInstant::now();
    assert_eq!(reason, Some(LossReason::DeadlineExpired));
    let deadline = held.valid_until().unwrap();
    assert!(
        deadline <= black_holed_at + TTL,
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

#[test]
fn etcd_a_held_lease_is_renewed_while_threads_call_in_a_tight_loop_and_lost_on_time_when_black_holed_fault(
) {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let proxy = Proxy::start(server.client_addr());
    let client = recipes_etcd::EtcdClient::builder([format!("http://{}", proxy.addr())])
        .ttl(TTL)
        .connect()
        .unwrap();
    renewed_under_load_and_lost_on_time(client, &proxy, &unique("etcd"), |lease| {
        facts.lease_time_to_live(lease) > 0
    });
}

#[test]
fn zk_a_held_session_is_renewed_while_threads_call_in_a_tight_loop_and_lost_on_time_when_black_holed_fault(
) {
    let server = ZkServer::shared();
    let proxy = Proxy::start(server.client_addr());
    let client = recipes_zk::ZkClient::builder(proxy.addr().to_string())
        .session_timeout(TTL)
        .connect()
        .unwrap();
    let name = unique("zk");
    let facts = server.facts();
    let first = name.clone();
    renewed_under_load_and_lost_on_time(client, &proxy, &name, move |_| {
        // The holder's node is ephemeral: it is there while the server
        // keeps the session.
        !facts.children(&first).is_empty()
    });
}

#[test]
fn pg_a_held_session_is_renewed_while_threads_call_in_a_tight_loop_and_lost_on_time_when_black_holed_fault(
) {
    let server = PgServer::shared();
    let proxy = Proxy::start(server.addr());
    let via = server
        .url()
        .replace(&server.addr().to_string(), &proxy.addr().to_string());
    let client = recipes_pg::PgClient::builder(via)
        .ttl(TTL)
        .connect()
        .unwrap();
    let facts = integration::PgFacts::new(server.addr());
    renewed_under_load_and_lost_on_time(client, &proxy, &unique("pg"), move |session| {
        let live = format!(
            "SELECT count(*) FROM recipes.sessions WHERE id = {session} \
             AND expires_at > clock_timestamp()"
        );
        facts.sql(&live) == "1"
    });
}

#[test]
fn redis_a_held_session_is_renewed_while_threads_call_in_a_tight_loop_and_lost_on_time_when_black_holed_fault(
) {
    let server = RedisServer::shared();
    let proxy = Proxy::start(server.addr());
    let client = recipes_redis::RedisClient::builder(format!("redis://{}", proxy.addr()))
        .ttl(TTL)
        .connect()
        .unwrap();
    renewed_under_load_and_lost_on_time(client, &proxy, &unique("redis"), |session| {
        let ttl: i64 = server
            .try_cmd(redis::cmd("PTTL").arg(format!("{{recipes}}:s:{session}")))
            .unwrap();
        ttl > 0
    });
}
