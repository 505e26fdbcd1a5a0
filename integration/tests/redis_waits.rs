//! Redis waits and the server's connections: an idle waiter (a barrier's
//! here; a double barrier's, a group watch's and a counter's wait share
//! its subscription) keeps one subscribed connection for as long as it
//! waits, where it opened one for every re-read (two a second). Each test
//! has a server of its own, whose connection count is the test's.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use integration::{scale, wait_until, RedisServer};
use recipes_core::Client;
use recipes_redis::RedisClient;

const NS: &str = "{recipes}:";

fn name(test: &str) -> String {
    format!("/redis-waits/{test}-{}", std::process::id())
}

/// The test's own connection to the server, so that its reads add none
/// to the count.
fn probe(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .expect("a connection of the test's own")
}

/// `total_connections_received` of `INFO stats`.
fn connections(probe: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(probe).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total_connections_received in {info:?}"))
}

/// Subscribers of `channel` (`PUBSUB NUMSUB`).
fn subscribers(probe: &mut redis::Connection, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(probe)
        .unwrap();
    reply.1
}

#[test]
fn idle_barrier_waiters_keep_one_connection_each_and_wake_on_removal() {
    const CLIENTS: usize = 4;
    const WAITERS: usize = 20;
    // How long the waiters are watched idle: a window to count in, no
    // synchronization.
    const IDLE: Duration = Duration::from_secs(3);
    let server = RedisServer::start();
    let clients: Vec<RedisClient> = (0..CLIENTS)
        .map(|_| RedisClient::connect(server.url()).unwrap())
        .collect();
    let name = name("idle");
    let channel = format!("{NS}wake:{name}");
    clients[0].barrier(&name).unwrap().set().unwrap();
    let mut probe = probe(&server);
    let before = connections(&mut probe);
    let (woke, wakes) = mpsc::channel();
    let waiters: Vec<_> = (0..WAITERS)
        .map(|i| {
            let barrier = clients[i % CLIENTS].barrier(&name).unwrap();
            let woke = woke.clone();
            thread::spawn(move || {
                let down = barrier.wait_timeout(scale(Duration::from_secs(60)));
                woke.send(Instant::now()).unwrap();
                down.unwrap()
            })
        })
        .collect();
    wait_until("every waiter subscribed", Duration::from_secs(20), || {
        subscribers(&mut probe, &channel) >= WAITERS as i64
    });
    let armed = connections(&mut probe);
    thread::sleep(IDLE);
    let idle = connections(&mut probe);
    eprintln!(
        "connections: {} while {WAITERS} waiters armed, {} more over {IDLE:?} idle",
        armed - before,
        idle - armed
    );
    // Room for one reconnect.
    assert!(
        idle - armed <= 1,
        "{} connections over {IDLE:?} of {WAITERS} idle waiters: an idle wait opens none",
        idle - armed
    );
    assert!(
        idle - before <= (WAITERS + CLIENTS) as u64,
        "{} connections for {WAITERS} waiters on {CLIENTS} clients",
        idle - before
    );
    let removed = Instant::now();
    clients[1].barrier(&name).unwrap().remove().unwrap();
    let mut last = removed;
    for _ in 0..WAITERS {
        let at = wakes
            .recv_timeout(scale(Duration::from_secs(10)))
            .expect("every waiter wakes");
        last = last.max(at);
    }
    for w in waiters {
        assert!(w.join().unwrap(), "the barrier went down");
    }
    let slowest = last - removed;
    eprintln!("every waiter woke {slowest:?} after the removal");
    assert!(
        slowest <= scale(Duration::from_secs(2)),
        "the last waiter woke {slowest:?} after the removal"
    );
    // The waits are over: their connections close after a linger.
    wait_until("every subscription closed", Duration::from_secs(10), || {
        subscribers(&mut probe, &channel) == 0
    });
    for c in clients {
        c.close().unwrap();
    }
}
