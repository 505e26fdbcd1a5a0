//! The etcd leader latch and leader selector against real etcd 3.4: one
//! leader of three and failover on close, one selector closure at a time
//! with increasing fences, a closing selector stopping its closure; and
//! under faults (named `*_fault`, one at a time, servers of their own): an
//! orphaned latch leader replaced, a latch closed after its session is
//! gone, a paused server fencing the selector's closure out.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration::{scale, wait_for, wait_until, EtcdServer};
use recipes_core::{BootInstant, Error, FenceGate, FencingToken, LossReason};
use recipes_etcd::{EtcdClient, LatchEvent, LeaderLatch, Leadership};

/// The participant that leads, among latches.
fn leaders(latches: &[LeaderLatch]) -> Vec<usize> {
    (0..latches.len())
        .filter(|&i| latches[i].has_leadership())
        .collect()
}

/// Waits until exactly one latch leads (never more than one on the way).
fn one_leader(latches: &[LeaderLatch]) -> usize {
    wait_for("one latch leads", SOON, || {
        let now = leaders(latches);
        assert!(now.len() <= 1, "two leaders at once: {now:?}");
        (now.len() == 1).then(|| now[0])
    })
}

fn gained(latch: &LeaderLatch) -> FencingToken {
    match latch.events().recv_timeout(scale(SOON)) {
        Ok(LatchEvent::Gained { token, lost }) => {
            assert!(!lost.is_lost());
            token
        }
        other => panic!("{}: expected Gained, got {other:?}", latch.id()),
    }
}

#[test]
fn a_latch_elects_one_of_three_and_fails_over_on_close() {
    let server = EtcdServer::shared();
    let name = election_name("latch");
    let clients: Vec<_> = (0..3).map(|_| connect(server)).collect();
    let latches: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| c.leader_latch(&name, &format!("p{i}")).unwrap())
        .collect();
    for l in &latches {
        l.start();
        l.start(); // twice does nothing more
    }
    let first = one_leader(&latches);
    let token = gained(&latches[first]);
    assert_eq!(latches[first].leadership().unwrap().0, token);
    wait_until("three participants", SOON, || {
        latches[0].participants().unwrap().len() == 3
    });
    let parts = latches[1].participants().unwrap();
    let mut ids: Vec<_> = parts.iter().map(|p| p.id.clone()).collect();
    ids.sort();
    assert_eq!(ids, ["p0", "p1", "p2"]);
    assert!(parts[0].is_leader && parts[1..].iter().all(|p| !p.is_leader));
    assert_eq!(parts[0].id, latches[first].id());
    assert_eq!(
        parts[0].holder,
        format!("{name}/{:x}", clients[first].session_id().unwrap())
    );
    assert_eq!(latches[2].leader().unwrap().unwrap(), parts[0]);
    assert_eq!(one_leader(&latches), first, "the leader is still the same");

    latches[first].close().unwrap();
    match latches[first].events().recv_timeout(scale(SOON)) {
        Ok(LatchEvent::Lost { reason }) => assert_eq!(reason, LossReason::Released),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(!latches[first].has_leadership());
    let rest: Vec<_> = latches
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != first)
        .map(|(_, l)| l)
        .collect();
    let second = one_leader(&rest);
    let token2 = gained(&rest[second]);
    assert!(token2 > token, "{token2} > {token}");
    assert_eq!(rest[0].participants().unwrap().len(), 2);
    rest[second].close().unwrap();
    let third = one_leader(&rest);
    assert_ne!(third, second);
    assert!(gained(&rest[third]) > token2);
    rest[third].close().unwrap();
    assert!(rest[third].participants().unwrap().is_empty());
}

#[test]
fn a_selector_runs_one_closure_at_a_time_with_increasing_fences_and_requeues() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let name = election_name("selector");
    let data = format!("{name}-data");
    let clients: Vec<_> = (0..3).map(|_| connect(server)).collect();
    let inside = Arc::new(AtomicBool::new(false));
    let gate = Arc::new(FenceGate::new());
    let runs = Arc::new(parking_lot::Mutex::new(Vec::<(usize, FencingToken)>::new()));
    let selectors: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let s = c.leader_selector(&name, &format!("s{i}")).unwrap();
            let (inside, gate, runs, data) =
                (inside.clone(), gate.clone(), runs.clone(), data.clone());
            s.start(true, move |l: &Leadership| {
                assert!(!inside.swap(true, Ordering::SeqCst), "two closures at once");
                assert!(!l.is_lost());
                gate.admit(l.token()).unwrap();
                l.put(&data, l.token().to_string().as_bytes()).unwrap();
                runs.lock().push((i, l.token()));
                inside.store(false, Ordering::SeqCst);
            })
            .unwrap();
            s
        })
        .collect();
    assert!(matches!(
        selectors[0].start(true, |_| {}),
        Err(Error::InvalidArgument(_))
    ));
    wait_until("every selector ran at least three times", SOON, || {
        let runs = runs.lock();
        (0..3).all(|i| runs.iter().filter(|(j, _)| *j == i).count() >= 3)
    });
    for s in &selectors {
        s.close();
    }
    let runs = runs.lock().clone();
    assert!(
        runs.windows(2).all(|w| w[0].1 < w[1].1),
        "strictly increasing fences: {runs:?}"
    );
    println!("{} closure runs", runs.len());
    wait_until("every key is gone", SOON, || keys(&facts, &name).is_empty());
    assert_eq!(
        facts.get(&data),
        Some(runs.last().unwrap().1.to_string().into_bytes()),
        "the last run's fenced write is the last one"
    );
}

#[test]
fn closing_a_selector_tells_the_running_closure_to_stop() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = election_name("selector-close");
    let selector = a.leader_selector(&name, "s").unwrap();
    assert_eq!(selector.id(), "s");
    let (tx, rx) = crossbeam_channel::unbounded();
    selector
        .start(false, move |l: &Leadership| {
            tx.send(Ok(l.token())).unwrap();
            tx.send(Err(l.lost().wait())).unwrap();
        })
        .unwrap();
    let token = rx.recv_timeout(scale(SOON)).unwrap().unwrap();
    assert!(selector.has_leadership());
    let parts = selector.participants().unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!((parts[0].id.as_str(), parts[0].is_leader), ("s", true));
    assert_eq!(
        read_key(&facts, &key_of(&a, &name)).unwrap().1,
        token.get() as i64
    );
    selector.close();
    assert_eq!(rx.try_recv().unwrap(), Err(LossReason::Closed));
    assert!(!selector.has_leadership());
    assert!(
        keys(&facts, &name).is_empty(),
        "resigned before close returned"
    );
    assert!(matches!(
        selector.start(true, |_| {}),
        Err(Error::InvalidArgument(_))
    ));
}

/// A leader that stops renewing (as a crashed process would) loses its
/// term at its local deadline, before the next leader is elected; its latch
/// starts over with a new lease and a new key.
#[test]
fn an_orphaned_latch_leader_is_replaced_and_starts_over_with_a_new_lease_fault() {
    let server = EtcdServer::shared();
    let name = election_name("orphan");
    let a = connect_with_ttl(server, SHORT_TTL);
    let b = connect(server);
    let la = a.leader_latch(&name, "a").unwrap();
    la.start();
    assert!(la.await_leadership(scale(SOON)));
    let ta = gained(&la);
    let lb = b.leader_latch(&name, "b").unwrap();
    lb.start();
    wait_until("b campaigns", SOON, || {
        la.participants().unwrap().len() == 2
    });
    let (old_lease, lost) = (a.session_id().unwrap(), la.leadership().unwrap().1);
    a.orphan();
    let tb = gained(&lb);
    let b_gained_at = BootInstant::now();
    assert!(tb > ta);
    let reason = match la.events().recv_timeout(scale(SOON)) {
        Ok(LatchEvent::Lost { reason }) => reason,
        other => panic!("expected Lost, got {other:?}"),
    };
    assert!(
        matches!(reason, LossReason::DeadlineExpired | LossReason::Deleted),
        "{reason:?}"
    );
    let lost_at = lost.valid_until().unwrap();
    assert!(
        lost_at < b_gained_at,
        "lost ({lost_at:?}) before b was elected ({b_gained_at:?})"
    );
    // a campaigns again with a new lease, behind b.
    let new_key = wait_for("a campaigns with a new lease", SOON, || {
        let lease = a.session_id().filter(|&l| l != old_lease)?;
        let key = format!("{name}/{lease:x}");
        let parts = lb.participants().unwrap();
        parts
            .iter()
            .any(|p| p.holder == key && p.id == "a")
            .then_some(key)
    });
    assert!(!la.has_leadership() && lb.has_leadership());
    lb.close().unwrap();
    let ta2 = gained(&la);
    assert!(ta2 > tb);
    assert_eq!(la.leader().unwrap().unwrap().holder, new_key);
    la.close().unwrap();
}

/// `close` of a latch whose client was closed — its session gone — while
/// the term still ends against a server that does not answer waits for
/// the latch to stop, within the configured TTL and RPC timeout, instead
/// of timing out at once.
#[test]
fn a_latch_closed_after_its_session_is_gone_waits_for_its_term_to_end_fault() {
    let server = EtcdServer::start();
    let name = election_name("close-after-session");
    let a = EtcdClient::builder(server.endpoints())
        .ttl(SHORT_TTL)
        .rpc_timeout(Duration::from_secs(1))
        .connect()
        .unwrap();
    let latch = a.leader_latch(&name, "a").unwrap();
    latch.start();
    gained(&latch);
    server.pause();
    let closer = {
        let a = a.clone();
        std::thread::spawn(move || a.close_within(scale(SOON)))
    };
    // The session is taken before its loss fires; the latch now deletes
    // its key from the paused server until that RPC gives up.
    match latch.events().recv_timeout(scale(SOON)) {
        Ok(LatchEvent::Lost { .. }) => {}
        other => panic!("expected Lost, got {other:?}"),
    }
    assert_eq!(a.granted_ttl(), Duration::ZERO, "the session is gone");
    latch.close().unwrap();
    server.resume();
    let _ = closer.join().unwrap();
}

/// The server stops answering: the running closure is told to stop at the
/// leadership's local deadline; once etcd dropped the lease its fenced
/// write is refused, and the selector campaigns again with a new lease.
#[test]
fn a_paused_server_stops_the_selector_closure_and_fences_it_out_fault() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let a = connect_with_ttl(&server, SHORT_TTL);
    let name = election_name("paused");
    let data = format!("{name}-data");
    let selector = a.leader_selector(&name, "s").unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let (go_tx, go) = crossbeam_channel::unbounded::<()>();
    let first = Arc::new(AtomicBool::new(true));
    let stale_key = data.clone();
    selector
        .start(true, move |l: &Leadership| {
            tx.send(format!("gained {}", l.token())).unwrap();
            if !first.swap(false, Ordering::SeqCst) {
                return;
            }
            let reason = l.lost().wait();
            tx.send(format!("lost {reason:?}")).unwrap();
            go.recv().unwrap();
            let refused = matches!(
                l.put(&stale_key, b"stale"),
                Err(Error::FenceRejected { .. })
            );
            tx.send(format!("refused {refused}")).unwrap();
        })
        .unwrap();
    let next = || rx.recv_timeout(scale(SOON)).unwrap();
    let t1: u64 = next().strip_prefix("gained ").unwrap().parse().unwrap();
    let lease = a.session_id().unwrap();
    server.pause();
    assert_eq!(next(), "lost DeadlineExpired");
    server.resume();
    facts.wait_lease_gone(lease, SOON);
    go_tx.send(()).unwrap();
    assert_eq!(next(), "refused true");
    assert!(!facts.exists(&data));
    let t2: u64 = next().strip_prefix("gained ").unwrap().parse().unwrap();
    assert!(t2 > t1);
    assert_ne!(a.session_id(), Some(lease), "a new lease after the loss");
    selector.close();
}

/// A panic in the leader's closure ends that term, not the selector:
/// leadership is given up and, with requeue, taken again, and the closure
/// runs again (it ended the selector's thread for good, and `start`
/// refused to start it again).
#[test]
fn a_panic_in_the_leaders_closure_gives_up_and_contends_again() {
    let server = EtcdServer::shared();
    let a = connect(server);
    let name = election_name("selector-panic");
    let selector = a.leader_selector(&name, "s").unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    selector
        .start(true, move |_: &Leadership| {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("the first term's work failed");
            }
        })
        .unwrap();
    wait_until("the closure ran again", scale(SOON), || {
        runs.load(Ordering::SeqCst) >= 2
    });
    selector.close();
    a.close().unwrap();
}
