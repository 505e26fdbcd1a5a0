//! ZooKeeper waits that a change between two requests must not strand: a
//! permit released between a semaphore waiter's listing and its wait, a
//! folder made between an observer's (or a group watch's) listing and its
//! exists-watch, a lock folder deleted under its waiters, a waiter's node
//! deleted while it waits on the holder's; and timed calls
//! that must keep their deadline while the server is unreachable. The races
//! are opened on purpose with a proxy that delays the waiter's replies, and
//! closed by what the server reports, never by a sleep. Tests with `fault`
//! in their name run on servers of their own.

use recipes_core::Client as _;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use integration::{scale, wait_for, wait_until, Proxy, ZkServer};
use recipes_core::LossPolicy;
use recipes_zk::ZkClient;
use zookeeper_client as zk;

/// The reply delay that holds a request's answer while the test changes
/// the store: far longer than a loopback request of the test's own.
const REPLY_DELAY: Duration = Duration::from_millis(400);

fn client(hosts: String) -> ZkClient {
    ZkClient::builder(hosts)
        .session_timeout(Duration::from_secs(10))
        .connect()
        .expect("connect")
}

/// Whether the server lists a watch of `session` on `path`.
fn watches(server: &ZkServer, session: i64, path: &str) -> bool {
    server
        .watches_by_session()
        .get(&session)
        .is_some_and(|paths| paths.iter().any(|p| p == path))
}

/// A field of `session`'s connection as the server's `cons` shows it:
/// `lop`, the last operation answered (`GETC` for a listing, `EXIS` for an
/// exists), or `recved`, the packets received.
fn connection(server: &ZkServer, session: i64, field: &str) -> Option<String> {
    let sid = format!("sid=0x{:x},", session as u64);
    let cons = server.four_letter("cons");
    let line = cons.lines().find(|l| l.contains(&sid))?;
    let prefix = format!("{field}=");
    let value = line
        .split([',', '(', ')'])
        .find_map(|f| f.strip_prefix(prefix.as_str()))?;
    Some(value.to_owned())
}

/// The last operation the server answered on `session`'s connection.
fn last_op(server: &ZkServer, session: i64) -> Option<String> {
    connection(server, session, "lop")
}

#[test]
fn fault_semaphore_waiter_sees_a_release_between_its_listing_and_its_wait() {
    // N = 2, A and B hold, C queues behind them and waits on A (the one N
    // places ahead). B leaves after C's listing was served but before C's
    // wait reaches the server: the listing's watch fired, and C must be
    // let in on it, not wait for A (held all along) or its deadline.
    let server = ZkServer::start();
    let proxy = Proxy::start(server.client_addr());
    let p = "/gaps/semaphore";
    let (a, b) = (
        client(server.connect_string()),
        client(server.connect_string()),
    );
    let held_a = a.semaphore(p, 2).unwrap().acquire().unwrap();
    let held_b = b.semaphore(p, 2).unwrap().acquire().unwrap();
    let c = client(proxy.addr().to_string());
    let sem = c.semaphore(p, 2).unwrap();
    proxy.set_delay(REPLY_DELAY);
    let waiter = thread::spawn(move || {
        let permit = sem.try_acquire_for(Duration::from_secs(5))?;
        Ok::<_, recipes_core::Error>(permit.map(|permit| permit.release()))
    });
    // C's permit node and its listing were sent together and are served
    // one right after the other (`wchc` shows no children watches); their
    // replies are held. A release before C's listing would only let C in
    // at once.
    let (facts, leases) = (server.facts(), format!("{p}/leases"));
    wait_until("C's permit node made", Duration::from_secs(20), || {
        facts.children(&leases).len() == 3
    });
    held_b.release().unwrap();
    let outcome = waiter.join().expect("the waiter returned");
    assert!(
        matches!(outcome, Ok(Some(Ok(())))),
        "C was let in by B's release: {outcome:?}"
    );
    held_a.release().unwrap();
}

#[test]
fn fault_observer_sees_a_leader_in_a_folder_made_between_its_listing_and_its_watch() {
    // The observer's listing finds no folder; the folder is made before its
    // exists-watch is served. The exists answers "there" with a data watch
    // that no candidate's arrival fires: the observer must list again.
    let server = ZkServer::start();
    let proxy = Proxy::start(server.client_addr());
    let facts = server.facts();
    let observing = client(proxy.addr().to_string());
    let session = observing.session_id().expect("a session");
    proxy.set_delay(REPLY_DELAY);
    let mut attempt = 0;
    let (path, observer) = loop {
        attempt += 1;
        assert!(attempt <= 5, "the listing's window was never caught");
        let path = format!("/gaps/observed-{attempt}");
        let election = observing.election(&path).unwrap();
        let started = thread::spawn(move || election.observe());
        // `cons` shows the listing answered (its reply held) until the next
        // request; a heartbeat answered in between hides it, and the
        // exists-watch then shows it passed: try again on a fresh path.
        let caught = wait_for("the observer's listing", Duration::from_secs(20), || {
            if last_op(&server, session).as_deref() == Some("GETC") {
                Some(true)
            } else if watches(&server, session, &path) {
                Some(false)
            } else {
                None
            }
        });
        if caught {
            facts.create(&path, b"");
        }
        let observer = started.join().expect("observe returned").expect("observe");
        if caught {
            break (path, observer);
        }
    };
    assert!(
        observer.recv_timeout(Duration::ZERO).is_err(),
        "no leader yet"
    );
    let candidate = client(server.connect_string());
    let leadership = candidate
        .election(&path)
        .unwrap()
        .campaign(b"here")
        .unwrap();
    let seen = observer
        .recv_timeout(scale(Duration::from_secs(10)))
        .expect("the observer reports the leader");
    assert_eq!(seen.holder, leadership.holder());
    assert_eq!(seen.value, b"here");
    leadership.resign().unwrap();
}

#[test]
fn fault_group_watch_sees_a_member_in_a_folder_made_between_its_listing_and_its_watch() {
    // As for the observer: a group watch's listing finds no folder, the
    // folder is made before its exists-watch; a member's join must wake it.
    let server = ZkServer::start();
    let proxy = Proxy::start(server.client_addr());
    let facts = server.facts();
    let watching = client(proxy.addr().to_string());
    let session = watching.session_id().expect("a session");
    let path = "/gaps/members";
    let mut watch = watching.group(path).unwrap().watch().unwrap();
    // The watch's first read (a listing, `GETC`, unarmed) is answered.
    let received = || connection(&server, session, "recved").and_then(|n| n.parse::<u64>().ok());
    let before = received().expect("our connection in cons");
    proxy.set_delay(REPLY_DELAY);
    let waiting = thread::spawn(move || watch.next_timeout(Duration::from_secs(10)));
    // The armed listing answered, its reply held; if a heartbeat hid it
    // and the exists-watch is already set, the folder comes too late to
    // open the gap, and the test only shows the ordinary path.
    wait_until("the watch's listing", Duration::from_secs(20), || {
        let listed = last_op(&server, session).as_deref() == Some("GETC")
            && received().is_some_and(|n| n > before);
        listed || watches(&server, session, path)
    });
    facts.create(path, b"");
    let member = client(server.connect_string())
        .group(path)
        .unwrap()
        .join("m1", b"")
        .unwrap();
    let change = waiting.join().expect("the watch returned");
    match &change {
        Ok(Some(change)) => assert_eq!(change.joined, ["m1"], "{change:?}"),
        other => panic!("the watch saw the member join: {other:?}"),
    }
    member.release().unwrap();
}

/// Sorts nodes by their sequence suffix (the last ten characters).
fn in_queue_order(mut nodes: Vec<String>) -> Vec<String> {
    nodes.sort_by(|a, b| a[a.len() - 10..].cmp(&b[b.len() - 10..]));
    nodes
}

#[test]
fn waiters_queue_again_after_an_operator_deletes_the_lock_folder() {
    // An operator clears a stuck lock with `deleteall`: every node and the
    // folder go at once. A waiter whose next listing finds no folder lost
    // its node: it queues again and holds, rather than failing.
    let server = ZkServer::shared();
    let facts = server.facts();
    let dir = format!("/gaps/deleted-{}", std::process::id());
    let (h, w1, w2) = (
        client(server.connect_string()),
        client(server.connect_string()),
        client(server.connect_string()),
    );
    let held = h.mutex(&dir).unwrap().lock().unwrap();
    let m1 = w1.mutex(&dir).unwrap();
    let first = thread::spawn(move || m1.lock().map(drop));
    wait_until("W1 queued", Duration::from_secs(10), || {
        facts.children(&dir).len() == 2
    });
    let m2 = w2.mutex(&dir).unwrap();
    let (tx, rx) = mpsc::channel();
    let second = thread::spawn(move || {
        let outcome = m2.lock().and_then(|guard| {
            guard.check()?;
            guard.release()
        });
        let _ = tx.send(());
        outcome
    });
    // W2 waits on W1's node: the second in queue order is watched.
    let (w2_session, w1_node) = (w2.session_id().unwrap(), |nodes: Vec<String>| {
        in_queue_order(nodes).get(1).cloned()
    });
    wait_until("W2 waits on W1", Duration::from_secs(10), || {
        let nodes = facts.children(&dir);
        nodes.len() == 3
            && w1_node(nodes).is_some_and(|n| watches(server, w2_session, &format!("{dir}/{n}")))
    });
    let raw = integration::runtime::block_on(
        zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(&server.connect_string()),
    )
    .expect("a raw client");
    let mut wipe = raw.new_multi_writer();
    for child in facts.children(&dir) {
        wipe.add_delete(&format!("{dir}/{child}"), None).unwrap();
    }
    wipe.add_delete(&dir, None).unwrap();
    integration::runtime::block_on(wipe.commit()).expect("the folder deleted at once");
    rx.recv_timeout(scale(Duration::from_secs(20)))
        .expect("W2's lock returned");
    let outcome = second.join().expect("W2's thread");
    assert!(outcome.is_ok(), "W2 queued again and held: {outcome:?}");
    let _ = first.join().expect("W1's thread");
    assert!(held.lost().is_lost(), "the holder's node was deleted");
}

#[test]
fn fault_timed_acquisitions_while_disconnected_keep_their_deadline() {
    // Under OnDisconnect a disconnect ends the lease epoch; a new one needs
    // a round trip, which waits for the reconnect. A try-lock must not.
    let server = ZkServer::start();
    let rpc_timeout = Duration::from_secs(1);
    let c = ZkClient::builder(server.connect_string())
        .session_timeout(Duration::from_secs(4))
        .rpc_timeout(rpc_timeout)
        .loss_policy(LossPolicy::OnDisconnect)
        .connect()
        .expect("connect");
    let (mutex, sem) = (
        c.mutex("/gaps/offline").unwrap(),
        c.semaphore("/gaps/offline-sem", 2).unwrap(),
    );
    mutex.lock().unwrap().release().unwrap();
    sem.acquire().unwrap().release().unwrap();
    server.pause();
    wait_until(
        "the client saw the disconnect",
        Duration::from_secs(20),
        || c.session_state() == recipes_zk::SessionState::Disconnected,
    );
    let (tx, rx) = mpsc::channel();
    let tries = thread::spawn(move || {
        let locked = mutex.try_lock().map(|g| g.is_some());
        let _ = tx.send("try_lock");
        let admitted = sem.try_acquire().map(|p| p.is_some());
        let _ = tx.send("try_acquire");
        (locked, admitted)
    });
    let bound = scale(rpc_timeout + Duration::from_secs(2));
    let late = ["try_lock", "try_acquire"]
        .into_iter()
        .find(|call| rx.recv_timeout(bound).as_ref() != Ok(call));
    server.resume();
    let (locked, admitted) = tries.join().expect("the tries returned");
    assert_eq!(
        late, None,
        "each try returned within {bound:?}: {locked:?} {admitted:?}"
    );
    assert!(
        !matches!(locked, Ok(true)),
        "no lock while cut off: {locked:?}"
    );
    assert!(
        !matches!(admitted, Ok(true)),
        "no permit while cut off: {admitted:?}"
    );
}

#[test]
fn a_waiter_whose_node_an_operator_deleted_does_not_hold_beside_the_next() {
    // W1 waits on the holder's node, W2 on W1's. An operator deletes W1's
    // node; W2 then waits on the holder. The holder releases: both hear
    // it. W2 is first; W1 must not take the deletion of the node it
    // watched for its own turn: it queues again and holds after W2, with
    // a greater fence.
    let server = ZkServer::shared();
    let facts = server.facts();
    let dir = format!("/gaps/waiter-deleted-{}", std::process::id());
    let (h, w1, w2) = (
        client(server.connect_string()),
        client(server.connect_string()),
        client(server.connect_string()),
    );
    let held = h.mutex(&dir).unwrap().lock().unwrap();
    let holder_node = held.holder().to_owned();
    let in_line = |i: usize| in_queue_order(facts.children(&dir)).get(i).cloned();
    let waiter = |c: &ZkClient| {
        let m = c.mutex(&dir).unwrap();
        let (tx, rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        thread::spawn(move || {
            let got = m.lock().and_then(|g| {
                g.check()?;
                Ok(g)
            });
            let token = got.as_ref().map(|g| g.token()).map_err(|e| e.to_string());
            let _ = tx.send(token);
            let _ = go_rx.recv();
            drop(got);
        });
        (rx, go_tx)
    };
    let (w1_rx, w1_go) = waiter(&w1);
    let w1_session = w1.session_id().unwrap();
    wait_until("W1 waits on the holder", Duration::from_secs(10), || {
        watches(server, w1_session, &holder_node)
    });
    let w1_node = format!("{dir}/{}", in_line(1).expect("W1's node"));
    let (w2_rx, w2_go) = waiter(&w2);
    let w2_session = w2.session_id().unwrap();
    wait_until("W2 waits on W1", Duration::from_secs(10), || {
        watches(server, w2_session, &w1_node)
    });
    facts.delete(&w1_node);
    wait_until("W2 waits on the holder", Duration::from_secs(10), || {
        watches(server, w2_session, &holder_node)
    });
    held.release().unwrap();
    let bound = scale(Duration::from_secs(20));
    let second = w2_rx.recv_timeout(bound).expect("W2 acquires");
    let second = second.expect("W2 holds, its check passes");
    w2_go.send(()).unwrap();
    let first = w1_rx.recv_timeout(bound).expect("W1 acquires");
    let first = first.expect("W1 holds after W2, its check passes");
    assert!(first > second, "W1's fence {first} after W2's {second}");
    w1_go.send(()).unwrap();
}
