//! The ZooKeeper and etcd clients over the runtime bridge, against real
//! servers: connect, one round trip, close; bad input; unreachable hosts; the
//! runtime keeps the session alive while no caller blocks; a client in a
//! worker process; etcd's loss policies at a dropped connection.

use recipes_core::Client as _;
use std::time::{Duration, Instant};

use integration::worker::{worker_binary, Worker};
use integration::{scale, wait_until, EtcdServer, ZkServer};
use recipes_core::{Error, LossPolicy, LossReason};
use recipes_etcd::EtcdClient;
use recipes_zk::ZkClient;

/// A loopback port nothing listens on.
fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn invalid(r: Result<impl std::fmt::Debug, Error>) -> String {
    match r {
        Err(Error::InvalidArgument(msg)) => msg,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn zk_client_connects_round_trips_and_closes_its_session() {
    let server = ZkServer::shared();
    let client = ZkClient::builder(server.connect_string())
        .session_timeout(Duration::from_secs(4))
        .connect()
        .unwrap();
    assert_eq!(client.session_timeout(), Duration::from_secs(4));
    client.ping().unwrap();
    let sid = format!("sid=0x{:x}", client.session_id().unwrap());
    assert!(
        server.four_letter("cons").contains(&sid),
        "session listed by cons"
    );
    let _ = client.close_within(Duration::from_secs(5));
    // CloseSession reached the server: the session is gone at once, not
    // after its timeout.
    wait_until("session gone from cons", Duration::from_secs(3), || {
        !server.four_letter("cons").contains(&sid)
    });
    assert!(matches!(client.ping(), Err(Error::Closed)));
}

/// A server that grants less than the asked session timeout (its
/// maxSessionTimeout) is refused at connect, in the words `recipes
/// doctor` uses (core's `granted_ttl_hazard`), not silently clamped.
#[test]
fn zk_session_timeout_above_the_servers_maximum_is_refused() {
    let server = ZkServer::shared();
    let max = server.config().max_session_timeout();
    let asked = max + Duration::from_secs(10);
    let msg = invalid(
        ZkClient::builder(server.connect_string())
            .session_timeout(asked)
            .connect(),
    );
    let words = recipes_core::store::granted_ttl_hazard("ZooKeeper", asked, max).unwrap();
    assert_eq!(msg, words);
    // At the maximum, it connects.
    let client = ZkClient::builder(server.connect_string())
        .session_timeout(max)
        .connect()
        .unwrap();
    assert_eq!(client.session_timeout(), max);
}

#[test]
fn zk_session_stays_alive_while_no_caller_blocks() {
    // The runtime thread answers the server's session pings on its own; a
    // client nobody calls for three session timeouts keeps its session.
    let server = ZkServer::shared();
    let client = ZkClient::builder(server.connect_string())
        .session_timeout(Duration::from_secs(1))
        .connect()
        .unwrap();
    let sid = format!("sid=0x{:x}", client.session_id().unwrap());
    let quiet_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < quiet_until {
        // Only the server is asked; the client is left alone.
        assert!(
            server.four_letter("cons").contains(&sid),
            "session still alive"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    client.ping().unwrap();
}

#[test]
fn zk_bad_settings_are_typed_errors() {
    let msg = invalid(ZkClient::builder("").connect());
    assert!(msg.contains("empty host"), "{msg}");
    invalid(ZkClient::builder("127.0.0.1:2181,").connect());
    let msg = invalid(
        ZkClient::builder("127.0.0.1:2181")
            .session_timeout(Duration::ZERO)
            .connect(),
    );
    assert!(msg.contains("session timeout"), "{msg}");
    invalid(
        ZkClient::builder("127.0.0.1:2181")
            .rpc_timeout(Duration::from_secs(10 * 24 * 3600))
            .connect(),
    );
    let msg = invalid(
        ZkClient::builder("127.0.0.1:2181")
            .session_timeout(Duration::from_millis(10))
            .connect(),
    );
    assert!(msg.contains("at least"), "{msg}");
    let msg = invalid(
        ZkClient::builder("127.0.0.1:2181")
            .session_timeout(Duration::from_secs(2))
            .lease_slack(Duration::from_millis(1500))
            .connect(),
    );
    assert!(msg.contains("lease slack"), "{msg}");
}

/// The server grants at most its maxSessionTimeout (20 s for the shared
/// one): a slack that the requested 60 s could carry but the granted 20 s
/// cannot is refused at connect, not turned into locks that are lost the
/// moment they are taken.
#[test]
fn zk_a_grant_too_short_for_the_slack_is_a_typed_error() {
    let server = ZkServer::shared();
    assert_eq!(
        server.config().max_session_timeout(),
        Duration::from_secs(20)
    );
    let msg = invalid(
        ZkClient::builder(server.connect_string())
            .session_timeout(Duration::from_secs(60))
            .lease_slack(Duration::from_secs(15))
            .connect(),
    );
    assert!(
        msg.contains("the session timeout the server granted of 20s"),
        "{msg}"
    );
}

#[test]
fn zk_unreachable_hosts_fail_within_the_connect_timeout() {
    let hosts = format!("127.0.0.1:{}", dead_port());
    let started = Instant::now();
    let r = ZkClient::builder(hosts.clone())
        .connect_timeout(Duration::from_millis(800))
        .connect();
    let took = started.elapsed();
    match r {
        Err(e @ Error::Backend { .. }) => {
            assert!(e.to_string().contains(&hosts), "names the hosts: {e}");
            assert!(e.is_retryable());
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
    assert!(took < scale(Duration::from_secs(5)), "took {took:?}");
}

#[test]
fn zk_runtime_death_closes_the_client() {
    let client = ZkClient::connect(ZkServer::shared().connect_string()).unwrap();
    let root = client.runtime().loss_root().signal();
    client.runtime().crash_for_tests();
    assert!(root.wait_timeout(scale(Duration::from_secs(5))).is_some());
    assert!(matches!(client.ping(), Err(Error::Closed)));
}

/// A latch whose runtime died has no task left to wait for: `close`
/// returns at once instead of timing out.
#[test]
fn a_latch_closed_after_its_runtime_died_returns_at_once() {
    let client = EtcdClient::connect(EtcdServer::shared().endpoints()).unwrap();
    let name = format!("/recipes-test/clients/latch-{}", std::process::id());
    let latch = client.leader_latch(&name, "a").unwrap();
    latch.start();
    assert!(latch.await_leadership(scale(Duration::from_secs(10))));
    let root = client.runtime().loss_root().signal();
    client.runtime().crash_for_tests();
    assert!(root.wait_timeout(scale(Duration::from_secs(5))).is_some());
    let started = Instant::now();
    latch.close().unwrap();
    assert!(started.elapsed() < scale(Duration::from_secs(1)));
}

#[test]
fn etcd_client_connects_round_trips_and_closes() {
    let server = EtcdServer::shared();
    let client = EtcdClient::connect(server.endpoints()).unwrap();
    client.ping().unwrap();
    let _ = client.close_within(Duration::from_secs(2));
    assert!(matches!(client.ping(), Err(Error::Closed)));
}

#[test]
fn etcd_bad_settings_are_typed_errors() {
    let none: [&str; 0] = [];
    let msg = invalid(EtcdClient::connect(none));
    assert!(msg.contains("no etcd endpoints"), "{msg}");
    invalid(EtcdClient::connect([""]));
    invalid(EtcdClient::connect(["127.0.0.1:1,127.0.0.1:2"]));
    invalid(
        EtcdClient::builder(["127.0.0.1:2379"])
            .rpc_timeout(Duration::ZERO)
            .connect(),
    );
    let msg = invalid(
        EtcdClient::builder(["127.0.0.1:2379"])
            .ttl(Duration::from_secs(2))
            .lease_slack(Duration::from_millis(1500))
            .connect(),
    );
    assert!(msg.contains("lease slack"), "{msg}");
}

#[test]
fn etcd_unreachable_endpoints_fail_within_the_connect_timeout() {
    let endpoint = format!("127.0.0.1:{}", dead_port());
    let started = Instant::now();
    let r = EtcdClient::builder([endpoint.clone()])
        .connect_timeout(Duration::from_millis(800))
        .connect();
    let took = started.elapsed();
    match r {
        Err(e @ Error::Backend { .. }) => {
            assert!(e.to_string().contains(&endpoint), "names the endpoint: {e}")
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
    assert!(took < scale(Duration::from_secs(5)), "took {took:?}");
}

#[test]
fn a_worker_process_runs_a_client_of_each_kind() {
    let dir = integration::test_dir::TestDir::new("worker");
    let mut w = Worker::start(&worker_binary(), "w1", dir.path());
    let pid: u32 = w.ok("pid", Duration::from_secs(5)).parse().unwrap();
    assert_eq!(pid, w.pid());
    let reply = w.ok(
        &format!("connect zk {} 4000", ZkServer::shared().connect_string()),
        Duration::from_secs(15),
    );
    assert!(reply.contains("timeout_ms=4000"), "{reply}");
    assert!(w.ok("ping", Duration::from_secs(5)).starts_with("rtt_us="));
    let mut e = Worker::start(&worker_binary(), "w2", dir.path());
    e.ok(
        &format!(
            "connect etcd {} 10000",
            EtcdServer::shared().endpoints().join(",")
        ),
        Duration::from_secs(15),
    );
    e.ok("ping", Duration::from_secs(5));
    let err = e.request("bogus", Duration::from_secs(5)).unwrap_err();
    assert!(err.starts_with("usage"), "{err}");
}

/// No duration a caller can pass panics (issue 10, finding 1): the longest
/// waits and graces saturate. Each call here returns promptly because what
/// it waits for happens at once.
#[test]
fn extreme_durations_never_panic() {
    let zk = ZkClient::builder(ZkServer::shared().connect_string())
        .ttl(Duration::from_secs(4))
        .connect()
        .unwrap();
    let etcd = EtcdClient::builder(EtcdServer::shared().endpoints())
        .ttl(Duration::from_secs(4))
        .connect()
        .unwrap();
    let name = format!("/clients/extreme-{}", std::process::id());
    let guard = zk
        .mutex(&name)
        .unwrap()
        .try_lock_for(Duration::MAX)
        .unwrap();
    let guard = guard.expect("a free lock is taken even with the longest wait");
    let lost = guard.lost().clone();
    guard.release().unwrap();
    assert!(
        lost.wait_timeout(Duration::MAX).is_some(),
        "released: lost at once"
    );
    let guard = etcd
        .mutex(&name)
        .unwrap()
        .try_lock_for(Duration::MAX)
        .unwrap();
    assert!(guard.is_some());
    drop(guard);
    let started = Instant::now();
    zk.close_within(Duration::MAX).unwrap();
    etcd.close_within(Duration::MAX).unwrap();
    assert!(
        started.elapsed() < scale(Duration::from_secs(10)),
        "closes returned"
    );
}

/// etcd with authentication on (issue 10, finding 8): a client without
/// credentials, or with a wrong password, fails at connect with
/// `Unauthenticated` (it used to connect and fail at the first lock); a
/// user whose role covers only `/app/` connects, locks there, and gets
/// `PermissionDenied` outside it, leaving nothing.
#[test]
fn etcd_missing_or_wrong_credentials_fail_at_connect() {
    let server = EtcdServer::start();
    server.enable_app_auth("apppw");

    let bound = scale(Duration::from_secs(5));
    let started = Instant::now();
    match EtcdClient::builder(server.endpoints()).connect() {
        Err(Error::Unauthenticated { what }) => assert!(what.contains("user"), "{what}"),
        other => panic!("no credentials: expected Unauthenticated, got {other:?}"),
    }
    assert!(
        started.elapsed() < bound,
        "no credentials took {:?}",
        started.elapsed()
    );
    let started = Instant::now();
    match EtcdClient::builder(server.endpoints())
        .user("app", "wrong")
        .connect()
    {
        Err(Error::Unauthenticated { what }) => {
            assert!(
                !what.contains("wrong"),
                "the password stays out of errors: {what}"
            )
        }
        other => panic!("a wrong password: expected Unauthenticated, got {other:?}"),
    }
    assert!(
        started.elapsed() < bound,
        "a wrong password took {:?}",
        started.elapsed()
    );

    let client = EtcdClient::builder(server.endpoints())
        .user("app", "apppw")
        .connect()
        .expect("the scoped user connects");
    let guard = client
        .mutex("/app/lock")
        .unwrap()
        .lock()
        .expect("lock inside /app/");
    guard
        .put("/app/value", b"1")
        .expect("a fenced write inside /app/");
    match client.mutex("/other/lock").and_then(|m| m.try_lock()) {
        Err(Error::PermissionDenied { what }) => assert!(what.contains("/other/lock"), "{what}"),
        other => panic!("outside the role: expected PermissionDenied, got {other:?}"),
    }
    guard.release().expect("release");
    client.close().expect("close");
    let root = EtcdClient::builder(server.endpoints())
        .user("root", "rootpw")
        .connect()
        .expect("root connects");
    assert_eq!(root.read("/app/value").unwrap().as_deref(), Some(&b"1"[..]));
    assert!(
        root.contenders("/app/lock").unwrap().is_empty(),
        "nothing left"
    );
    assert!(
        root.contenders("/other/lock").unwrap().is_empty(),
        "nothing left"
    );
    root.close().expect("close");
}

/// An etcd client reached through `proxy` under `policy`: a 6 s lease, a
/// 1 s RPC timeout.
fn etcd_via(proxy: &integration::Proxy, policy: LossPolicy) -> EtcdClient {
    let client = EtcdClient::builder([proxy.addr().to_string()])
        .ttl(Duration::from_secs(6))
        .rpc_timeout(Duration::from_secs(1))
        .loss_policy(policy)
        .connect()
        .expect("connect through the proxy");
    assert_eq!(client.loss_policy(), policy);
    client
}

#[test]
fn fault_etcd_on_disconnect_policy_loses_a_lock_when_its_connection_drops() {
    let server = EtcdServer::shared();
    let proxy = integration::Proxy::start(server.client_addr());
    let c = etcd_via(&proxy, LossPolicy::OnDisconnect);
    let mutex = c.mutex("/clients/loss-policy/on-disconnect").unwrap();
    let old = mutex.lock().unwrap();
    let old_key = old.holder().to_owned();
    let deadline = old.valid_until().expect("a deadline");
    proxy.drop_connections();
    // Loss at the drop, not at the lease's deadline (6 s away).
    assert_eq!(
        old.lost().wait_timeout(scale(Duration::from_secs(4))),
        Some(LossReason::Disconnected),
        "a dropped connection is loss under OnDisconnect"
    );
    assert!(
        recipes_core::BootInstant::now() < deadline,
        "lost before the deadline"
    );
    // The lease is revoked once etcd answers again: its key goes, and a new
    // acquisition (a new lease) takes the lock with a higher fence.
    let facts = server.facts();
    wait_until(
        "the lost guard's key deleted",
        Duration::from_secs(10),
        || !facts.exists(&old_key),
    );
    let old_token = old.token();
    assert!(matches!(
        old.release(),
        Err(Error::LeaseLost {
            reason: LossReason::Disconnected
        })
    ));
    let new = mutex
        .try_lock_for(scale(Duration::from_secs(10)))
        .unwrap()
        .expect("a new acquisition after the drop");
    assert!(new.token() > old_token);
    new.release().unwrap();
    c.close().unwrap();
}

#[test]
fn fault_etcd_deadline_policy_rides_out_a_dropped_connection() {
    let server = EtcdServer::shared();
    let proxy = integration::Proxy::start(server.client_addr());
    let c = etcd_via(&proxy, LossPolicy::Deadline);
    let guard = c
        .mutex("/clients/loss-policy/deadline")
        .unwrap()
        .lock()
        .unwrap();
    let before = guard.valid_until().expect("a deadline");
    proxy.drop_connections();
    // The keep-alive stream re-opens on a new connection and a renewal is
    // answered: the deadline moves on, and the guard never fired.
    wait_until(
        "a renewal answered after the drop",
        Duration::from_secs(8),
        || guard.valid_until().is_some_and(|d| d > before),
    );
    assert_eq!(guard.lost().reason(), None, "the lock rode out the drop");
    guard.check().unwrap();
    guard
        .put("/clients/loss-policy/deadline-resource", b"after")
        .unwrap();
    guard.release().unwrap();
    c.close().unwrap();
}

/// Every backend crate names what its clients' read-write lock and
/// multi-lock take and give (an application uses one crate, not core).
#[test]
fn every_backend_crate_names_the_lock_kinds_and_multi_lock() {
    // Core's own types, each crate's name for them.
    let _: [recipes_core::LockKind; 4] = [
        recipes_zk::LockKind::Mutex,
        recipes_etcd::LockKind::Read,
        recipes_pg::LockKind::Write,
        recipes_redis::LockKind::Mutex,
    ];
    let _: [recipes_core::Access; 4] = [
        recipes_zk::Access::Read,
        recipes_etcd::Access::Write,
        recipes_pg::Access::Read,
        recipes_redis::Access::Write,
    ];
    let limits = [
        recipes_zk::MAX_MULTI_LOCK_NAMES,
        recipes_etcd::MAX_MULTI_LOCK_NAMES,
        recipes_pg::MAX_MULTI_LOCK_NAMES,
        recipes_redis::MAX_MULTI_LOCK_NAMES,
    ];
    assert_eq!(limits, [recipes_core::MAX_MULTI_LOCK_NAMES; 4]);
    let _: Option<recipes_core::MultiLockGuard<ZkClient>> =
        None::<recipes_zk::MultiLockGuard<ZkClient>>;
    let _: Option<recipes_core::MultiLock<EtcdClient>> =
        None::<recipes_etcd::MultiLock<EtcdClient>>;
    let _: Option<recipes_core::MultiLockGuard<recipes_pg::PgClient>> =
        None::<recipes_pg::MultiLockGuard<recipes_pg::PgClient>>;
    let _: Option<recipes_core::MultiLock<recipes_redis::RedisClient>> =
        None::<recipes_redis::MultiLock<recipes_redis::RedisClient>>;
}
