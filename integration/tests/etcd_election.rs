//! The etcd election against real etcd 3.4: try, timed and blocking
//! campaigns, no key left by a timed-out one, proclaims seen by observers,
//! a deleted leader key, a new leader's fence above every revision of the
//! old one, bad names and ids. (Latch and selector: `etcd_leaders.rs`;
//! `etcdctl elect` as a peer: `etcd_elect_interop.rs`.)
//!
//! The tests share one server (`EtcdServer::shared`) and use their own
//! election names.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::time::{Duration, Instant};

use integration::runtime::block_on;
use integration::{scale, EtcdServer};
use recipes_core::{BootInstant, Error, FenceGate, FencingToken, LossReason};

#[test]
fn campaign_try_and_timed_campaign() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = election_name("semantics");
    let (ea, eb) = (a.election(&name).unwrap(), b.election(&name).unwrap());
    assert_eq!(ea.name(), name);
    assert_eq!(ea.leader().unwrap(), None, "nobody campaigns yet");

    let la = ea.campaign(b"a").unwrap();
    assert_eq!(
        la.holder(),
        key_of(&a, &name),
        "the concurrency package's key layout"
    );
    la.check().unwrap();
    assert!(la.valid_until().unwrap() > BootInstant::now());
    assert_eq!(ea.leader().unwrap(), Some(info(la.holder(), b"a")));
    assert_eq!(eb.leader().unwrap(), Some(info(la.holder(), b"a")));
    assert!(eb.try_campaign(b"b").unwrap().is_none(), "a leads");
    let started = Instant::now();
    assert!(eb
        .try_campaign_for(b"b", Duration::from_millis(300))
        .unwrap()
        .is_none());
    assert!(started.elapsed() >= Duration::from_millis(300), "waited");
    assert_eq!(keys(&facts, &name), vec![la.holder().to_owned()]);

    // A campaign without a deadline waits until a resigns.
    let waiter = std::thread::spawn(move || eb.campaign(b"b").map(|l| (eb, l)));
    wait_keys(&facts, &name, 2);
    assert!(!waiter.is_finished(), "waits while a leads");
    let ta = la.token();
    la.resign().unwrap();
    let (eb, lb) = waiter.join().unwrap().unwrap();
    assert!(lb.token() > ta, "{} > {ta}", lb.token());
    assert_eq!(ea.leader().unwrap(), Some(info(lb.holder(), b"b")));
    assert!(ea
        .try_campaign_until(b"a", Instant::now() + Duration::from_millis(50))
        .unwrap()
        .is_none());
    assert!(
        eb.try_campaign(b"b2").unwrap().is_none(),
        "one client, one name: queued behind its own leadership"
    );

    // Dropping the leadership resigns in the background.
    drop(lb);
    facts.wait_gone(&key_of(&b, &name), SOON);
    let la2 = ea
        .try_campaign_for(b"a2", SOON)
        .unwrap()
        .expect("free after drop");
    assert!(la2.token() > ta);
    la2.resign().unwrap();
    assert_eq!(ea.leader().unwrap(), None);
    assert!(
        keys(&facts, &name).is_empty(),
        "resign waits for the delete"
    );
}

#[test]
fn a_timed_out_campaign_leaves_no_key() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = election_name("timeout");
    let la = a.election(&name).unwrap().campaign(b"a").unwrap();
    let eb = b.election(&name).unwrap();
    let b_key = key_of(&b, &name);
    for wait in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(200),
    ] {
        assert!(eb.try_campaign_for(b"b", wait).unwrap().is_none());
        facts.wait_gone(&b_key, SOON);
        assert_eq!(keys(&facts, &name), vec![la.holder().to_owned()]);
    }
    // The deadline passes while waiting on the watch.
    let waiter = std::thread::spawn(move || {
        eb.try_campaign_for(b"b", Duration::from_millis(500))
            .map(|l| l.is_none())
    });
    assert!(waiter.join().unwrap().unwrap());
    facts.wait_gone(&b_key, SOON);
    assert_eq!(keys(&facts, &name), vec![la.holder().to_owned()]);
    la.resign().unwrap();
}

#[test]
fn proclaims_are_seen_by_observers_and_leader() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b, c) = (connect(server), connect(server), connect(server));
    let name = election_name("observe");
    let (ea, eb) = (a.election(&name).unwrap(), b.election(&name).unwrap());
    let observer = c.election(&name).unwrap().observe().unwrap();
    assert!(observer.receiver().is_empty(), "no leader yet");
    let next = || observer.recv_timeout(scale(SOON)).expect("a leader change");

    let la = ea.campaign(b"a1").unwrap();
    assert_eq!(next(), info(la.holder(), b"a1"));
    la.proclaim(b"a2").unwrap();
    assert_eq!(next(), info(la.holder(), b"a2"));
    assert_eq!(eb.leader().unwrap(), Some(info(la.holder(), b"a2")));
    assert_eq!(read_key(&facts, la.holder()).unwrap().2, b"a2");

    // A waiting candidate changes nothing observers see; the hand-over does.
    let waiter = std::thread::spawn(move || eb.campaign(b"b1"));
    wait_keys(&facts, &name, 2);
    la.proclaim(b"a3").unwrap();
    assert_eq!(next(), info(la.holder(), b"a3"));
    la.resign().unwrap();
    let lb = waiter.join().unwrap().unwrap();
    assert_eq!(next(), info(lb.holder(), b"b1"));
    lb.proclaim(b"b2").unwrap();
    assert_eq!(next(), info(lb.holder(), b"b2"));
    assert_eq!(ea.leader().unwrap(), Some(info(lb.holder(), b"b2")));
    lb.resign().unwrap();
    assert!(
        observer.receiver().is_empty(),
        "{:?}",
        observer.receiver().try_recv()
    );

    // The channel disconnects when the observing client closes.
    let _ = c.close_within(Duration::from_secs(2));
    assert!(matches!(
        observer.recv_timeout(scale(SOON)),
        Err(crossbeam_channel::RecvTimeoutError::Disconnected)
    ));
}

#[test]
fn a_deleted_leader_key_ends_leadership_and_refuses_proclaims() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = election_name("deleted");
    let data = format!("{name}-data");
    let la = a.election(&name).unwrap().campaign(b"a").unwrap();
    let rev = fenced_put(la.lease(), data.as_str(), "one");
    assert!(rev > la.token().get() as i64);
    assert_eq!(facts.get(&data).as_deref(), Some(&b"one"[..]));

    let mut raw = facts.client();
    let key = la.holder().to_owned();
    block_on(async move { raw.delete(key, None).await }).unwrap();
    assert_eq!(
        la.lost().wait_timeout(scale(SOON)),
        Some(LossReason::Deleted)
    );
    assert!(matches!(
        la.proclaim(b"stale"),
        Err(Error::LeaseLost {
            reason: LossReason::Deleted
        })
    ));
    // The lease itself refuses too, whatever the signal says.
    use recipes_core::store::LeadershipLease;
    assert!(matches!(
        la.lease().proclaim(b"stale"),
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(
        la.put(&data, b"stale"),
        Err(Error::FenceRejected { .. })
    ));
    assert!(
        !facts.exists(la.holder()),
        "the stale proclaim wrote nothing"
    );
    assert_eq!(facts.get(&data).as_deref(), Some(&b"one"[..]));
    // The session lives on: a new campaign wins with a new key.
    let la2 = a
        .election(&name)
        .unwrap()
        .try_campaign_for(b"a", SOON)
        .unwrap()
        .expect("free");
    assert!(la2.token() > la.token());
    assert!(la2.lease().create_revision() > la.lease().create_revision());
    drop(la);
    la2.resign().unwrap();
}

/// The fence is the revision of the read that confirmed the win (no write
/// of ours between the wake and the win): above every revision the
/// previous leader wrote, although the new leader's key is older than the
/// previous leader's proclaims.
#[test]
fn a_new_leaders_fence_exceeds_every_revision_of_the_old() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = election_name("fence");
    let la = a.election(&name).unwrap().campaign(b"a").unwrap();
    let (created, modified, _) = read_key(&facts, la.holder()).unwrap();
    assert_eq!(
        la.token().get() as i64,
        created,
        "a free election: the fence is the revision of the transaction that created our key"
    );
    assert_eq!(modified, created, "no second write");

    // b queues before a proclaims: b's key is older than a's writes.
    let eb = b.election(&name).unwrap();
    let waiter = std::thread::spawn(move || eb.campaign(b"b"));
    wait_keys(&facts, &name, 2);
    let b_created = read_key(&facts, &key_of(&b, &name)).unwrap().0;

    let mut used = vec![la.token().get() as i64];
    for i in 0..3 {
        la.proclaim(format!("a{i}").as_bytes()).unwrap();
        used.push(read_key(&facts, la.holder()).unwrap().1);
        used.push(fenced_put(
            la.lease(),
            &format!("{name}-data"),
            &format!("{i}"),
        ));
    }
    // Watch a's key (synced), so its deletion's revision is known.
    let mut raw = facts.client();
    let a_key = la.holder().to_owned();
    let mut watch = block_on(async move {
        let mut stream = raw.watch(a_key, None).await.unwrap();
        let created = stream.message().await.unwrap().unwrap();
        assert!(created.created());
        stream
    });
    la.resign().unwrap();
    let deleted_at = block_on(async {
        loop {
            let reply = watch.message().await.unwrap().unwrap();
            if let Some(ev) = reply
                .events()
                .iter()
                .find(|ev| ev.event_type() == etcd_client::EventType::Delete)
            {
                return ev.kv().unwrap().mod_revision();
            }
        }
    });
    let lb = waiter.join().unwrap().unwrap();
    let fence_b = lb.token().get() as i64;
    println!("a used revisions {used:?}, deleted at {deleted_at}; b's key created at {b_created}; b's fence {fence_b}");
    assert!(
        used.iter().all(|&r| fence_b > r),
        "b's fence {fence_b} exceeds {used:?}"
    );
    assert!(
        fence_b >= deleted_at,
        "b's fence is read after a's key went"
    );
    assert!(
        b_created < used[1],
        "b's raw revision is older than a's proclaims: no fence"
    );
    let (_, b_modified, _) = read_key(&facts, lb.holder()).unwrap();
    assert_eq!(b_modified, b_created, "the win costs no write");
    let gate = FenceGate::new();
    for t in &used {
        gate.admit(FencingToken(*t as u64)).unwrap();
    }
    gate.admit(lb.token()).unwrap();
    lb.resign().unwrap();
}

#[test]
fn bad_names_and_ids_are_invalid_arguments() {
    let server = EtcdServer::shared();
    let a = connect(server);
    for bad in ["", "elections/x", "/elections/x/", "/", "/a//b", "/a\nb"] {
        for result in [
            a.election(bad).map(drop),
            a.leader_latch(bad, "id").map(drop),
            a.leader_selector(bad, "id").map(drop),
        ] {
            match result {
                Err(Error::InvalidArgument(msg)) => {
                    assert!(msg.contains("etcd election name"), "{msg}")
                }
                other => panic!("{bad:?}: expected InvalidArgument, got {other:?}"),
            }
        }
    }
    let name = election_name("bad");
    for result in [
        a.leader_latch(&name, "").map(drop),
        a.leader_selector(&name, "").map(drop),
    ] {
        match result {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains("id"), "{msg}"),
            other => panic!("empty id: expected InvalidArgument, got {other:?}"),
        }
    }
}
