//! What only the Redis backend has, against real `redis-server`s: typed
//! connect errors (TLS, a wrong or missing password, `maxmemory`) that
//! leave nothing behind, fenced writes by script, a renewal that never
//! resurrects, per-permit expiry, and what survives a restart with and
//! without the append-only file. Tests whose names contain `fault` get
//! their own server and run one at a time.

use std::time::Duration;

use integration::test_dir::TestDir;
use integration::worker::{worker_binary, Worker};
use integration::{scale, wait_until, RedisConfig, RedisServer};
use recipes_core::{BootInstant, Client, Error};
use recipes_redis::RedisClient;

const NS: &str = "{recipes}:";

fn name(test: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "/redis/{test}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn connect(server: &RedisServer, ttl: Duration) -> RedisClient {
    RedisClient::builder(server.url())
        .ttl(ttl)
        .connect()
        .expect("connect")
}

/// Our keys on `server`, fence counters aside (they are kept for ever, so
/// that fences never repeat).
fn our_keys(server: &RedisServer) -> Vec<String> {
    let mut keys = server.keys(&format!("{NS}*"));
    // Kept for ever, by design: fences, the session ids' and the groups'
    // versions' counters (none may go back).
    let kept = [format!("{NS}sessions"), format!("{NS}gv")];
    keys.retain(|k| !k.starts_with(&format!("{NS}fence:")) && !kept.contains(k));
    keys
}

fn field<'a>(reply: &'a str, key: &str) -> &'a str {
    reply
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {reply:?}"))
}

#[test]
fn urls_that_are_not_plain_redis_are_refused_saying_what_to_write() {
    for url in [
        "rediss://127.0.0.1:6379",
        "http://127.0.0.1:6379",
        "127.0.0.1",
        "",
    ] {
        match RedisClient::connect(url) {
            Err(Error::InvalidArgument(msg)) => {
                assert!(msg.contains("redis://host:port"), "{url}: {msg}");
                if url.starts_with("rediss") {
                    assert!(msg.contains("TLS"), "{msg}");
                }
            }
            other => panic!("{url}: {other:?}"),
        }
    }
}

#[test]
fn a_replica_wait_as_long_as_a_third_of_the_ttl_is_refused() {
    let r = RedisClient::builder("redis://127.0.0.1:1")
        .ttl(Duration::from_secs(3))
        .wait_for_replicas(1, Duration::from_secs(1))
        .connect();
    assert!(
        matches!(r, Err(Error::InvalidArgument(ref m)) if m.contains("WAIT")),
        "{r:?}"
    );
}

#[test]
fn a_port_nothing_listens_on_is_a_backend_error_naming_it() {
    let free = integration::ports::reserve_port();
    let started = std::time::Instant::now();
    let r = RedisClient::builder(format!("redis://{}", free.addr()))
        .connect_timeout(Duration::from_secs(1))
        .connect();
    match r {
        Err(Error::Backend { message, .. }) => {
            assert!(message.contains(&free.addr().to_string()), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < scale(Duration::from_secs(5)));
}

#[test]
fn a_missing_or_wrong_password_is_unauthenticated_and_leaves_nothing() {
    let server = RedisServer::start_with(RedisConfig {
        password: Some("s3cret-pw".into()),
        ..RedisConfig::default()
    });
    let plain = format!("redis://{}", server.addr());
    let wrong = format!("redis://:wrong-pw@{}", server.addr());
    for url in [plain, wrong] {
        match RedisClient::connect(url.as_str()) {
            Err(Error::Unauthenticated { what }) => {
                assert!(
                    !what.contains("wrong-pw") && !what.contains("s3cret"),
                    "{what}"
                );
                assert!(what.contains("redis://:PASSWORD@"), "{what}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    assert!(our_keys(&server).is_empty());
    let c = connect(&server, Duration::from_secs(5));
    let g = c.mutex("/pw/lock").unwrap().lock().unwrap();
    g.release().unwrap();
    c.close().unwrap();
    assert_eq!(our_keys(&server), Vec::<String>::new(), "nothing left");
}

#[test]
fn fault_maxmemory_refuses_new_work_whole_while_held_locks_live_on() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(2);
    let holder = connect(&server, ttl);
    let other = connect(&server, ttl);
    let held = holder.mutex(&name("held")).unwrap().lock().unwrap();
    let member = holder
        .double_barrier(&name("db"), 1)
        .unwrap()
        .enter()
        .unwrap();
    let joined = holder
        .group(&name("group"))
        .unwrap()
        .join("m1", b"")
        .unwrap();
    let tied = holder.barrier(&name("tied")).unwrap().tied_to_session();
    tied.set().unwrap();
    let before = our_keys(&server);
    let _: () = server.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    let refused = other.mutex(&name("oom")).unwrap().try_lock();
    match refused {
        Err(Error::Backend {
            message,
            retryable: false,
            ..
        }) => {
            assert!(message.contains("maxmemory"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    match RedisClient::builder(server.url()).ttl(ttl).connect() {
        Err(Error::Backend { message, .. }) => assert!(message.contains("maxmemory"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(our_keys(&server), before, "the refusals wrote nothing");
    // Renewals run under maxmemory: the lock outlives several TTLs.
    let until = BootInstant::now() + 2 * ttl;
    wait_until("two TTLs pass", scale(3 * ttl), || {
        BootInstant::now() >= until
    });
    held.check().expect("still held under maxmemory");
    held.release().expect("a release runs under maxmemory");
    // So do the barriers' and groups' (they only remove).
    let left = member.leave_timeout(scale(Duration::from_secs(5)));
    assert!(
        matches!(left, Ok(true)),
        "a double barrier's leave: {left:?}"
    );
    joined
        .release()
        .expect("a group's leave runs under maxmemory");
    tied.remove()
        .expect("a barrier's removal runs under maxmemory");
    let _: () = server.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    holder.close().unwrap();
    other.close().unwrap();
    assert!(our_keys(&server).is_empty(), "{:?}", our_keys(&server));
}

#[test]
fn fenced_set_del_and_script_write_only_while_the_lock_is_held() {
    let server = RedisServer::shared();
    let c = connect(server, Duration::from_secs(5));
    let lock = name("fenced");
    let (k, counter) = (format!("{lock}-value"), format!("{lock}-counter"));
    let g = c.mutex(&lock).unwrap().lock().unwrap();
    g.fenced_set(&k, "one").unwrap();
    assert_eq!(c.read(&k).unwrap().as_deref(), Some(&b"one"[..]));
    g.put(&k, b"two").unwrap();
    let n: i64 = g
        .fenced_script(
            "return redis.call('INCRBY', KEYS[1], ARGV[1])",
            &[&counter],
            &[b"5"],
        )
        .unwrap();
    assert_eq!(n, 5);
    assert!(matches!(
        g.fenced_script::<i64>("return 1", &["{recipes}:lock:/x"], &[]),
        Err(Error::InvalidArgument(_))
    ));
    // The lock key deleted behind the holder's back: nothing more lands.
    let _: i64 = server.cmd(&["DEL", g.hold_key()]);
    let rejected = |r: recipes_core::Result<()>| matches!(r, Err(Error::FenceRejected { .. }));
    assert!(rejected(g.fenced_set(&k, "three")));
    assert!(rejected(g.fenced_del(&k)));
    assert!(rejected(g.delete(&k)));
    let script: recipes_core::Result<i64> =
        g.fenced_script("return redis.call('INCR', KEYS[1])", &[&counter], &[]);
    assert!(
        matches!(script, Err(Error::FenceRejected { .. })),
        "{script:?}"
    );
    assert_eq!(c.read(&k).unwrap().as_deref(), Some(&b"two"[..]));
    assert_eq!(c.read(&counter).unwrap().as_deref(), Some(&b"5"[..]));
    drop(g);
    c.close().unwrap();
}

/// Fences are minted on the server's clock (µs since the epoch) and then
/// + 1: strictly increasing, not dense, far from 1.
#[test]
fn fences_strictly_increase_from_the_servers_clock() {
    let server = RedisServer::shared();
    let c = connect(server, Duration::from_secs(5));
    let m = c.mutex(&name("fences")).unwrap();
    let time: Vec<String> = server.cmd(&["TIME"]);
    let now_us = time[0].parse::<u64>().unwrap() * 1_000_000 + time[1].parse::<u64>().unwrap();
    let tokens: Vec<u64> = (0..5)
        .map(|_| {
            let g = m.lock().unwrap();
            let t = g.token().0;
            g.release().unwrap();
            t
        })
        .collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert!(tokens[0] >= now_us, "{tokens:?} from the clock {now_us}");
    assert!(tokens[4] < 1 << 53, "a safe integer in JSON: {tokens:?}");
    c.close().unwrap();
}

#[test]
fn fault_an_orphaned_permit_expires_by_itself_after_its_ttl() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(2);
    let sem = name("permit");
    let a = connect(&server, ttl);
    let permit = a.semaphore(&sem, 1).unwrap().acquire().unwrap();
    let b = connect(&server, Duration::from_secs(10));
    let s = b.semaphore(&sem, 1).unwrap();
    assert!(s.try_acquire().unwrap().is_none(), "the one permit is held");
    let last_ack = a.last_acknowledged().expect("acknowledged");
    a.orphan();
    let got = s
        .try_acquire_for(scale(ttl + Duration::from_secs(5)))
        .unwrap()
        .expect("the orphaned permit expired");
    let at = BootInstant::now();
    assert!(
        at >= last_ack + ttl,
        "taken {:?} after the last renewal",
        at - last_ack
    );
    assert!(permit.lost().is_lost());
    got.release().unwrap();
    drop(permit);
    b.close().unwrap();
    drop(a);
}

#[test]
fn fault_a_paused_holders_renewal_does_not_resurrect_its_lock() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(2);
    let lock = name("resurrect");
    let dir = TestDir::new("redis-resurrect");
    let mut old = Worker::start(&worker_binary(), "old", dir.path());
    old.ok(
        &format!("connect redis {} {}", server.url(), ttl.as_millis()),
        Duration::from_secs(15),
    );
    let reply = old.ok(&format!("lock {lock}"), Duration::from_secs(10));
    let holder = field(&reply, "holder").to_owned();
    let member = holder.rsplit_once('/').unwrap().1.to_owned();
    let session_key = format!("{NS}s:{}", member.split('-').next().unwrap());
    old.pause();
    wait_until(
        "the paused holder's session expired",
        scale(ttl + Duration::from_secs(5)),
        || !server.cmd::<bool>(&["EXISTS", &session_key]),
    );
    let c = connect(&server, Duration::from_secs(10));
    let new = c
        .mutex(&lock)
        .unwrap()
        .try_lock_for(scale(Duration::from_secs(10)))
        .unwrap()
        .expect("another client takes the lock");
    old.resume();
    wait_until(
        "the old holder knows it lost",
        scale(Duration::from_secs(10)),
        || field(&old.ok("status", Duration::from_secs(10)), "lost") != "no",
    );
    // It has renewed since it resumed (its renewal timer fired at once).
    assert!(
        !server.cmd::<bool>(&["EXISTS", &session_key]),
        "the session stays gone"
    );
    let lock_key = format!("{NS}lock:{lock}");
    let value: Option<String> = server.cmd(&["GET", &lock_key]);
    let new_member = new.holder().rsplit_once('/').unwrap().1;
    assert_eq!(
        value.as_deref(),
        Some(new_member),
        "the new holder's, not the old one's"
    );
    let refused = old.request(&format!("write {lock}-r 1"), Duration::from_secs(10));
    assert!(refused.expect_err("refused").starts_with("fence-rejected"));
    new.check().expect("the new holder holds");
    new.release().unwrap();
    c.close().unwrap();
}

fn wait_for_lock(m: &recipes_redis::Mutex) -> u64 {
    let g = m
        .try_lock_for(scale(Duration::from_secs(20)))
        .unwrap()
        .expect("the lock is free again");
    let t = g.token().0;
    g.release().unwrap();
    t
}

#[test]
fn fault_a_restart_with_appendfsync_always_keeps_locks_sessions_and_fences() {
    let server = RedisServer::start_with(RedisConfig {
        aof: Some("always"),
        ..RedisConfig::default()
    });
    let ttl = Duration::from_secs(5);
    let holder = connect(&server, ttl);
    let lock = name("aof");
    let m = holder.mutex(&lock).unwrap();
    let g = m.lock().unwrap();
    let fence = g.token().0;
    server.kill();
    let restarted = BootInstant::now();
    server.restart();
    let lock_key = format!("{NS}lock:{lock}");
    let kept: Option<String> = server.cmd(&["GET", &lock_key]);
    assert!(kept.is_some(), "the lock key survived the restart");
    wait_until("a renewal after the restart", scale(ttl), || {
        holder.last_acknowledged().is_some_and(|a| a > restarted)
    });
    g.check()
        .expect("the guard still holds: its session survived");
    g.release().unwrap();
    let fence_key = format!("{NS}fence:{lock}");
    let stored: Option<u64> = server.cmd(&["GET", &fence_key]);
    assert_eq!(stored, Some(fence), "the last fence survived");
    let next = wait_for_lock(&m);
    assert!(next > fence, "{next} after {fence}");
    holder.close().unwrap();
}

#[test]
fn fault_a_restart_without_persistence_loses_locks_but_never_repeats_a_fence() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(2);
    let client = connect(&server, ttl);
    let lock = name("volatile");
    let m = client.mutex(&lock).unwrap();
    let first = wait_for_lock(&m);
    let g = m.lock().unwrap();
    assert!(g.token().0 > first);
    server.kill();
    server.restart();
    g.lost()
        .wait_timeout(scale(ttl + Duration::from_secs(5)))
        .expect("the holder learns its lock is gone");
    let again = wait_for_lock(&m);
    assert!(
        again > g.token().0,
        "fence {again} after a restart without persistence, {} before",
        g.token().0
    );
    drop(g);
    client.close().unwrap();
}

/// A release whose message is lost (the holder's entry removed by hand:
/// nothing is published) costs the waiter one poll, never the TTL.
#[test]
fn a_lost_wake_costs_one_poll_not_the_ttl() {
    let server = RedisServer::shared();
    let ttl = Duration::from_secs(30);
    let lock = name("lost-wake");
    let holder = connect(server, ttl);
    let held = holder.mutex(&lock).unwrap().lock().unwrap();
    let waiter = connect(server, ttl);
    let m = waiter.mutex(&lock).unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let taker = std::thread::spawn(move || {
        let g = m.lock().expect("the waiter acquires");
        tx.send(std::time::Instant::now()).unwrap();
        g.release().unwrap();
    });
    wait_until("the waiter listens", scale(Duration::from_secs(10)), || {
        let channels: Vec<String> = server.cmd(&["PUBSUB", "CHANNELS", &format!("{NS}gone:*")]);
        let member = held.holder().rsplit_once('/').unwrap().1;
        channels.contains(&format!("{NS}gone:{member}"))
    });
    let member = held.holder().rsplit_once('/').unwrap().1.to_owned();
    let removed = std::time::Instant::now();
    let _: i64 = server.cmd(&["ZREM", &format!("{NS}q:{lock}"), &member]);
    let _: i64 = server.cmd(&["DEL", held.hold_key()]);
    let taken = rx
        .recv_timeout(scale(Duration::from_secs(10)))
        .expect("taken over");
    taker.join().unwrap();
    assert!(
        taken - removed < scale(Duration::from_secs(2)),
        "taken {:?} after the silent removal; the poll is 500 ms, the TTL {ttl:?}",
        taken - removed
    );
    drop(held);
    holder.close().unwrap();
    waiter.close().unwrap();
}

/// The calls of `command` the server has served, from `INFO commandstats`
/// (commands run inside scripts included).
fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats: String = server.cmd(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// A client polls every entry it holds (a hold key deleted by hand or
/// lost with a failover shows as loss) in one `MGET` a tick, not a `GET`
/// per entry: its requests do not grow with the locks it holds.
#[test]
fn a_client_polls_every_entry_it_holds_in_one_request_a_tick() {
    let server = RedisServer::start();
    // Renewals (a GET per held entry inside their script) every 10 s.
    let c = connect(&server, Duration::from_secs(30));
    let base = name("polled");
    let held: Vec<_> = (0..50)
        .map(|i| c.mutex(&format!("{base}/{i}")).unwrap().lock().unwrap())
        .collect();
    let (mget, get) = (calls(&server, "mget"), calls(&server, "get"));
    // Three polls: the first may have begun before the count.
    wait_until("three polls", scale(Duration::from_secs(10)), || {
        calls(&server, "mget") >= mget + 3
    });
    let gets = calls(&server, "get") - get;
    // A GET per entry and poll would be at least 100 (two whole polls).
    assert!(gets < 100, "{gets} GETs over three polls of 50 entries");
    let _: i64 = server.cmd(&["DEL", held[7].hold_key()]);
    assert!(
        held[7]
            .lost()
            .wait_timeout(scale(Duration::from_secs(5)))
            .is_some(),
        "the entry whose key was deleted is lost"
    );
    assert!(held.iter().enumerate().all(|(i, g)| i == 7 || !g.is_lost()));
    for g in held {
        let _ = g.release();
    }
    c.close().unwrap();
    assert!(our_keys(&server).is_empty(), "{:?}", our_keys(&server));
}
