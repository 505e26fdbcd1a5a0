//! A primary, one replica and a sentinel: what a promotion does to locks
//! and fences, with and without `WAIT` (the guide's "Choosing a backend:
//! Redis"). Replication is asynchronous: a write the replica had not
//! received when the primary died is gone after the promotion.

use std::time::Duration;

use integration::{scale, wait_until, Proxy, RedisConfig, RedisSentinel, RedisServer};
use recipes_core::{Client, Error, FenceGate};
use recipes_redis::{RedisClient, RedisLock};

/// A primary, a replica of it through a proxy (which can hold back and
/// then drop what the primary sends), and a sentinel that knows both.
struct Pair {
    primary: RedisServer,
    link: Proxy,
    replica: RedisServer,
    sentinel: RedisSentinel,
}

impl Pair {
    fn start() -> Pair {
        let primary = RedisServer::start();
        let link = Proxy::start(primary.addr());
        let replica = RedisServer::start_with(RedisConfig {
            replica_of: Some(link.addr()),
            ..RedisConfig::default()
        });
        // Both sides: the replica says its link is up before the primary
        // counts it online (after the replica's first acknowledgement),
        // and a `WAIT` in between counts no replica.
        wait_until(
            "the replica is in sync",
            scale(Duration::from_secs(20)),
            || {
                let info: String = replica.cmd(&["INFO", "replication"]);
                let primary_info: String = primary.cmd(&["INFO", "replication"]);
                info.contains("master_link_status:up") && primary_info.contains("state=online")
            },
        );
        // And the whole path of an acknowledgement, proxy included: the
        // primary hears the replica acknowledge a write (`WAIT` counts a
        // connection's own writes only).
        let acked = acknowledged(&primary, scale(Duration::from_secs(10)));
        assert_eq!(
            acked,
            1,
            "the replica acknowledges a write\n{}",
            replication(&primary, &replica)
        );
        let sentinel = RedisSentinel::start(&primary, 1);
        Pair {
            primary,
            link,
            replica,
            sentinel,
        }
    }

    /// The replica receives nothing from now on; what the primary sends
    /// waits in the link.
    fn lag(&self) {
        self.link.blackhole();
    }

    /// Kill the primary (what the link held back is dropped with it) and
    /// wait until the sentinel promoted the replica.
    fn fail_over(&self) {
        self.primary.kill();
        self.link.drop_connections();
        wait_until(
            "the sentinel promoted the replica",
            scale(Duration::from_secs(30)),
            || {
                self.sentinel.primary_port() == Some(self.replica.addr().port())
                    && self.replica.role() == "master"
            },
        );
    }
}

/// How many replicas acknowledged a write of the harness within `wait`.
fn acknowledged(primary: &RedisServer, wait: Duration) -> i64 {
    let client = redis::Client::open(primary.url()).expect("the primary's URL");
    let mut conn = client.get_connection().expect("connect to the primary");
    let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    let (acked,): (i64,) = redis::pipe()
        .cmd("INCR")
        .arg("harness:acknowledged")
        .ignore()
        .cmd("WAIT")
        .arg(1)
        .arg(millis)
        .query(&mut conn)
        .expect("a write and WAIT");
    acked
}

/// What both servers say of their replication, and their logs' tails:
/// for a failure's message.
fn replication(primary: &RedisServer, replica: &RedisServer) -> String {
    let info =
        |s: &RedisServer| s.try_cmd::<String>(&redis::cmd("INFO").arg("replication").clone());
    format!(
        "primary: {:?}\nreplica: {:?}\nprimary's log: {}\nreplica's log: {}",
        info(primary),
        info(replica),
        primary.log_tail(),
        replica.log_tail()
    )
}

/// After the failover: a client of the promoted replica (no replica left
/// to wait for) and the lock `name` it took at once (`why` it is free).
fn taken_after_the_failover(
    pair: &Pair,
    name: &str,
    ttl: Duration,
    why: &str,
) -> (RedisClient, recipes_core::MutexGuard<RedisLock>) {
    pair.fail_over();
    let b = client(&pair.replica, ttl, 0);
    let second = b.mutex(name).unwrap().try_lock().unwrap().expect(why);
    (b, second)
}

fn client(server: &RedisServer, ttl: Duration, replicas: u32) -> RedisClient {
    RedisClient::builder(server.url())
        .ttl(ttl)
        .rpc_timeout(Duration::from_secs(2))
        .wait_for_replicas(replicas, Duration::from_millis(500))
        .connect()
        .expect("connect")
}

/// The documented hazard: a lock taken while the replica lagged is lost
/// with the primary, and the promoted replica gives it to a second
/// holder while the first still believes it holds. The fence still rises
/// (it is minted from the server's clock, and both servers share this
/// host's), so a resource that admits fences ≥ the highest seen refuses
/// the first holder once the second wrote.
#[test]
fn fault_a_promotion_without_wait_loses_the_lock_but_the_fence_still_rises() {
    let pair = Pair::start();
    let ttl = Duration::from_secs(10);
    let name = "/failover/no-wait";
    let a = client(&pair.primary, ttl, 0);
    let gate = FenceGate::new();
    pair.lag();
    let held = a.mutex(name).unwrap().lock().unwrap();
    gate.admit(held.token()).expect("the first holder writes");
    let why = "the promoted replica never heard of the lock";
    let (b, second) = taken_after_the_failover(&pair, name, ttl, why);
    assert!(second.token() > held.token(), "the fence never repeats");
    gate.admit(second.token())
        .expect("the second holder writes");
    assert!(
        gate.admit(held.token()).is_err(),
        "the first holder is fenced out"
    );
    drop(second);
    b.close().unwrap();
    drop(held);
    drop(a);
}

/// With `WAIT 1`: an acquisition the replica acknowledged survives the
/// promotion — the next holder waits for the first one's session to
/// expire and gets a higher fence, which the resource prefers.
#[test]
fn fault_a_promotion_with_wait_never_lets_two_holders_write_past_the_fence() {
    let pair = Pair::start();
    let ttl = Duration::from_secs(3);
    let name = "/failover/wait";
    let a = client(&pair.primary, ttl, 1);
    let gate = FenceGate::new();
    let held = a.mutex(name).unwrap().lock().unwrap();
    gate.admit(held.token()).expect("the first holder writes");
    pair.fail_over();
    // The new primary has no replica left: nothing to wait for.
    let b = client(&pair.replica, ttl, 0);
    let m = b.mutex(name).unwrap();
    assert!(
        m.try_lock().unwrap().is_none(),
        "the lock survived the promotion"
    );
    let second = m
        .try_lock_for(scale(ttl + Duration::from_secs(10)))
        .unwrap()
        .expect("the first holder's session expires on the new primary");
    assert!(second.token() > held.token(), "the fence counter survived");
    assert!(held.lost().is_lost(), "the first holder knows it lost");
    gate.admit(second.token()).unwrap();
    assert!(
        gate.admit(held.token()).is_err(),
        "the old holder is fenced out"
    );
    second.release().unwrap();
    b.close().unwrap();
    drop(held);
    drop(a);
}

/// With `WAIT 1` and no replica answering, the acquisition fails typed
/// and is undone: nothing is left on the primary.
#[test]
fn fault_an_acquisition_no_replica_acknowledged_fails_and_is_undone() {
    let pair = Pair::start();
    let a = client(&pair.primary, Duration::from_secs(5), 1);
    let name = "/failover/unacknowledged";
    pair.lag();
    let r = a.mutex(name).unwrap().try_lock();
    assert!(matches!(r, Err(Error::Indeterminate { .. })), "{r:?}");
    pair.link.restore();
    assert!(a.contenders(name).unwrap().is_empty(), "undone");
    let lock: Option<String> = pair
        .primary
        .cmd(&["GET", "{recipes}:lock:/failover/unacknowledged"]);
    assert_eq!(lock, None);
    a.close().unwrap();
}

/// An acquisition whose reply was lost on a dropped connection goes on on
/// a new one, with the replica cut off: it fails typed, and nothing is
/// left. (`WAIT` counts the writes of its own connection; this run also
/// passed before `replicated` wrote on the connection it waits on — the
/// acquisition wrote again on its new connection — so the narrower case,
/// a resent enter that writes nothing, is argued in `rpc.rs`, not
/// reproduced here.)
#[test]
fn fault_an_acquisition_whose_reply_is_lost_with_the_replica_cut_off_fails_and_is_undone() {
    let pair = Pair::start();
    let front = Proxy::start(pair.primary.addr());
    // A TTL long enough that no renewal (a write) falls in the window.
    let a = RedisClient::builder(format!("redis://{}", front.addr()))
        .ttl(Duration::from_secs(60))
        .rpc_timeout(Duration::from_secs(2))
        .wait_for_replicas(1, Duration::from_millis(500))
        .connect()
        .expect("connect");
    let name = "/failover/resent";
    // The session and the functions first: the enter is then the first
    // request of the acquisition.
    let warm = a.mutex("/failover/warm").unwrap().try_lock();
    let warm =
        warm.unwrap_or_else(|e| panic!("{e}\n{}", replication(&pair.primary, &pair.replica)));
    warm.expect("free").release().unwrap();
    pair.lag();
    front.freeze_replies();
    let taking = {
        let a = a.clone();
        std::thread::spawn(move || a.mutex(name).unwrap().try_lock().map(|g| g.is_some()))
    };
    wait_until(
        "the enter is on the primary",
        scale(Duration::from_secs(10)),
        || {
            let lock: Option<String> = pair
                .primary
                .cmd(&["GET", "{recipes}:lock:/failover/resent"]);
            lock.is_some()
        },
    );
    front.drop_connections();
    front.restore();
    let r = taking.join().unwrap();
    assert!(matches!(r, Err(Error::Indeterminate { .. })), "{r:?}");
    pair.link.restore();
    assert!(a.contenders(name).unwrap().is_empty(), "undone");
    a.close().unwrap();
}

/// With `WAIT 1`, a renewal counts only once the replica has it: a holder
/// whose replica stops acknowledging loses by its own deadline, which
/// falls before the replica's copy of the session expires — so when the
/// promoted replica gives the lock to another client, the first holder
/// already knows it lost. (While renewals were not waited for, the
/// primary kept extending a session whose replica copy was expiring: the
/// second holder got in while the first still believed it held.)
#[test]
fn fault_a_holder_whose_renewals_no_replica_acknowledges_has_lost_before_a_promotion_frees_it() {
    let pair = Pair::start();
    let ttl = Duration::from_secs(3);
    let name = "/failover/renewals";
    let a = client(&pair.primary, ttl, 1);
    let held = a.mutex(name).unwrap().lock().unwrap();
    let sessions = || pair.replica.keys("{recipes}:s:*");
    let live = |keys: &[String]| {
        keys.iter()
            .filter(|k| pair.replica.cmd::<i64>(&["EXISTS", k.as_str()]) == 1)
            .count()
    };
    assert_eq!(live(&sessions()), 1, "the replica has the holder's session");
    pair.lag();
    wait_until(
        "the replica's copy of the session expired",
        scale(ttl + Duration::from_secs(10)),
        || live(&sessions()) == 0,
    );
    let why = "the session expired on the promoted replica";
    let (b, second) = taken_after_the_failover(&pair, name, ttl, why);
    assert!(
        held.lost().is_lost(),
        "the first holder knew it lost before the second got in"
    );
    assert!(second.token() > held.token(), "the fence never repeats");
    second.release().unwrap();
    b.close().unwrap();
    drop(held);
    drop(a);
}

/// How many `WAIT`s `server` ran.
fn waits(server: &RedisServer) -> u64 {
    let stats: String = server.cmd(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// `WAIT`s run on a connection of their own, one round for every caller
/// queued: while four acquisitions wait on a replica that does not
/// answer, the client's other requests (a read here; a renewal or a
/// release the same) do not queue behind them, and callers waiting at
/// once share rounds (fewer `WAIT`s than calls).
#[test]
fn fault_nothing_queues_behind_the_waits_for_a_lagging_replica() {
    let pair = Pair::start();
    let wait = Duration::from_millis(900);
    let a = RedisClient::builder(pair.primary.url())
        .ttl(Duration::from_secs(30))
        .rpc_timeout(Duration::from_secs(2))
        .wait_for_replicas(1, wait)
        .connect()
        .expect("connect");
    // The session and the functions first.
    let warm = a.mutex("/failover/queue-warm").unwrap().try_lock().unwrap();
    warm.expect("free").release().unwrap();
    pair.lag();
    let names: Vec<String> = (0..4).map(|i| format!("/failover/queue-{i}")).collect();
    let before = waits(&pair.primary);
    let takers: Vec<_> = names
        .iter()
        .map(|name| {
            let (a, name) = (a.clone(), name.clone());
            std::thread::spawn(move || a.mutex(&name).unwrap().try_lock().map(|g| g.is_some()))
        })
        .collect();
    wait_until(
        "every acquisition is on the primary, waiting for the replica",
        scale(Duration::from_secs(10)),
        || {
            names.iter().all(|n| {
                let lock: Option<String> =
                    pair.primary.cmd(&["GET", &format!("{{recipes}}:lock:{n}")]);
                lock.is_some()
            })
        },
    );
    for _ in 0..5 {
        let asked = std::time::Instant::now();
        a.contenders("/failover/queue-0").unwrap();
        let took = asked.elapsed();
        assert!(
            took < scale(Duration::from_millis(300)),
            "a read waited {took:?} behind the waits"
        );
    }
    for taker in takers {
        let r = taker.join().unwrap();
        assert!(matches!(r, Err(Error::Indeterminate { .. })), "{r:?}");
    }
    // Four acquisitions and their four undos: eight calls.
    let rounds = waits(&pair.primary) - before;
    assert!(rounds < 8, "{rounds} WAITs for eight calls: one a call");
    pair.link.restore();
    for name in &names {
        assert!(a.contenders(name).unwrap().is_empty(), "undone");
    }
    a.close().unwrap();
}
