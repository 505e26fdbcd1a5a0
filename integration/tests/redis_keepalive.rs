//! Redis keep-alive, flat in the number held: one renewal of the client's
//! session per TTL/3 extends every hold of the session (a hold names its
//! session, and is free once that session key expired), and a killed
//! holder's lock still frees within its TTL. Tests whose names contain
//! `fault` get their own server and run one at a time.

use std::time::{Duration, Instant};

use integration::test_dir::TestDir;
use integration::worker::{worker_binary, Worker};
use integration::{scale, wait_until, RedisServer};
use recipes_core::Client;
use recipes_redis::RedisClient;

const NS: &str = "{recipes}:";

/// How often a queued waiter checks the entry ahead by itself.
const POLL: Duration = Duration::from_millis(500);

fn name(test: &str) -> String {
    format!("/redis-keepalive/{test}-{}", std::process::id())
}

fn field<'a>(reply: &'a str, key: &str) -> &'a str {
    reply
        .split_whitespace()
        .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {reply:?}"))
}

/// `calls` of `command` in the server's `INFO commandstats`.
fn calls(server: &RedisServer, command: &str) -> u64 {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Commands run inside the renewal scripts per renewal, while `client`
/// holds what it holds and does nothing else: `PEXPIRE`s per `EVALSHA`
/// (the renewal is the one script an idle client runs).
fn pexpires_per_renewal(server: &RedisServer) -> f64 {
    let _: String = server.cmd(&["CONFIG", "RESETSTAT"]);
    wait_until("five renewals ran", scale(Duration::from_secs(20)), || {
        calls(server, "evalsha") >= 5
    });
    let (pexpire, renewals) = (calls(server, "pexpire"), calls(server, "evalsha"));
    pexpire as f64 / renewals as f64
}

#[test]
fn renewal_work_does_not_grow_with_the_number_held() {
    let server = RedisServer::start();
    // A renewal every 333 ms.
    let c = RedisClient::builder(server.url())
        .ttl(Duration::from_secs(1))
        .connect()
        .unwrap();
    let one = c.mutex(&name("one")).unwrap().lock().unwrap();
    let at_one = pexpires_per_renewal(&server);
    let many: Vec<_> = (0..200)
        .map(|i| {
            c.mutex(&name(&format!("many-{i}")))
                .unwrap()
                .lock()
                .unwrap()
        })
        .collect();
    let at_many = pexpires_per_renewal(&server);
    assert!(
        at_many <= at_one + 0.5,
        "a renewal at 201 held runs {at_many} PEXPIREs, at 1 held {at_one}: it must not grow"
    );
    assert!(
        at_one <= 2.5,
        "a renewal extends the session and its index: {at_one}"
    );
    // Every hold is still its holder's: the renewal kept the session.
    for g in &many {
        g.check().expect("still held");
    }
    let lock_key = format!("{NS}lock:{}", name("one"));
    assert_eq!(
        server.cmd::<i64>(&["PTTL", &lock_key]),
        -1,
        "a hold key has no TTL of its own: its session's is the lease"
    );
    one.release().unwrap();
    many.into_iter().for_each(|g| g.release().unwrap());
    c.close().unwrap();
}

#[test]
fn fault_a_killed_holders_lock_frees_within_its_ttl() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(1500);
    let lock = name("killed");
    let dir = TestDir::new("redis-killed-holder");
    let mut holder = Worker::start(&worker_binary(), "holder", dir.path());
    holder.ok(
        &format!("connect redis {} {}", server.url(), ttl.as_millis()),
        Duration::from_secs(15),
    );
    let reply = holder.ok(&format!("lock {lock}"), Duration::from_secs(10));
    let old_fence: u64 = field(&reply, "token").parse().unwrap();
    let member = field(&reply, "holder")
        .rsplit_once('/')
        .unwrap()
        .1
        .to_owned();
    let session_key = format!("{NS}s:{}", member.split('-').next().unwrap());

    let c = RedisClient::builder(server.url())
        .ttl(Duration::from_secs(10))
        .connect()
        .unwrap();
    let mutex = c.mutex(&lock).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let g = mutex
                .try_lock_for(scale(Duration::from_secs(30)))
                .unwrap()
                .expect("the killed holder's lock frees");
            let at = Instant::now();
            let session_left = server.cmd::<bool>(&["EXISTS", &session_key]);
            (g, at, session_left)
        });
        wait_until(
            "the waiter is queued",
            scale(Duration::from_secs(10)),
            || c.contenders(&lock).unwrap().len() >= 2,
        );
        holder.kill();
        let killed = Instant::now();
        let (g, at, session_left) = waiter.join().unwrap();
        let took = at.saturating_duration_since(killed);
        assert!(
            !session_left,
            "taken only once the killed holder's session key expired"
        );
        assert!(
            took <= scale(ttl + POLL + Duration::from_millis(500)),
            "the lock freed {took:?} after the kill, past its TTL {ttl:?} and a poll"
        );
        assert!(g.token().0 > old_fence, "a higher fence");
        g.release().unwrap();
    });
    c.close().unwrap();
}
