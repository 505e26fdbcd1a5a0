//! ZooKeeper recipes beyond the generic suite: semaphore, leader latch,
//! leader selector, the waiters' herd, bad input.

use recipes_core::Client as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration::{wait_until, ZkServer};
use recipes_core::{Error, FencingToken, LossReason};
use recipes_zk::{LatchEvent, ZkClient};

fn client() -> ZkClient {
    ZkClient::builder(ZkServer::shared().connect_string())
        .session_timeout(Duration::from_secs(10))
        .connect()
        .expect("connect")
}

fn path(test: &str) -> String {
    format!("/recipes-it/{test}-{}", std::process::id())
}

fn invalid<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    match r {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn semaphore_admits_at_most_n_and_stores_its_size() {
    let p = path("semaphore");
    let (a, b, c) = (client(), client(), client());
    let sa = a.semaphore(&p, 2).unwrap();
    let sb = b.semaphore(&p, 2).unwrap();
    let sc = c.semaphore(&p, 2).unwrap();
    let p1 = sa.acquire().unwrap();
    let p2 = sb.try_acquire().unwrap().expect("a second permit is free");
    assert!(sc
        .try_acquire_for(Duration::from_millis(300))
        .unwrap()
        .is_none());
    let facts = ZkServer::shared().facts();
    assert_eq!(
        facts.data(&p).as_deref(),
        Some(&b"2"[..]),
        "the size is stored"
    );
    assert_eq!(
        facts.children(&format!("{p}/leases")).len(),
        2,
        "no permit left behind"
    );
    // A client that asks for another size is refused, and leaves nothing.
    let wrong = client().semaphore(&p, 3).unwrap();
    let msg = invalid(wrong.try_acquire());
    assert!(
        msg.contains("has 2 permits") && msg.contains("asked for 3"),
        "{msg}"
    );
    drop(p1);
    let p3 = sc
        .try_acquire_for(Duration::from_secs(10))
        .unwrap()
        .expect("freed permit");
    p3.check().unwrap();
    p2.release().unwrap();
    p3.release().unwrap();
    wait_until("permits gone", Duration::from_secs(5), || {
        facts.children(&format!("{p}/leases")).is_empty()
            && facts.children(&format!("{p}/locks")).is_empty()
    });
}

#[test]
fn semaphore_never_admits_more_than_n_under_churn() {
    let p = path("semaphore-churn");
    let inside = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..5)
        .map(|_| {
            let (inside, sem) = (inside.clone(), client().semaphore(&p, 2).unwrap());
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let permit = sem.acquire().unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    assert!(now <= 2, "{now} permits held at once");
                    permit.check().unwrap();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn latch_elects_one_leader_and_fails_over_on_close() {
    let p = path("latch");
    let latches: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|id| client().leader_latch(&p, id).unwrap())
        .collect();
    for l in &latches {
        l.start();
    }
    wait_until("one leader", Duration::from_secs(10), || {
        latches.iter().filter(|l| l.has_leadership()).count() == 1
    });
    let leader = latches.iter().position(|l| l.has_leadership()).unwrap();
    let first = match latches[leader]
        .events()
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
    {
        LatchEvent::Gained { token, .. } => token,
        other => panic!("{other:?}"),
    };
    wait_until("every participant queued", Duration::from_secs(10), || {
        latches[0].participants().unwrap().len() == 3
    });
    let participants = latches[0].participants().unwrap();
    assert_eq!(participants[0].id, latches[leader].id());
    assert!(participants[0].is_leader && !participants[1].is_leader);
    assert_eq!(
        latches[1].leader().unwrap().unwrap().id,
        latches[leader].id()
    );

    latches[leader].close().unwrap();
    assert!(matches!(
        latches[leader]
            .events()
            .recv_timeout(Duration::from_secs(5))
            .unwrap(),
        LatchEvent::Lost {
            reason: LossReason::Released
        }
    ));
    let others: Vec<_> = (0..3).filter(|i| *i != leader).collect();
    wait_until("a new leader", Duration::from_secs(10), || {
        others
            .iter()
            .filter(|i| latches[**i].has_leadership())
            .count()
            == 1
    });
    let next = *others
        .iter()
        .find(|i| latches[**i].has_leadership())
        .unwrap();
    let (token, lost) = latches[next].leadership().unwrap();
    assert!(token > first, "the new term's fence is higher");
    assert!(!lost.is_lost());
    assert!(!latches[leader].has_leadership());
}

#[test]
fn selector_runs_one_closure_at_a_time_and_requeues() {
    let p = path("selector");
    let running = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(parking_lot::Mutex::new(Vec::<FencingToken>::new()));
    let selectors: Vec<_> = (0..3)
        .map(|i| client().leader_selector(&p, &format!("s{i}")).unwrap())
        .collect();
    for s in &selectors {
        let (running, terms) = (running.clone(), terms.clone());
        s.start(true, move |guard| {
            assert_eq!(
                running.fetch_add(1, Ordering::SeqCst),
                0,
                "two leaders at once"
            );
            {
                let mut t = terms.lock();
                if let Some(last) = t.last() {
                    assert!(guard.token() > *last);
                }
                t.push(guard.token());
            }
            running.fetch_sub(1, Ordering::SeqCst);
        })
        .unwrap();
    }
    wait_until("nine terms", Duration::from_secs(20), || {
        terms.lock().len() >= 9
    });
    for s in &selectors {
        s.close();
    }
    assert_eq!(running.load(Ordering::SeqCst), 0);
}

#[test]
fn closing_a_selector_tells_its_leader_to_stop() {
    let p = path("selector-close");
    let s = client().leader_selector(&p, "only").unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    s.start(false, move |guard| {
        // Lead until told to stop.
        let reason = guard.lost().wait();
        tx.send(reason).unwrap();
    })
    .unwrap();
    wait_until("leading", Duration::from_secs(10), || s.has_leadership());
    s.close();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        LossReason::Closed
    );
    let facts = ZkServer::shared().facts();
    wait_until("node gone", Duration::from_secs(5), || {
        facts.children(&p).is_empty()
    });
}

#[test]
fn no_herd_one_release_wakes_one_waiter() {
    let server = ZkServer::shared();
    let p = path("herd");
    let holder = client().mutex(&p).unwrap().lock().unwrap();
    let acquired = Arc::new(AtomicUsize::new(0));
    let (go_tx, go_rx) = crossbeam_channel::unbounded::<()>();
    let waiters: Vec<_> = (0..50)
        .map(|_| {
            let (m, acquired, go) = (client().mutex(&p).unwrap(), acquired.clone(), go_rx.clone());
            std::thread::spawn(move || {
                let g = m.lock().unwrap();
                acquired.fetch_add(1, Ordering::SeqCst);
                // Hold until the test says go, so no second release happens.
                let _ = go.recv();
                g.release().unwrap();
            })
        })
        .collect();
    let facts = server.facts();
    // A waiter's watch: a watch on a lock node by a session that does not
    // own it (a holder watches its own node too).
    let waiter_watches = || {
        server
            .watches_by_path()
            .into_iter()
            .filter(|(path, _)| path.starts_with(&format!("{p}/")))
            .map(|(path, sessions)| {
                let owner = facts.ephemeral_owner(&path);
                sessions.iter().filter(|s| Some(**s) != owner).count()
            })
            .sum::<usize>()
    };
    wait_until("all 50 waiters watch", Duration::from_secs(30), || {
        waiter_watches() == 50
    });
    holder.release().unwrap();
    wait_until("one waiter acquired", Duration::from_secs(10), || {
        acquired.load(Ordering::SeqCst) == 1
    });
    assert_eq!(waiter_watches(), 49, "exactly one watch fired");
    assert_eq!(acquired.load(Ordering::SeqCst), 1);
    drop(go_tx);
    for w in waiters {
        w.join().unwrap();
    }
}

/// Closing a client ends what waits on its session: a thread blocked in
/// `lock()` gets `Closed`, a latch contending in the background stops, and
/// their nodes are gone when `close` returns (the session was closed, not
/// left to time out, although both still held a handle of it).
#[test]
fn close_ends_waiting_acquisitions_and_their_nodes() {
    let (lock_path, latch_path) = (path("close-waiting-lock"), path("close-waiting-latch"));
    let facts = ZkServer::shared().facts();
    let holder = client();
    let guard = holder.mutex(&lock_path).unwrap().lock().unwrap();
    let leader = holder.leader_latch(&latch_path, "leader").unwrap();
    leader.start();
    assert!(leader.await_leadership(Duration::from_secs(10)));
    let waiter = client();
    let mutex = waiter.mutex(&lock_path).unwrap();
    let blocked = std::thread::spawn(move || mutex.lock().map(drop));
    let latch = waiter.leader_latch(&latch_path, "waiter").unwrap();
    latch.start();
    wait_until("both wait in line", Duration::from_secs(10), || {
        facts.children(&lock_path).len() == 2 && facts.children(&latch_path).len() == 2
    });
    let _ = waiter.close_within(Duration::from_secs(5));
    assert_eq!(
        facts.children(&lock_path).len(),
        1,
        "the waiter's lock node outlived close"
    );
    assert_eq!(
        facts.children(&latch_path).len(),
        1,
        "the waiter's latch node outlived close"
    );
    wait_until(
        "the blocked lock() returns",
        Duration::from_secs(10),
        || blocked.is_finished(),
    );
    match blocked.join().unwrap() {
        Err(Error::Closed) => {}
        other => panic!("expected Closed, got {other:?}"),
    }
    assert!(!latch.has_leadership());
    drop(guard);
    leader.close().unwrap();
}

#[test]
fn bad_input_is_a_typed_error() {
    let c = client();
    for bad in ["", "locks", "/", "/a/", "/a//b", "/zookeeper/x", "/a\u{1}"] {
        invalid(c.mutex(bad));
        invalid(c.semaphore(bad, 1));
        invalid(c.leader_latch(bad, "id"));
        invalid(c.leader_selector(bad, "id"));
    }
    invalid(c.semaphore("/ok", 0));
    invalid(c.leader_latch("/ok", ""));
    invalid(c.leader_selector("/ok", ""));
    // ZooKeeper refuses characters above U+FFFF (Java's surrogate pairs):
    // refused here, before any parent node is made (issue 10, finding 4).
    let p = path("emoji");
    let msg = invalid(c.mutex(&format!("{p}/\u{1F512}")));
    assert!(msg.contains("U+1F512"), "{msg}");
    assert!(!ZkServer::shared().facts().exists(&p), "no parent was left");
}

#[test]
fn a_member_id_named_like_a_lock_node_is_refused_and_the_group_stays_readable() {
    let p = path("group-id");
    let group = client().group(&p).unwrap();
    let member = group.join("web", b"").unwrap();
    let msg = invalid(group.join("web-lock-0000000001", b"").map(drop));
    assert!(msg.contains("named like another recipe's node"), "{msg}");
    assert_eq!(group.members().unwrap().members.len(), 1, "still readable");
    member.release().unwrap();
}

#[test]
fn a_lock_named_locks_leaves_its_parent_free_for_a_mutex() {
    // `<p>/locks` is a semaphore's folder only when `<p>` stores a size.
    let p = path("parent-of-locks");
    let c = client();
    let inner = c.mutex(&format!("{p}/locks")).unwrap().lock().unwrap();
    let outer = c.mutex(&p).unwrap().try_lock().unwrap();
    assert!(outer.is_some(), "the parent is a lock of its own");
    let sem = path("a-semaphore");
    let permit = c.semaphore(&sem, 2).unwrap().acquire().unwrap();
    let msg = invalid(c.mutex(&sem).unwrap().try_lock().map(|g| g.is_some()));
    assert!(
        msg.contains("a semaphore's locks and leases folders"),
        "{msg}"
    );
    permit.release().unwrap();
    drop(outer);
    inner.release().unwrap();
}

#[test]
fn digest_auth_protects_our_nodes_and_chroot_moves_them() {
    let server = ZkServer::shared();
    let authed = || {
        ZkClient::builder(server.connect_string())
            .digest_auth("svc", "secret")
            .connect()
            .unwrap()
    };
    // Top-level folders of their own: the authenticated clients' folders
    // refuse other identities.
    let p = format!("/recipes-auth-{}/lock", std::process::id());
    let (a, b) = (authed(), authed());
    let held = a.mutex(&p).unwrap().lock().unwrap();
    // Another client with the same identity queues and waits as usual.
    assert!(b
        .mutex(&p)
        .unwrap()
        .try_lock_for(Duration::from_millis(200))
        .unwrap()
        .is_none());
    // An unauthenticated client can read but neither queue nor delete.
    let anonymous = client();
    let e = anonymous.mutex(&p).unwrap().try_lock().unwrap_err();
    assert!(
        matches!(e, recipes_zk::Error::PermissionDenied { .. }),
        "an ACL refusal is PermissionDenied: {e:?}"
    );
    assert!(e.to_string().contains("ACL"), "{e}");
    held.release().unwrap();
    assert!(b.mutex(&p).unwrap().try_lock().unwrap().is_some());

    let chrooted = ZkClient::builder(server.connect_string())
        .chroot(format!("/recipes-chroot-{}", std::process::id()))
        .connect()
        .unwrap();
    let g = chrooted.mutex("/inside").unwrap().lock().unwrap();
    let facts = server.facts();
    assert_eq!(
        facts
            .children(&format!("/recipes-chroot-{}/inside", std::process::id()))
            .len(),
        1
    );
    assert!(g.holder().starts_with("/inside/"), "{}", g.holder());
    invalid(
        ZkClient::builder(server.connect_string())
            .chroot("no-slash")
            .connect(),
    );
    invalid(
        ZkClient::builder(server.connect_string())
            .digest_auth("a:b", "x")
            .connect(),
    );
}
