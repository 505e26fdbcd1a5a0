//! A primary, one replica and a sentinel: what a promotion does to locks
//! and fences, with and without `WAIT` (the guide's "Choosing a backend:
//! Redis"). Replication is asynchronous: a write the replica had not
//! received when the primary died is gone after the promotion.

use std::time::Duration;

use integration::{scale, wait_until, Proxy, RedisConfig, RedisSentinel, RedisServer};
use recipes_core::{Client, Error, FenceGate};
use recipes_redis::RedisClient;

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
        wait_until(
            "the replica is in sync",
            scale(Duration::from_secs(20)),
            || {
                let info: String = replica.cmd(&["INFO", "replication"]);
                info.contains("master_link_status:up")
            },
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
    pair.fail_over();
    let b = client(&pair.replica, ttl, 0);
    let second = b
        .mutex(name)
        .unwrap()
        .try_lock()
        .unwrap()
        .expect("the promoted replica never heard of the lock");
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
    let warm = a.mutex("/failover/warm").unwrap().try_lock().unwrap();
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
