//! The etcd election, leader latch and leader selector against real etcd
//! 3.4, and against `etcdctl elect`.
//!
//! Tests that do not break the server share one (`EtcdServer::shared`) and
//! use their own election names. Tests that pause a server or wait for a
//! lease to expire are named `*_fault` (nextest runs them one at a time);
//! those that break the server start their own.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::runtime::block_on;
use integration::{scale, wait_for, wait_until, EtcdFacts, EtcdServer};
use recipes_core::{BootInstant, Error, FenceGate, FencingToken, LossReason};
use recipes_etcd::{EtcdClient, LatchEvent, LeaderInfo, LeaderLatch, Leadership};

/// Upper bound (scaled) for anything that should happen at once.
const SOON: Duration = Duration::from_secs(10);

fn key_of(client: &EtcdClient, name: &str) -> String {
    format!("{name}/{:x}", client.session_id().unwrap())
}

/// A key's (create_revision, mod_revision, value), as etcd says now.
fn read_key(facts: &EtcdFacts, key: &str) -> Option<(i64, i64, Vec<u8>)> {
    let mut client = facts.client();
    let key = key.to_owned();
    let resp = block_on(async move { client.get(key, None).await }).expect("read a key");
    resp.kvs()
        .first()
        .map(|kv| (kv.create_revision(), kv.mod_revision(), kv.value().to_vec()))
}

fn info(holder: &str, value: &[u8]) -> LeaderInfo {
    LeaderInfo {
        holder: holder.to_owned(),
        value: value.to_vec(),
    }
}

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
    use recipes_core::LeadershipLease;
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

/// The fence is the revision of the write that confirmed the win: above
/// every revision the previous leader wrote, although the new leader's key
/// is older than the previous leader's proclaims.
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
        modified,
        "the fence is the win-confirming write's revision"
    );
    assert!(modified > created);

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
    used.push(deleted_at);
    let lb = waiter.join().unwrap().unwrap();
    let fence_b = lb.token().get() as i64;
    println!("a used revisions {used:?}; b's key created at {b_created}; b's fence {fence_b}");
    assert!(
        used.iter().all(|&r| fence_b > r),
        "b's fence {fence_b} exceeds {used:?}"
    );
    assert!(
        b_created < used[1],
        "b's raw revision is older than a's proclaims: no fence"
    );
    assert_eq!(read_key(&facts, lb.holder()).unwrap().1, fence_b);
    let gate = FenceGate::new();
    for t in &used {
        gate.admit(FencingToken(*t as u64)).unwrap();
    }
    gate.admit(lb.token()).unwrap();
    lb.resign().unwrap();
}

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

/// `etcdctl elect` (Go's concurrency.Election) and ours campaign for one
/// election: never both lead; `etcdctl elect -l` observes our proclaims.
#[test]
fn etcdctl_elect_and_ours_never_lead_together() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = election_name("etcdctl");
    let ea = a.election(&name).unwrap();
    let la = ea.campaign(b"ours-1").unwrap();
    let mut observer = Etcdctl::spawn(server, &["elect", "-l", &name]);
    assert_eq!(observer.kv(), (la.holder().to_owned(), "ours-1".to_owned()));

    // etcdctl waits while we lead.
    let mut ctl = Etcdctl::spawn(server, &["elect", &name, "ctl-1"]);
    let both = wait_keys(&facts, &name, 2);
    let ctl_key = both.into_iter().find(|k| k != la.holder()).unwrap();
    la.proclaim(b"ours-2").unwrap();
    assert_eq!(observer.kv(), (la.holder().to_owned(), "ours-2".to_owned()));
    assert!(
        ctl.lines.is_empty(),
        "etcdctl must not lead while we do: {:?}",
        ctl.lines.try_recv()
    );
    assert!(!la.is_lost());
    la.resign().unwrap();
    // Only now may it lead.
    assert_eq!(ctl.kv(), (ctl_key.clone(), "ctl-1".to_owned()));
    assert_eq!(observer.kv(), (ctl_key.clone(), "ctl-1".to_owned()));
    assert_eq!(ea.leader().unwrap(), Some(info(&ctl_key, b"ctl-1")));

    // We wait while etcdctl leads.
    let eb = b.election(&name).unwrap();
    assert!(eb.try_campaign(b"ours-3").unwrap().is_none());
    let waiter = std::thread::spawn(move || eb.campaign(b"ours-3"));
    wait_keys(&facts, &name, 2);
    assert!(!waiter.is_finished(), "we must not lead while etcdctl does");
    ctl.interrupt_and_wait(); // etcdctl resigns on SIGINT
    let lb = waiter.join().unwrap().unwrap();
    assert_eq!(observer.kv(), (lb.holder().to_owned(), "ours-3".to_owned()));
    assert_eq!(keys(&facts, &name), vec![lb.holder().to_owned()]);
    lb.resign().unwrap();
    observer.interrupt_and_wait();
}

/// An `etcdctl` child whose stdout lines arrive on a channel.
struct Etcdctl {
    child: Child,
    lines: crossbeam_channel::Receiver<String>,
}

impl Etcdctl {
    fn spawn(server: &EtcdServer, args: &[&str]) -> Etcdctl {
        let mut child = Command::new("/usr/bin/etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", server.endpoint()))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run etcdctl");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Etcdctl { child, lines }
    }

    fn line(&mut self) -> String {
        self.lines
            .recv_timeout(scale(SOON))
            .expect("etcdctl printed a line")
    }

    /// The next key and value it printed.
    fn kv(&mut self) -> (String, String) {
        (self.line(), self.line())
    }

    /// SIGINT (it resigns or stops observing), then wait until it exits.
    fn interrupt_and_wait(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) with the pid of our own unreaped child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
        let status = wait_for("etcdctl exits", SOON, || self.child.try_wait().unwrap());
        assert!(status.success(), "etcdctl: {status}");
    }
}

impl Drop for Etcdctl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
