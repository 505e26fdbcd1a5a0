//! ZooKeeper under server faults: an ensemble leader killed while a lock is
//! held (per loss policy), and a create whose reply was frozen. Every test
//! here has its own servers and runs alone (`fault` in its name).

use recipes_core::Client as _;
use std::time::Duration;

use integration::{wait_for, wait_until, Proxy, ZkCluster, ZkServer};
use recipes_core::{Error, LossPolicy, LossReason};
use recipes_zk::{LatchEvent, ZkClient};

fn client(hosts: String, policy: LossPolicy) -> ZkClient {
    ZkClient::builder(hosts)
        .session_timeout(Duration::from_secs(4))
        .rpc_timeout(Duration::from_secs(2))
        .loss_policy(policy)
        .connect()
        .expect("connect")
}

#[test]
fn fault_leader_kill_under_deadline_policy_keeps_the_lock() {
    let cluster = ZkCluster::start();
    let c = client(cluster.connect_string(), LossPolicy::Deadline);
    let guard = c.mutex("/ensemble/deadline").unwrap().lock().unwrap();
    let session = c.session_id();
    let leader = cluster.wait_serving(Duration::from_secs(30));
    cluster.member(leader).kill();
    cluster.wait_serving(Duration::from_secs(30));
    // The client reconnects well within the session's deadline: the fenced
    // write lands once the connection is back, and the guard never fired.
    wait_for(
        "a fenced write after the election",
        Duration::from_secs(10),
        || match guard.put("/ensemble/deadline-resource", b"after") {
            Ok(()) => Some(()),
            Err(Error::Indeterminate { .. } | Error::ConnectionLoss | Error::Timeout { .. }) => {
                None
            }
            Err(e) => panic!("the fenced write failed: {e}"),
        },
    );
    assert_eq!(
        guard.lost().reason(),
        None,
        "the lock survived the election"
    );
    guard.check().unwrap();
    assert_eq!(c.session_id(), session, "the same session");
    guard.release().unwrap();
}

#[test]
fn fault_leader_kill_under_on_disconnect_policy_loses_the_lock_and_recovers() {
    let cluster = ZkCluster::start();
    let c = client(cluster.connect_string(), LossPolicy::OnDisconnect);
    let mutex = c.mutex("/ensemble/on-disconnect").unwrap();
    let old = mutex.lock().unwrap();
    let old_node = old.holder().to_owned();
    let leader = cluster.wait_serving(Duration::from_secs(30));
    cluster.member(leader).kill();
    assert_eq!(
        old.lost().wait_timeout(Duration::from_secs(10)),
        Some(LossReason::Disconnected),
        "every client is disconnected by the election"
    );
    cluster.wait_serving(Duration::from_secs(30));
    // A new acquisition after the reconnect takes a new node with a higher
    // fence; the lost guard's node is deleted once the session answers.
    let new = mutex
        .try_lock_for(Duration::from_secs(20))
        .unwrap()
        .expect("a new acquisition after the reconnect");
    assert!(new.token() > old.token());
    assert_ne!(new.holder(), old_node);
    let facts = cluster.facts();
    wait_until(
        "the lost guard's node deleted",
        Duration::from_secs(10),
        || !facts.exists(&old_node),
    );
    drop(old);
    new.check().unwrap();
}

#[test]
fn fault_create_with_frozen_reply_leaves_no_orphan() {
    let server = ZkServer::start();
    let proxy = Proxy::start(server.client_addr());
    let c = client(proxy.addr().to_string(), LossPolicy::Deadline);
    let session = c.session_id();
    let mutex = c.mutex("/frozen/lock").unwrap();
    let facts = server.facts();
    // Make the parent first, so the frozen request is the create itself.
    mutex.lock().unwrap().release().unwrap();
    proxy.freeze_replies();
    let attempt = std::thread::spawn(move || {
        let r = mutex.try_lock_for(Duration::from_millis(500));
        r.map(|g| g.map(|g| g.release()))
    });
    // The create reached the server; its reply is held by the proxy.
    wait_until(
        "our node exists on the server",
        Duration::from_secs(10),
        || facts.children("/frozen/lock").len() == 1,
    );
    proxy.drop_connections();
    proxy.restore();
    let outcome = attempt.join().expect("the attempt returned");
    eprintln!("the attempt ended with {outcome:?}");
    wait_until("no orphan node", Duration::from_secs(10), || {
        facts.children("/frozen/lock").is_empty()
    });
    // The node went because we deleted it, not because the session ended.
    c.ping().expect("the session is alive");
    assert_eq!(c.session_id(), session);
}

#[test]
fn fault_abandoned_create_is_deleted_after_the_reconnect() {
    // The acquisition gives up while its create's reply is held: the create
    // landed, nobody will hold the node, and the cleanup queued on the same
    // session deletes it once the connection is back.
    let server = ZkServer::start();
    let proxy = Proxy::start(server.client_addr());
    let c = client(proxy.addr().to_string(), LossPolicy::Deadline);
    let session = c.session_id();
    let mutex = c.mutex("/abandoned/lock").unwrap();
    let facts = server.facts();
    mutex.lock().unwrap().release().unwrap();
    proxy.freeze_replies();
    let attempt = std::thread::spawn(move || mutex.try_lock_for(Duration::from_millis(200)));
    wait_until(
        "our node exists on the server",
        Duration::from_secs(10),
        || facts.children("/abandoned/lock").len() == 1,
    );
    let outcome = attempt.join().expect("the attempt returned");
    assert!(
        matches!(outcome, Ok(None)),
        "the attempt was abandoned: {outcome:?}"
    );
    assert_eq!(
        facts.children("/abandoned/lock").len(),
        1,
        "still there while frozen"
    );
    proxy.drop_connections();
    proxy.restore();
    wait_until("no orphan node", Duration::from_secs(10), || {
        facts.children("/abandoned/lock").is_empty()
    });
    c.ping().expect("the session is alive");
    assert_eq!(c.session_id(), session);
}

#[test]
fn fault_expired_session_is_replaced_and_the_latch_starts_over() {
    let server = ZkServer::start();
    let proxy = Proxy::start(server.client_addr());
    let c = ZkClient::builder(proxy.addr().to_string())
        .session_timeout(Duration::from_secs(2))
        .rpc_timeout(Duration::from_secs(2))
        .connect()
        .expect("connect");
    let old_session = c.session_id();
    let latch = c.leader_latch("/expiry/latch", "only").unwrap();
    let events = latch.events();
    latch.start();
    assert!(latch.await_leadership(Duration::from_secs(10)));
    let (first, lost) = latch.leadership().unwrap();
    let facts = server.facts();
    let old_node = facts
        .children("/expiry/latch")
        .pop()
        .expect("our latch node");

    proxy.blackhole();
    lost.wait_timeout(Duration::from_secs(10))
        .expect("the term ends when the lease deadline passes");
    assert!(!latch.has_leadership());
    // The server expires the session and its node.
    facts.wait_gone(
        &format!("/expiry/latch/{old_node}"),
        Duration::from_secs(10),
    );
    proxy.drop_connections();
    proxy.restore();

    // A new session; the latch leads again on a new node with a new fence.
    assert!(
        latch.await_leadership(Duration::from_secs(20)),
        "leads again"
    );
    let (second, _) = latch.leadership().unwrap();
    assert!(second > first);
    assert_ne!(c.session_id(), old_session, "a new session");
    assert_eq!(c.session_state(), recipes_zk::SessionState::Connected);
    // The latch sets its state, then sends the event: wait for the event.
    let seen: Vec<_> = (0..3)
        .map_while(|_| events.recv_timeout(Duration::from_secs(5)).ok())
        .collect();
    assert!(
        matches!(
            seen.as_slice(),
            [
                LatchEvent::Gained { .. },
                LatchEvent::Lost { .. },
                LatchEvent::Gained { .. }
            ]
        ),
        "{seen:?}"
    );
    latch.close().unwrap();
}
