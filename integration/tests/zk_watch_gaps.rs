//! ZooKeeper waits that a change between two requests must not strand: a
//! permit released between a semaphore waiter's listing and its wait, a
//! folder made between an observer's listing and its exists-watch. The
//! races are opened on purpose with a proxy that delays the waiter's replies,
//! and closed by what the server reports, never by a sleep. Tests with
//! `fault` in their name run on servers of their own.

use recipes_core::Client as _;
use std::thread;
use std::time::Duration;

use integration::{scale, wait_for, wait_until, Proxy, ZkServer};
use recipes_zk::ZkClient;

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

/// The last operation the server answered on `session`'s connection
/// (`cons`'s `lop`: `GETC` for a listing, `EXIS` for an exists).
fn last_op(server: &ZkServer, session: i64) -> Option<String> {
    let sid = format!("sid=0x{:x},", session as u64);
    let cons = server.four_letter("cons");
    let line = cons.lines().find(|l| l.contains(&sid))?;
    let lop = line.split(',').find_map(|f| f.strip_prefix("lop="))?;
    Some(lop.to_owned())
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
