//! The ZooKeeper read-write lock (`client.rw_lock(path)`, Curator's
//! `InterProcessReadWriteLock` layout): readers share, writers exclude,
//! fairness, downgrade in place, no upgrade, fences, timeouts and bad input
//! leave nothing, name clashes with the other recipes; faults
//! (`zk_rw/faults.rs`) and Curator as a real peer (`zk_rw/interop.rs`).
//!
//! Every test has its own path on one shared server; the fault tests start
//! their own server.

mod zk_peers;
mod zk_rw {
    pub mod faults;
    pub mod interop;
}

use std::time::Duration;

use integration::{scale, wait_until, ZkServer};
use recipes_core::store::engine::Role;
use recipes_core::{Client as _, Error, LossSignal};
use recipes_zk::{RwLock, ZkClient};

/// A timed acquire that must time out: long enough for a wrong acquisition
/// (a create and a list) to have happened.
const EXCLUDED: Duration = Duration::from_millis(300);

/// Upper bound (scaled) of an acquisition or a fact that must come.
const COME: Duration = Duration::from_secs(10);

fn client() -> ZkClient {
    ZkClient::builder(ZkServer::shared().connect_string())
        .session_timeout(Duration::from_secs(10))
        .connect()
        .expect("connect")
}

fn path(test: &str) -> String {
    format!("/zk-rw/{test}-{}", std::process::id())
}

fn rw(path: &str) -> RwLock {
    client().rw_lock(path).expect("a read-write lock")
}

fn children(path: &str) -> Vec<String> {
    ZkServer::shared().facts().children(path)
}

fn wait_children(path: &str, n: usize, desc: &str) -> Vec<String> {
    ZkServer::shared()
        .facts()
        .wait_children(path, desc, scale(COME), |c| c.len() == n)
}

/// Whether a session other than its owner watches `node` (a waiter).
fn watched_by_another(node: &str) -> bool {
    let server = ZkServer::shared();
    let owner = server.facts().ephemeral_owner(node);
    let watches = server.watches_by_path();
    let by = watches.get(node).cloned().unwrap_or_default();
    by.iter().any(|s| Some(*s) != owner)
}

fn invalid<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    match r {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// The node's sequence: the ten characters after the marker.
fn seq(name: &str) -> &str {
    &name[name.len() - 10..]
}

/// A held side of either kind, seen through what the tests need of it.
struct Held {
    holder: String,
    lost: LossSignal,
    put: Box<dyn Fn() -> Result<(), Error> + Send>,
}

/// Hold the `write` or read side of `lock`; [`Held::put`] writes `key`.
fn hold(lock: &RwLock, write: bool, key: String) -> Held {
    if write {
        let g = lock.write().unwrap();
        Held {
            holder: g.holder().to_owned(),
            lost: g.lost().clone(),
            put: Box::new(move || g.put(&key, b"late")),
        }
    } else {
        let g = lock.read().unwrap();
        Held {
            holder: g.holder().to_owned(),
            lost: g.lost().clone(),
            put: Box::new(move || g.put(&key, b"late")),
        }
    }
}

#[test]
fn readers_share_and_a_writer_is_alone() {
    let p = path("share");
    let (a, b, c) = (rw(&p), rw(&p), rw(&p));
    let r1 = a.read().unwrap();
    let r2 = b.try_read().unwrap().expect("a second reader shares");
    assert!(c.try_write().unwrap().is_none(), "no writer beside readers");
    let names = children(&p);
    assert_eq!(
        names.len(),
        2,
        "the timed-out writer left nothing: {names:?}"
    );
    assert!(names
        .iter()
        .all(|n| n.starts_with("_c_") && n.contains("-__READ__")));
    r1.release().unwrap();
    assert!(c.try_write().unwrap().is_none(), "one reader still holds");
    r2.release().unwrap();
    let w = c.try_write().unwrap().expect("a free lock's writer");
    assert!(children(&p)[0].contains("-__WRIT__"), "{:?}", children(&p));
    assert!(a.try_read().unwrap().is_none(), "no reader beside a writer");
    assert!(b.try_write_for(EXCLUDED).unwrap().is_none(), "one writer");
    assert_eq!(children(&p).len(), 1, "timed-out attempts left nothing");
    w.release().unwrap();
    assert!(children(&p).is_empty());
}

#[test]
fn a_queued_writer_holds_new_readers_back_and_enters_after_the_reader() {
    let p = path("fair");
    let (a, b, c) = (rw(&p), rw(&p), rw(&p));
    let r1 = a.read().unwrap();
    std::thread::scope(|s| {
        let writer = s.spawn(|| b.try_write_for(scale(COME)).unwrap());
        wait_children(&p, 2, "the writer queued behind the reader");
        assert!(
            c.try_read().unwrap().is_none(),
            "a new reader waits behind the queued writer"
        );
        assert!(
            c.try_read_for(EXCLUDED).unwrap().is_none(),
            "and keeps waiting"
        );
        assert_eq!(children(&p).len(), 2, "its node went with the timeout");
        let r1_token = r1.token();
        r1.release().unwrap();
        let w = writer.join().unwrap().expect("the writer enters");
        assert!(w.token() > r1_token, "a write token tops earlier readers'");
        w.release().unwrap();
    });
    assert!(children(&p).is_empty());
}

#[test]
fn downgrade_keeps_the_writers_place_and_token() {
    let p = path("downgrade");
    let (a, b, c, d) = (rw(&p), rw(&p), rw(&p), rw(&p));
    let w = a.write().unwrap();
    let (token, writer_node) = (w.token(), children(&p)[0].clone());
    let (wrote_tx, wrote) = crossbeam_channel::bounded(1);
    std::thread::scope(|s| {
        let reader = s.spawn(|| b.try_read_for(scale(COME)).unwrap());
        wait_children(&p, 2, "a reader queued behind the writer");
        s.spawn(move || {
            let got = c.try_write_for(scale(COME * 3)).unwrap();
            wrote_tx.send(got).unwrap();
        });
        wait_children(&p, 3, "a writer queued behind the reader");

        let r = w.downgrade().expect("downgrade");
        assert_eq!(r.token(), token, "the read guard keeps the write token");
        let names = children(&p);
        let ours = r.holder().rsplit('/').next().unwrap();
        assert!(ours.contains("-__READ__"), "{ours}");
        assert_eq!(seq(ours), seq(&writer_node), "the writer's sequence");
        assert!(!names.contains(&writer_node), "the writer's node is gone");
        let queued = reader.join().unwrap().expect("the queued reader enters");
        assert!(
            d.try_write_for(EXCLUDED).unwrap().is_none(),
            "no writer while the downgraded reader holds"
        );
        assert!(wrote.try_recv().is_err(), "the queued writer stays out");
        r.put(&format!("{p}-data"), b"read-side").unwrap();
        r.release().unwrap();
        assert!(
            wrote.recv_timeout(EXCLUDED).is_err(),
            "the queued writer waits for the other reader"
        );
        queued.release().unwrap();
        let w2 = wrote
            .recv_timeout(scale(COME))
            .unwrap()
            .expect("the writer enters last");
        assert!(w2.token() > token);
        w2.release().unwrap();
    });
    assert!(children(&p).is_empty(), "{:?}", children(&p));
}

/// A writer right behind watches the writer's node, which the downgrade's
/// multi deletes: it must list again and wait on the reader in its place,
/// not take the deletion for its turn.
#[test]
fn a_writer_right_behind_waits_on_the_downgraded_reader() {
    let p = path("downgrade-next");
    let (a, b) = (rw(&p), rw(&p));
    let w = a.write().unwrap();
    let (tx, wrote) = crossbeam_channel::bounded(1);
    std::thread::scope(|s| {
        s.spawn(|| tx.send(b.try_write_for(scale(COME * 3)).unwrap()).unwrap());
        wait_children(&p, 2, "a writer queued right behind");
        let r = w.downgrade().expect("downgrade");
        wait_until("the writer watches the reader", scale(COME), || {
            watched_by_another(r.holder())
        });
        assert!(wrote.try_recv().is_err(), "the writer stays out");
        r.release().unwrap();
        let w2 = wrote
            .recv_timeout(scale(COME))
            .unwrap()
            .expect("then it writes");
        w2.release().unwrap();
    });
    assert!(children(&p).is_empty());
}

#[test]
fn no_upgrade_from_a_read_guard_or_its_handle() {
    let p = path("upgrade");
    let lock = rw(&p);
    let r = lock.read().unwrap();
    let msg = invalid(r.upgrade());
    assert!(msg.contains("read"), "{msg}");
    invalid(lock.write());
    invalid(lock.try_write_for(EXCLUDED));
    assert_eq!(children(&p).len(), 1, "only the reader's node");
    r.release().unwrap();
    lock.try_write()
        .unwrap()
        .expect("free after release")
        .release()
        .unwrap();
}

#[test]
fn fences_order_writers_and_readers_and_a_stale_guard_is_refused() {
    let p = path("fences");
    let locks: Vec<RwLock> = (0..3).map(|_| rw(&p)).collect();
    let (mut last_write, mut readers_max) = (0, 0);
    for round in 0..3 {
        let w = locks[round % 3].write().unwrap();
        let t = w.token().0;
        assert!(t > last_write && t > readers_max, "round {round}: {t}");
        last_write = t;
        w.release().unwrap();
        let r1 = locks[(round + 1) % 3].read().unwrap();
        let r2 = locks[(round + 2) % 3].read().unwrap();
        for r in [&r1, &r2] {
            assert!(r.token().0 > last_write, "a reader tops earlier writers");
            readers_max = readers_max.max(r.token().0);
        }
        r1.release().unwrap();
        r2.release().unwrap();
    }
    let facts = ZkServer::shared().facts();
    for write in [false, true] {
        let stale = hold(&locks[0], write, format!("{p}-{write}-data"));
        (stale.put)().expect("a held guard's put lands");
        facts.delete(&stale.holder);
        match (stale.put)() {
            Err(Error::FenceRejected { .. }) => {}
            other => panic!("write={write}: a stale guard's put must be refused: {other:?}"),
        }
        assert!(
            stale.lost.wait_timeout(scale(COME)).is_some(),
            "and it is lost"
        );
    }
    assert!(children(&p).is_empty());
}

#[test]
fn timeouts_and_bad_input_leave_nothing() {
    let p = path("timeouts");
    let (a, b) = (rw(&p), rw(&p));
    let w = a.write().unwrap();
    assert!(b.try_read_for(EXCLUDED).unwrap().is_none());
    assert!(b.try_write_for(EXCLUDED).unwrap().is_none());
    assert!(b.try_read().unwrap().is_none());
    assert_eq!(children(&p).len(), 1, "{:?}", children(&p));
    w.release().unwrap();
    assert!(children(&p).is_empty());
    let c = client();
    for bad in ["", "no-slash", "/", "/a//b", "/trailing/", "/zookeeper/x"] {
        invalid(c.rw_lock(bad).map(|_| ()));
    }
    let long = format!("/{}", "x".repeat(recipes_core::MAX_NAME_BYTES));
    invalid(c.rw_lock(&long).map(|_| ()));
    assert!(!ZkServer::shared().facts().exists("/no-slash"));
}

#[test]
fn other_recipes_and_the_read_write_lock_refuse_each_others_paths() {
    let (c, facts) = (client(), ZkServer::shared().facts());
    let p = path("clash-rw");
    let w = rw(&p).write().unwrap();
    let msg = invalid(c.mutex(&p).unwrap().try_lock());
    assert!(msg.contains("__READ__"), "names the layout: {msg}");
    invalid(c.semaphore(&p, 2).unwrap().try_acquire());
    invalid(c.election(&p).unwrap().try_campaign_for(b"x", EXCLUDED));
    assert_eq!(children(&p).len(), 1, "only the writer: {:?}", children(&p));
    w.release().unwrap();

    let m = path("clash-mutex");
    let g = c.mutex(&m).unwrap().lock().unwrap();
    let msg = invalid(rw(&m).try_read());
    assert!(msg.contains("-lock-"), "names the layout: {msg}");
    invalid(rw(&m).try_write());
    assert_eq!(children(&m).len(), 1, "only the mutex: {:?}", children(&m));
    g.release().unwrap();

    let e = path("clash-election");
    let leader = c.election(&e).unwrap();
    let term = leader.try_campaign(b"x").unwrap().expect("leads");
    invalid(rw(&e).try_read());
    invalid(rw(&e).try_write());
    assert_eq!(children(&e).len(), 1, "only the leader: {:?}", children(&e));
    term.resign().unwrap();

    let s = path("clash-semaphore");
    let permit = c.semaphore(&s, 2).unwrap().acquire().unwrap();
    invalid(rw(&s).try_write());
    invalid(rw(&format!("{s}/leases")).try_read());
    assert_eq!(facts.children(&format!("{s}/leases")).len(), 1);
    permit.release().unwrap();
}

#[test]
fn contenders_are_readers_and_writers_in_queue_order() {
    let p = path("contenders");
    let (a, b, c) = (rw(&p), rw(&p), rw(&p));
    let r = a.read().unwrap();
    std::thread::scope(|s| {
        let w = s.spawn(|| b.write().unwrap().release().unwrap());
        wait_children(&p, 2, "the writer queued");
        let r2 = s.spawn(|| c.read().unwrap().release().unwrap());
        wait_children(&p, 3, "a reader queued behind it");
        let listed = client().contenders(&p).unwrap();
        let roles: Vec<_> = listed.iter().map(|c| c.role).collect();
        assert_eq!(
            roles,
            [Some(Role::Reader), Some(Role::Writer), Some(Role::Reader)]
        );
        assert_eq!(listed[0].holder, r.holder());
        r.release().unwrap();
        w.join().unwrap();
        r2.join().unwrap();
    });
    wait_until("all released", scale(COME), || children(&p).is_empty());
}

/// No herd: a reader watches the nearest writer ahead, a writer the node
/// just ahead, so a release wakes only those it lets in. Queue R0 W1 R2 R3
/// R4 W5 R6 R7: R0's release wakes W1 alone; W1's wakes R2..R4, and R6, R7
/// keep watching W5.
#[test]
fn no_herd_a_release_wakes_only_those_it_lets_in() {
    let server = ZkServer::shared();
    let (p, facts) = (path("herd"), server.facts());
    let sides = [false, true, false, false, false, true, false, false];
    let first = rw(&p).read().unwrap();
    let (acquired_tx, acquired) = crossbeam_channel::unbounded();
    let mut release = Vec::new();
    let mut waiters = Vec::new();
    for (i, write) in sides.into_iter().enumerate().skip(1) {
        let (lock, acquired_tx) = (rw(&p), acquired_tx.clone());
        let (go_tx, go) = crossbeam_channel::bounded::<()>(1);
        release.push(go_tx);
        waiters.push(std::thread::spawn(move || {
            let held = hold(&lock, write, String::new());
            acquired_tx.send(i).unwrap();
            let _ = go.recv();
            drop(held);
        }));
        wait_children(&p, i + 1, "the next one queued");
    }
    let queue = children(&p);
    let mut by_seq = queue.clone();
    by_seq.sort_by_key(|n| seq(n).to_owned());
    // Watches on each queued node by sessions that do not own it.
    let watched = || -> Vec<usize> {
        let watches = server.watches_by_path();
        by_seq
            .iter()
            .map(|name| {
                let node = format!("{p}/{name}");
                let owner = facts.ephemeral_owner(&node);
                let sessions = watches.get(&node).cloned().unwrap_or_default();
                sessions.iter().filter(|s| Some(**s) != owner).count()
            })
            .collect()
    };
    let expect = |want: [usize; 8], desc: &str| {
        wait_until(desc, scale(COME), || watched() == want);
    };
    expect([1, 3, 0, 0, 1, 2, 0, 0], "each waiter watches its one node");
    first.release().unwrap();
    assert_eq!(acquired.recv_timeout(scale(COME)), Ok(1), "W1 enters");
    expect([0, 3, 0, 0, 1, 2, 0, 0], "only W1's watch fired");
    assert!(acquired.try_recv().is_err(), "nobody else entered");
    release[0].send(()).unwrap();
    let mut entered: Vec<usize> = (0..3)
        .map(|_| acquired.recv_timeout(scale(COME)).unwrap())
        .collect();
    entered.sort();
    assert_eq!(entered, [2, 3, 4], "W1's release lets R2..R4 in");
    expect([0, 0, 0, 0, 1, 2, 0, 0], "W5 and R6, R7 still wait");
    assert!(acquired.try_recv().is_err(), "nobody else entered");
    drop(release);
    for w in waiters {
        w.join().unwrap();
    }
    wait_until("all released", scale(COME), || children(&p).is_empty());
}

/// A holding reader watches its own node: readers come and go together,
/// and a children watch would fire at every other reader's cycle. A
/// writer keeps the children watch its winning listing set (no request
/// until the folder changes; `wchc` lists data watches only), which tells
/// it of its node's deletion.
#[test]
fn a_holding_reader_watches_its_own_node_and_a_writer_the_folder() {
    let server = ZkServer::shared();
    let (p, facts) = (path("own-watch"), server.facts());
    // A holder's data watches, by its node's session (`holder()` is the
    // node's path).
    let watches_of = |node: &str| -> Vec<String> {
        let session = facts.ephemeral_owner(node).expect("the holder's node");
        let by_session = server.watches_by_session();
        by_session.get(&session).cloned().unwrap_or_default()
    };
    let lock = rw(&p);
    let reader = lock.read().unwrap();
    let own = vec![reader.holder().to_owned()];
    wait_until("the reader watches its node", scale(COME), || {
        watches_of(reader.holder()) == own
    });
    for _ in 0..3 {
        rw(&p).read().unwrap().release().unwrap();
    }
    assert_eq!(watches_of(reader.holder()), own, "others came and went");
    reader.release().unwrap();
    let writer = lock.write().unwrap();
    assert!(
        watches_of(writer.holder()).is_empty(),
        "no watch on its node"
    );
    facts.delete(writer.holder());
    wait_until(
        "the writer hears of its node's deletion",
        scale(COME),
        || writer.lost().is_lost(),
    );
    assert!(writer.release().is_err(), "released after the loss");
    wait_until("all released", scale(COME), || children(&p).is_empty());
}
