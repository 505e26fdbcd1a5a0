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

/// Every command's calls in the server's `INFO commandstats` (those a
/// script runs included), but the test's own `INFO` and `CONFIG`.
fn commands(server: &RedisServer) -> u64 {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(":calls="))
        .filter(|(command, _)| !["info", "config"].contains(command))
        .filter_map(|(_, rest)| rest.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// The server's commands per renewal while the client only holds what it
/// holds: over six renewals (`EVALSHA`, the one script an idle client
/// runs), every command counted, the client's poll of its held entries
/// included.
fn commands_per_renewal(server: &RedisServer) -> f64 {
    let _: String = server.cmd(&["CONFIG", "RESETSTAT"]);
    wait_until("six renewals ran", scale(Duration::from_secs(20)), || {
        calls(server, "evalsha") >= 6
    });
    let (all, renewals) = (commands(server), calls(server, "evalsha"));
    all as f64 / renewals as f64
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
    let at_one = commands_per_renewal(&server);
    let many: Vec<_> = (0..200)
        .map(|i| {
            c.mutex(&name(&format!("many-{i}")))
                .unwrap()
                .lock()
                .unwrap()
        })
        .collect();
    let at_many = commands_per_renewal(&server);
    eprintln!("commands a renewal: {at_one:.1} at 1 held, {at_many:.1} at 201 held");
    assert!(
        at_many <= at_one * 1.5 + 1.0,
        "keep-alive at 201 held runs {at_many} commands a renewal, at 1 held {at_one}: \
         it must not grow with the number held"
    );
    assert!(
        at_one <= 10.0,
        "a renewal extends the session, sets its deadline and sweeps: {at_one}"
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
fn uncontended_lock_and_release_is_two_scripts_counted_by_the_server() {
    let server = RedisServer::start();
    // No renewal while it runs (one a minute/3).
    let c = RedisClient::builder(server.url())
        .ttl(Duration::from_secs(60))
        .connect()
        .unwrap();
    let mutex = c.mutex(&name("cycle")).unwrap();
    mutex.lock().unwrap().release().unwrap();
    let cycles = 100;
    let _: String = server.cmd(&["CONFIG", "RESETSTAT"]);
    for _ in 0..cycles {
        mutex.lock().unwrap().release().unwrap();
    }
    // Scripts by their SHA, the queue's functions by name.
    let scripts = calls(&server, "evalsha") + calls(&server, "fcall");
    let evals = calls(&server, "eval");
    let all = commands(&server);
    eprintln!(
        "{cycles} cycles: {scripts} EVALSHA or FCALL, {evals} EVAL, {all} commands in all \
         ({:.1} a cycle, those the scripts ran included)",
        all as f64 / cycles as f64
    );
    // The raw minimum with the fence inside: one script that takes and
    // bumps the fence, one that deletes. A renewal may fall in: one more.
    assert_eq!(evals, 0, "scripts are sent by their SHA");
    assert!(
        (2 * cycles..=2 * cycles + 1).contains(&scripts),
        "{scripts} scripts for {cycles} cycles: the raw count is two a cycle"
    );
    // Inside them (each FCALL counted as one): the enter checks the session
    // (GET), probes the name's other recipes and its queue in one EXISTS,
    // queues and indexes the member (ZADD, HSET), takes (SET NX GET) and
    // mints (TIME, SET GET); the release checks the holder (GET), leaves
    // (ZREM, ZCARD, HDEL), deletes the lock with the empty queue's keys
    // (one DEL) and publishes it for observers. The poll of held entries
    // (MGET) aside, a renewal's commands (at most 10) if one fell in, and
    // a few of the client's own (its connection's).
    let polls = calls(&server, "mget");
    let renewals = scripts - 2 * cycles;
    assert!(
        all - polls <= 15 * cycles + 10 * renewals + 5,
        "{} commands for {cycles} cycles: at most 15 a cycle",
        all - polls
    );
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

/// The session id a Redis holder (`<queue>/<session>-<uuid>`) names.
fn session_of(holder: &str) -> String {
    let member = holder.rsplit_once('/').unwrap().1;
    member.split('-').next().unwrap().to_owned()
}

/// A worker on its own session of TTL `ttl` runs `request`, and is
/// killed while another client (`live`, renewing every TTL/3) lives and
/// takes nothing: within TTL + TTL/3 (and a little) of the kill, every key
/// of the killed session is gone — its session key, its index, its
/// deadline, and what it held — swept by the live client's renewal, no
/// taker of the name needed. `session` reads the worker's session id from
/// the request's reply. Returns the server and the live client.
fn killed_workers_keys_are_swept(
    test: &str,
    request: &str,
    session: impl Fn(&RedisServer, &str) -> String,
) -> (RedisServer, RedisClient) {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(1500);
    let live = RedisClient::builder(server.url())
        .ttl(ttl)
        .connect()
        .unwrap();
    let dir = TestDir::new(test);
    let mut worker = Worker::start(&worker_binary(), "holder", dir.path());
    worker.ok(
        &format!("connect redis {} {}", server.url(), ttl.as_millis()),
        Duration::from_secs(15),
    );
    let reply = worker.ok(request, Duration::from_secs(10));
    let sid = session(&server, &reply);
    let index = format!("{NS}h:{sid}");
    assert!(
        server.cmd::<bool>(&["EXISTS", &index]),
        "{request}: listed in its session's index"
    );
    let theirs: Vec<String> = server
        .keys(&format!("{NS}*"))
        .into_iter()
        .filter(|k| !k.starts_with(&format!("{NS}fence:")))
        .collect();
    worker.kill();
    let killed = Instant::now();
    let bound = scale(ttl + ttl / 3 + Duration::from_millis(500));
    let session_key = format!("{NS}s:{sid}");
    let deadlines = format!("{NS}deadlines");
    wait_until("the killed session's keys are swept", bound, || {
        !server.cmd::<bool>(&["EXISTS", &session_key])
            && !server.cmd::<bool>(&["EXISTS", &index])
            && server
                .cmd::<Option<f64>>(&["ZSCORE", &deadlines, &sid])
                .is_none()
    });
    let took = killed.elapsed();
    // Nothing of it is left: only what a released one keeps by design
    // (fences, the id and version counters, a semaphore's size) and the
    // live client's session.
    let kept = |k: &str| {
        [":fence:", ":sessions", ":gv", ":size:", ":s:", ":deadlines"]
            .iter()
            .any(|p| k.starts_with(&format!("{{recipes}}{p}")))
    };
    let left: Vec<String> = server
        .keys(&format!("{NS}*"))
        .into_iter()
        .filter(|k| !kept(k) || *k == session_key)
        .collect();
    assert!(
        left.is_empty(),
        "{request}: left {left:?} {took:?} after the kill (its keys were {theirs:?})"
    );
    eprintln!("{request}: swept {took:?} after the kill (TTL {ttl:?})");
    (server, live)
}

#[test]
fn fault_a_killed_holders_lock_keys_are_swept_while_another_client_lives() {
    let lock = name("swept-lock");
    let (_server, live) =
        killed_workers_keys_are_swept("redis-swept-lock", &format!("lock {lock}"), |_, r| {
            session_of(field(r, "holder"))
        });
    let g = live.mutex(&lock).unwrap().try_lock().unwrap();
    assert!(g.is_some(), "the swept lock is free");
    drop(g);
    live.close().unwrap();
}

#[test]
fn fault_a_killed_holders_permit_keys_are_swept_while_another_client_lives() {
    let sem = name("swept-sem");
    let (_server, live) =
        killed_workers_keys_are_swept("redis-swept-permit", &format!("permit {sem} 1"), |_, r| {
            session_of(field(r, "holder"))
        });
    let p = live.semaphore(&sem, 1).unwrap().try_acquire().unwrap();
    assert!(p.is_some(), "the swept permit is free");
    drop(p);
    live.close().unwrap();
}

#[test]
fn fault_a_killed_group_members_keys_are_swept_while_another_client_lives() {
    let group = name("swept-group");
    let request = format!("join {group} m1 data");
    let (_server, live) =
        killed_workers_keys_are_swept("redis-swept-member", &request, |server, _| {
            let owners = format!("{NS}go:{group}");
            server.cmd::<String>(&["HGET", &owners, "m1"])
        });
    let view = live.group(&group).unwrap().members().unwrap();
    assert!(view.members.is_empty(), "the swept member left: {view:?}");
    live.close().unwrap();
}

#[test]
fn fault_a_killed_holders_keys_are_swept_by_the_next_connect_when_no_client_lives() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(1000);
    let lock = name("swept-at-connect");
    let dir = TestDir::new("redis-swept-at-connect");
    let mut worker = Worker::start(&worker_binary(), "holder", dir.path());
    worker.ok(
        &format!("connect redis {} {}", server.url(), ttl.as_millis()),
        Duration::from_secs(15),
    );
    let reply = worker.ok(&format!("lock {lock}"), Duration::from_secs(10));
    let sid = session_of(field(&reply, "holder"));
    worker.kill();
    let (session_key, index) = (format!("{NS}s:{sid}"), format!("{NS}h:{sid}"));
    wait_until(
        "the killed holder's session key expired",
        scale(ttl + Duration::from_secs(1)),
        || !server.cmd::<bool>(&["EXISTS", &session_key]),
    );
    let lock_key = format!("{NS}lock:{lock}");
    assert!(
        server.cmd::<bool>(&["EXISTS", &index]) && server.cmd::<bool>(&["EXISTS", &lock_key]),
        "no client lives: nothing swept yet"
    );
    let c = RedisClient::builder(server.url())
        .ttl(Duration::from_secs(10))
        .connect()
        .unwrap();
    let left: Vec<String> = [&index, &lock_key]
        .into_iter()
        .filter(|k| server.cmd::<bool>(&["EXISTS", k]))
        .cloned()
        .collect();
    assert!(left.is_empty(), "the connect's grant swept: {left:?} left");
    c.close().unwrap();
}
