//! The etcd backend's lease session against real etcd: the client's
//! leases (one per handle of a name in use, pooled, revoked at close),
//! loss when the lease is revoked, orphaned, or its server paused,
//! black-holed or restarted, TTLs the server raises, member kills, bad
//! settings, and user/password authentication.
//!
//! (Faults: `etcd_faults.rs`.)

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::sync::Arc;
use std::time::Duration;

use integration::runtime::{block_on, block_on_timeout};
use integration::{scale, wait_until, EtcdConfig, EtcdFacts, EtcdServer};
use recipes_core::{BootInstant, Error, LossReason};
use recipes_etcd::etcd_client::WatchOptions;
use recipes_etcd::EtcdClient;

/// The lease a contender key `<name>/<lease hex>` is bound to.
fn lease_of(key: &str) -> i64 {
    let hex = key.rsplit('/').next().expect("a key with a '/'");
    u64::from_str_radix(hex, 16).expect("a lease id in hex") as i64
}

/// The keys put or deleted under `<name>/` after revision `after`: a watch
/// from `after + 1` replays the history up to a marker key put last.
fn changes_since(facts: &EtcdFacts, name: &str, after: i64) -> Vec<String> {
    let mut client = facts.client();
    let prefix = format!("{name}/");
    let marker = format!("{name}/~marker/end");
    let changes = block_on_timeout(scale(Duration::from_secs(10)), async {
        client.put(marker.as_str(), "", None).await?;
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(after + 1);
        let mut stream = client.watch(prefix.as_str(), Some(options)).await?;
        let mut seen = Vec::new();
        while let Some(reply) = stream.message().await? {
            for event in reply.events() {
                let key = event
                    .kv()
                    .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
                    .unwrap_or_default();
                if key == marker {
                    client.delete(marker.as_str(), None).await?;
                    return Ok(seen);
                }
                seen.push(key);
            }
        }
        Ok::<_, recipes_etcd::etcd_client::Error>(seen)
    });
    changes
        .expect("the watch replays up to the marker in time")
        .expect("watch the history")
}

#[test]
fn two_handles_of_one_name_in_one_client_contend_on_two_leases() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = lock_name("two-handles");
    let (m1, m2) = (a.mutex(&name).unwrap(), a.mutex(&name).unwrap());
    let primary = a.session_id().unwrap();
    let g1 = m1.lock().unwrap();
    assert_eq!(g1.lease().session_id(), primary, "the client's own lease");

    // The second handle contends in etcd, on another lease, and times out.
    assert!(m2
        .try_lock_for(Duration::from_millis(300))
        .unwrap()
        .is_none());
    let left = facts.wait_keys(
        &format!("{name}/"),
        "only g1's",
        Duration::from_secs(5),
        |k| k.len() == 1,
    );
    assert_eq!(
        left,
        vec![g1.holder().to_owned()],
        "the timed-out try left no key"
    );

    // While it waits its key exists, bound to a lease that is not g1's.
    let waiter = std::thread::spawn(move || m2.lock().map(|g| (g, m2)));
    let both = wait_keys(&facts, &name, 2);
    assert!(both.contains(&g1.holder().to_owned()), "{both:?}");
    let other = both.iter().find(|k| *k != g1.holder()).unwrap().clone();
    let single_use = lease_of(&other);
    assert_ne!(single_use, primary, "two holders are never one identity");
    assert!(facts.lease_time_to_live(single_use) > 0, "a live lease");
    assert!(!waiter.is_finished(), "waits while g1 holds");
    assert_eq!(
        a.session_id(),
        Some(primary),
        "the client's lease is unchanged"
    );

    let t1 = g1.token();
    g1.release().unwrap();
    let (g2, m2) = waiter.join().unwrap().unwrap();
    assert!(g2.token() > t1, "{} > {t1}", g2.token());
    assert_eq!(g2.holder(), other);
    assert_eq!(g2.lease().session_id(), single_use);

    // A single-use lease goes with its guard; the client's lease serves
    // the next acquisition once it is free for the name, and a contended
    // one gets a new lease of its own.
    let t2 = g2.token();
    g2.release().unwrap();
    assert_eq!(facts.lease_time_to_live(single_use), -1, "revoked with g2");
    let g1 = m1.lock().unwrap();
    assert_eq!(
        g1.lease().session_id(),
        primary,
        "the client's lease was free"
    );
    assert!(g1.token() > t2);
    let waiter = std::thread::spawn(move || m2.lock());
    let both = wait_keys(&facts, &name, 2);
    let other = both.iter().find(|k| *k != g1.holder()).unwrap().clone();
    let next = lease_of(&other);
    assert!(
        next != primary && next != single_use,
        "a new lease: {both:?}"
    );
    let t3 = g1.token();
    g1.release().unwrap();
    let g2 = waiter.join().unwrap().unwrap();
    assert!(g2.token() > t3);
    assert_eq!(g2.lease().session_id(), next);
    drop(g2);
    wait_until(
        "dropping the guard revokes its lease",
        Duration::from_secs(5),
        || facts.lease_time_to_live(next) == -1,
    );
    assert!(keys(&facts, &name).is_empty());
}

#[test]
fn one_handle_shared_by_threads_queues_them_locally() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = lock_name("shared-handle");
    let m = Arc::new(a.mutex(&name).unwrap());
    let g1 = m.lock().unwrap();
    let before = store_revision(&facts);

    // A timed wait of another thread on the same handle: no key, no write.
    let other = m.clone();
    let timed = std::thread::spawn(move || other.try_lock_for(Duration::from_millis(300)));
    assert!(timed.join().unwrap().unwrap().is_none(), "g1 holds");
    assert_eq!(
        changes_since(&facts, &name, before),
        Vec::<String>::new(),
        "the waiting thread wrote nothing to etcd"
    );
    assert_eq!(keys(&facts, &name), vec![g1.holder().to_owned()]);

    // An unbounded one gets the lock once g1 is released.
    let (started, has_started) = crossbeam_channel::bounded(1);
    let other = m.clone();
    let waiter = std::thread::spawn(move || {
        started.send(()).unwrap();
        other.lock()
    });
    has_started.recv().unwrap();
    assert_eq!(keys(&facts, &name), vec![g1.holder().to_owned()], "one key");
    assert!(!waiter.is_finished(), "waits while g1 holds");
    let t1 = g1.token();
    g1.release().unwrap();
    let g2 = waiter.join().unwrap().unwrap();
    assert!(g2.token() > t1, "{} > {t1}", g2.token());
    assert_eq!(
        g2.lease().session_id(),
        a.session_id().unwrap(),
        "no pooled lease"
    );
    assert_eq!(keys(&facts, &name), vec![g2.holder().to_owned()]);
    g2.release().unwrap();
}

#[test]
fn close_revokes_the_pooled_leases() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = lock_name("pool-close");
    let (m1, m2) = (a.mutex(&name).unwrap(), a.mutex(&name).unwrap());
    let primary = a.session_id().unwrap();
    let g1 = m1.lock().unwrap();
    let waiter = std::thread::spawn(move || m2.lock());
    wait_keys(&facts, &name, 2);
    g1.release().unwrap();
    let g2 = waiter.join().unwrap().unwrap();
    let pooled = g2.lease().session_id();
    assert_ne!(pooled, primary);
    assert!(facts.lease_time_to_live(pooled) > 0);

    let _ = a.close_within(Duration::from_secs(2));
    assert_eq!(facts.lease_time_to_live(pooled), -1, "the pooled lease");
    assert_eq!(facts.lease_time_to_live(primary), -1, "the client's lease");
    assert_eq!(
        g2.lost().wait_timeout(scale(Duration::from_secs(5))),
        Some(LossReason::Closed)
    );
    assert!(keys(&facts, &name).is_empty());
}

#[test]
fn bad_names_and_settings_are_invalid_arguments() {
    let server = EtcdServer::shared();
    let a = connect(server);
    for bad in [
        "",
        "locks/x",
        "/locks/x/",
        "/",
        "/a//b",
        "/a\nb",
        "/a\u{7f}",
    ] {
        match a.mutex(bad) {
            Err(Error::InvalidArgument(msg)) => assert!(!msg.is_empty()),
            other => panic!("{bad:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    for ttl in [Duration::ZERO, Duration::from_secs(9_000_000_001)] {
        match EtcdClient::builder(server.endpoints()).ttl(ttl).connect() {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains("TTL"), "{msg}"),
            other => panic!("TTL {ttl:?}: expected InvalidArgument, got {other:?}"),
        }
    }
}

#[test]
fn the_session_reports_its_lease() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect_with_ttl(server, Duration::from_millis(2500));
    assert_eq!(
        a.granted_ttl(),
        Duration::from_secs(3),
        "rounded up to whole seconds"
    );
    let lease = a.session_id().unwrap();
    let ttl = facts.lease_time_to_live(lease);
    assert!((1..=3).contains(&ttl), "server TTL {ttl}");
    // Keep-alives renew it: the deadline moves forward.
    let first = a.valid_until().unwrap();
    wait_until(
        "a keep-alive moves the deadline",
        Duration::from_secs(5),
        || a.valid_until().unwrap() > first,
    );
    assert!(a.valid_until().unwrap() <= BootInstant::now() + Duration::from_secs(3));
    let _ = a.close_within(Duration::from_secs(2));
    assert_eq!(
        facts.lease_time_to_live(lease),
        -1,
        "close revokes the lease"
    );
}

#[test]
fn close_revokes_the_lease_and_frees_the_lock() {
    let server = EtcdServer::shared();
    let (a, b) = (connect(server), connect(server));
    let name = lock_name("close");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    let waiter = queue_waiter(&server.facts(), &b, &name);
    let _ = a.close_within(Duration::from_secs(2));
    assert_eq!(
        g.lost().wait_timeout(scale(Duration::from_secs(5))),
        Some(LossReason::Closed)
    );
    assert!(waiter.join().unwrap().unwrap().0 > g.token());
    assert!(matches!(
        a.mutex(&name).unwrap().try_lock(),
        Err(Error::Closed)
    ));
}

#[test]
fn a_revoked_lease_fires_loss_frees_others_and_is_replaced() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = lock_name("revoked");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    let waiter = queue_waiter(&facts, &b, &name);
    let lease = a.session_id().unwrap();
    let mut raw = facts.client();
    block_on(async move { raw.lease_revoke(lease).await }).unwrap();
    let reason = g.lost().wait_timeout(scale(Duration::from_secs(5)));
    assert!(
        matches!(reason, Some(LossReason::Deleted | LossReason::Revoked)),
        "{reason:?}"
    );
    assert!(waiter.join().unwrap().unwrap().0 > g.token());
    assert!(matches!(
        g.put(&format!("{name}-x"), b"x"),
        Err(Error::FenceRejected { .. })
    ));
    // The keep-alive stream hears of it; the next acquisition gets a new lease.
    wait_until("a sees its lease gone", Duration::from_secs(10), || {
        a.is_session_lost()
    });
    let g2 = a
        .mutex(&name)
        .unwrap()
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("free");
    assert_ne!(a.session_id(), Some(lease));
    assert_eq!(g2.holder(), format!("{name}/{:x}", a.session_id().unwrap()));
    g2.release().unwrap();
}

#[test]
fn a_ttl_below_the_server_minimum_is_raised_and_reported() {
    let config = EtcdConfig::default()
        .with_election(Duration::from_millis(100), Duration::from_millis(1500));
    let min = config.min_lease_ttl();
    assert_eq!(min, Duration::from_secs(3));
    let server = EtcdServer::start_with(config);
    let a = connect_with_ttl(&server, Duration::from_secs(1));
    assert_eq!(a.granted_ttl(), min);
    let g = a.mutex(&lock_name("min-ttl")).unwrap().lock().unwrap();
    // The deadline is computed from what was granted.
    assert!(g.valid_until().unwrap() > BootInstant::now() + Duration::from_millis(1500));
    g.release().unwrap();
}

#[test]
fn user_and_password_authenticate_the_client() {
    // Its own server: enabling auth is server-wide.
    let server = EtcdServer::start();
    etcdctl(&server, &["user", "add", "root:rootpw"]);
    etcdctl(&server, &["auth", "enable"]);
    let name = lock_name("auth");
    let client = EtcdClient::builder(server.endpoints())
        .user("root", "rootpw")
        .connect()
        .expect("the right password connects");
    let guard = client.mutex(&name).unwrap().lock().unwrap();
    guard.check().unwrap();
    guard.release().unwrap();
    // Without credentials, or with a wrong password, connect fails (etcd
    // lets anyone grant a lease; the connect's read proves the credentials).
    let anonymous = EtcdClient::builder(server.endpoints()).connect();
    assert!(
        matches!(anonymous, Err(recipes_etcd::Error::Unauthenticated { .. })),
        "no credentials: {anonymous:?}"
    );
    let wrong = EtcdClient::builder(server.endpoints())
        .user("root", "nope")
        .connect();
    assert!(
        matches!(wrong, Err(recipes_etcd::Error::Unauthenticated { .. })),
        "a wrong password: {wrong:?}"
    );
}
