//! The etcd read-write lock against real etcd: readers share, writers
//! exclude, fairness, downgrade, no upgrade, fences, timeouts leave
//! nothing, name clashes both ways, the contenders' roles, and holders
//! that crash or stop renewing (`*_fault`). Go's `RWMutex` as a peer:
//! `etcd_rw_interop.rs`.
//!
//! The functional tests share one server and use their own names.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use integration::runtime::block_on;
use integration::{scale, wait_until, EtcdServer};
use recipes_core::store::engine::Role;
use recipes_core::{Error, FencingToken, LossReason};
use recipes_etcd::{EtcdClient, RwLockReadGuard, RwLockWriteGuard};

/// A short wait that must end without the lock.
const BRIEFLY: Duration = Duration::from_millis(300);

fn rw_name(test: &str) -> String {
    lock_name(&format!("rw-{test}"))
}

/// `client` starts a reader (`write`: a writer) of `name` in a thread;
/// returns once its key is the `n`th under the name, still waiting.
fn queue<T: Send + 'static>(
    client: &EtcdClient,
    name: &str,
    n: usize,
    acquire: fn(&recipes_etcd::RwLock) -> recipes_core::Result<T>,
) -> JoinHandle<recipes_core::Result<T>> {
    let rw = client.rw_lock(name).unwrap();
    let waiter = std::thread::spawn(move || acquire(&rw));
    wait_keys(&EtcdServer::shared().facts(), name, n);
    assert!(!waiter.is_finished(), "waits while the lock is held");
    waiter
}

fn reader(rw: &recipes_etcd::RwLock) -> recipes_core::Result<RwLockReadGuard> {
    rw.read()
}

fn writer(rw: &recipes_etcd::RwLock) -> recipes_core::Result<RwLockWriteGuard> {
    rw.write()
}

/// Join `waiter` once it finished (within the bound).
fn joined<T>(waiter: JoinHandle<recipes_core::Result<T>>) -> T {
    wait_until("the waiter acquires", SOON, || waiter.is_finished());
    waiter.join().unwrap().unwrap()
}

#[test]
fn readers_share_and_a_writer_is_alone() {
    let server = EtcdServer::shared();
    let (a, b) = (connect(server), connect(server));
    let name = rw_name("share");
    let (rw_a, rw_b) = (a.rw_lock(&name).unwrap(), b.rw_lock(&name).unwrap());
    let r1 = rw_a.read().unwrap();
    let r2 = rw_b.try_read().unwrap().expect("readers share");
    // Another handle: through `rw_b` this thread holds a read.
    let other = b.rw_lock(&name).unwrap();
    assert!(
        other.try_write().unwrap().is_none(),
        "a writer waits for readers"
    );
    r1.release().unwrap();
    r2.release().unwrap();
    let w = rw_a.try_write().unwrap().expect("free");
    assert!(rw_b.try_write().unwrap().is_none(), "a second writer waits");
    assert!(
        rw_b.try_read().unwrap().is_none(),
        "a reader waits for a writer"
    );
    w.release().unwrap();
    wait_keys(&server.facts(), &name, 0);
}

/// A reader arriving behind a queued writer waits for it: readers cannot
/// starve a writer.
#[test]
fn a_new_reader_waits_behind_a_queued_writer() {
    let server = EtcdServer::shared();
    let clients: Vec<_> = (0..3).map(|_| connect(server)).collect();
    let name = rw_name("fair");
    let r1 = clients[0].rw_lock(&name).unwrap().read().unwrap();
    let read_token = r1.token();
    let w = queue(&clients[1], &name, 2, writer);
    let rw_c = clients[2].rw_lock(&name).unwrap();
    assert!(
        rw_c.try_read().unwrap().is_none(),
        "behind the queued writer"
    );
    assert!(rw_c.try_read_for(BRIEFLY).unwrap().is_none());
    wait_keys(&server.facts(), &name, 2);
    r1.release().unwrap();
    let w = joined(w);
    assert!(w.token() > read_token);
    w.release().unwrap();
    wait_keys(&server.facts(), &name, 0);
}

/// A downgrade lets the reader queued behind in, not the writer behind it,
/// and keeps the write token; the writer enters once the read is released.
#[test]
fn a_downgrade_admits_readers_behind_but_no_writer() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let clients: Vec<_> = (0..4).map(|_| connect(server)).collect();
    let name = rw_name("downgrade");
    let w = clients[0].rw_lock(&name).unwrap().write().unwrap();
    let write_token = w.token();
    let write_key = w.holder().to_owned();
    let r = queue(&clients[1], &name, 2, reader);
    let w2 = queue(&clients[2], &name, 3, writer);
    let g = w.downgrade().unwrap();
    assert_eq!(
        g.token(),
        write_token,
        "a downgraded read keeps the write token"
    );
    assert_eq!(g.holder(), write_key, "the write key keeps its place");
    let r = joined(r);
    assert!(r.token() > write_token);
    let rw_d = clients[3].rw_lock(&name).unwrap();
    assert!(rw_d.try_write_for(BRIEFLY).unwrap().is_none());
    assert!(!w2.is_finished(), "the writer behind still waits");
    // Our readers and writers in queue order, the downgraded write key as a
    // reader (its marker not listed).
    let roles: Vec<_> = clients[3]
        .contenders(&name)
        .unwrap()
        .into_iter()
        .map(|c| (c.holder, c.role))
        .collect();
    assert_eq!(roles.len(), 3, "{roles:?}");
    assert_eq!(roles[0], (write_key.clone(), Some(Role::Reader)));
    assert_eq!(roles[1].1, Some(Role::Reader));
    assert_eq!(roles[2].1, Some(Role::Writer));
    g.release().unwrap();
    assert!(!facts.exists(&write_key));
    assert!(!w2.is_finished(), "the reader behind still holds");
    r.release().unwrap();
    let w2 = joined(w2);
    assert!(w2.token() > write_token);
    w2.release().unwrap();
    wait_keys(&facts, &name, 0);
}

/// A downgrade of a guard whose write key is gone is `LeaseLost` and
/// leaves no marker.
#[test]
fn a_downgrade_after_the_write_key_is_gone_holds_nothing() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = rw_name("downgrade-gone");
    let w = a.rw_lock(&name).unwrap().write().unwrap();
    facts.delete(w.holder());
    assert_eq!(w.lost().wait_timeout(SOON), Some(LossReason::Deleted));
    let e = w.downgrade().unwrap_err();
    assert!(matches!(e, Error::LeaseLost { .. }), "{e}");
    wait_keys(&facts, &name, 0);
}

#[test]
fn an_upgrade_is_refused_at_once() {
    let server = EtcdServer::shared();
    let a = connect(server);
    let name = rw_name("upgrade");
    let rw = a.rw_lock(&name).unwrap();
    let r = rw.read().unwrap();
    assert!(matches!(r.upgrade(), Err(Error::InvalidArgument { .. })));
    assert!(matches!(rw.write(), Err(Error::InvalidArgument { .. })));
    r.release().unwrap();
    wait_keys(&server.facts(), &name, 0);
}

/// Writers' tokens strictly increase and exceed every earlier reader's; a
/// reader's exceeds every earlier writer's; a stale guard's fenced put is
/// refused once its key is gone.
#[test]
fn fences_order_writers_after_readers_and_readers_after_writers() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let clients: Vec<_> = (0..3).map(|_| connect(server)).collect();
    let name = rw_name("fences");
    let data = format!("{name}-data");
    let (mut last_write, mut readers_max) = (FencingToken(0), FencingToken(0));
    for round in 0..4 {
        let c = &clients[round % 3];
        let w = c.rw_lock(&name).unwrap().write().unwrap();
        assert!(
            w.token() > last_write && w.token() > readers_max,
            "round {round}"
        );
        w.put(&data, b"w").unwrap();
        last_write = w.token();
        w.release().unwrap();
        let rs: Vec<_> = (0..2)
            .map(|i| {
                clients[(round + i + 1) % 3]
                    .rw_lock(&name)
                    .unwrap()
                    .read()
                    .unwrap()
            })
            .collect();
        for r in rs {
            assert!(r.token() > last_write, "round {round}");
            readers_max = readers_max.max(r.token());
            r.release().unwrap();
        }
    }
    let w = clients[0].rw_lock(&name).unwrap().write().unwrap();
    let r_name = rw_name("fences-r");
    let r = clients[1].rw_lock(&r_name).unwrap().read().unwrap();
    for (holder, put) in [
        (
            w.holder().to_owned(),
            Box::new(|| w.put(&data, b"x")) as Box<dyn Fn() -> _>,
        ),
        (r.holder().to_owned(), Box::new(|| r.put(&data, b"x"))),
    ] {
        facts.delete(&holder);
        assert!(
            matches!(put(), Err(Error::FenceRejected { .. })),
            "{holder}"
        );
    }
    assert_eq!(w.lost().wait_timeout(SOON), Some(LossReason::Deleted));
    drop((w, r));
    wait_keys(&facts, &name, 0);
    wait_keys(&facts, &r_name, 0);
}

#[test]
fn timed_out_reads_and_writes_leave_nothing() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = rw_name("timeout");
    let w = a.rw_lock(&name).unwrap().write().unwrap();
    let rw_b = b.rw_lock(&name).unwrap();
    assert!(rw_b.try_read_for(BRIEFLY).unwrap().is_none());
    assert!(rw_b.try_write_for(BRIEFLY).unwrap().is_none());
    assert_eq!(wait_keys(&facts, &name, 1), vec![w.holder().to_owned()]);
    w.release().unwrap();
    wait_keys(&facts, &name, 0);
}

/// A mutex, a semaphore or an election on a read-write lock's name is
/// refused, and the reverse, naming the layout and leaving nothing.
#[test]
fn other_recipes_and_read_write_locks_refuse_each_others_names() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = rw_name("clash");
    let r = a.rw_lock(&name).unwrap().read().unwrap();
    let refused = |e: Error, layout: &str| {
        let text = e.to_string();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{text}");
        assert!(text.contains(layout), "{text}");
    };
    refused(
        a.mutex(&name).unwrap().try_lock().unwrap_err(),
        "read-write lock",
    );
    let election = a.election(&name).unwrap();
    refused(election.try_campaign(b"x").unwrap_err(), "read-write lock");
    refused(a.semaphore(&name, 2).unwrap_err(), "read-write lock");
    assert_eq!(keys(&facts, &name), vec![r.holder().to_owned()]);
    r.release().unwrap();

    let m_name = rw_name("clash-mutex");
    let m = a.mutex(&m_name).unwrap().lock().unwrap();
    let rw = a.rw_lock(&m_name).unwrap();
    refused(rw.try_read().unwrap_err(), "a lock or election");
    refused(rw.try_write().unwrap_err(), "a lock or election");
    assert_eq!(keys(&facts, &m_name), vec![key_of(&a, &m_name)]);
    m.release().unwrap();

    let s_name = rw_name("clash-sem");
    let _sem = a.semaphore(&s_name, 2).unwrap();
    let rw = a.rw_lock(&s_name).unwrap();
    refused(rw.try_write().unwrap_err(), "a semaphore");
    assert_eq!(keys(&facts, &s_name), vec![format!("{s_name}/config")]);
    facts.delete(&format!("{s_name}/config"));
    wait_keys(&facts, &name, 0);
}

/// Readers and writers (some downgrading) on three clients: a writer is
/// always alone, readers only share with readers.
#[test]
fn readers_and_writers_never_overlap_under_churn() {
    const ROUNDS: usize = 8;
    let server = EtcdServer::shared();
    let name = rw_name("churn");
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let bound = scale(Duration::from_secs(30));
    let threads: Vec<_> = (0..3)
        .map(|_| connect(server))
        .flat_map(|c| [(c.clone(), false), (c.clone(), false), (c, true)])
        .map(|(c, write)| {
            let rw = c.rw_lock(&name).unwrap();
            let (readers, writers) = (readers.clone(), writers.clone());
            std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    if !write {
                        let r = rw.try_read_for(bound).unwrap().expect("a read");
                        readers.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader with a writer");
                        std::thread::sleep(Duration::from_millis(2));
                        readers.fetch_sub(1, Ordering::SeqCst);
                        r.release().unwrap();
                        continue;
                    }
                    let w = rw.try_write_for(bound).unwrap().expect("a write");
                    assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer with readers");
                    std::thread::sleep(Duration::from_millis(2));
                    if round % 2 == 0 {
                        writers.fetch_sub(1, Ordering::SeqCst);
                        w.release().unwrap();
                        continue;
                    }
                    // Still alone until the downgrade returns.
                    readers.fetch_add(1, Ordering::SeqCst);
                    writers.fetch_sub(1, Ordering::SeqCst);
                    let r = w.downgrade().unwrap();
                    assert_eq!(
                        writers.load(Ordering::SeqCst),
                        0,
                        "a writer with a downgrade"
                    );
                    readers.fetch_sub(1, Ordering::SeqCst);
                    r.release().unwrap();
                }
            })
        })
        .collect();
    timed("9 threads x 8 rounds", || {
        for t in threads {
            t.join().unwrap();
        }
    });
    wait_keys(&server.facts(), &name, 0);
}

/// A bad name is refused before any request, and a guard's fenced
/// write into the lock's own keys is refused.
#[test]
fn bad_names_and_writes_among_the_locks_keys_are_refused() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let long = format!("/{}", "x".repeat(5000));
    for bad in [
        "",
        "no-slash",
        "/trailing/",
        "/a//b",
        "/ctl\u{7}",
        long.as_str(),
    ] {
        let e = a.rw_lock(bad).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{bad:?}: {e}");
    }
    // Refused by the check of names, before any request (other tests
    // write to this server meanwhile: no store-wide listing here).
    let name = rw_name("layout");
    let w = a.rw_lock(&name).unwrap().write().unwrap();
    for inside in [
        format!("{name}/read/x"),
        format!("{name}/write/x"),
        format!("{name}/x"),
    ] {
        let e = w.put(&inside, b"x").unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{inside}: {e}");
    }
    let r = w.downgrade().unwrap();
    let e = r.put(&format!("{name}/read/y"), b"x").unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert_eq!(keys(&facts, &name).len(), 2, "the write key and its marker");
    r.release().unwrap();
    assert_eq!(keys(&facts, &name), Vec::<String>::new());
}

/// A holder whose lease the store ends (a crashed process's, revoked here
/// from outside) frees the lock for the other side at once.
#[test]
fn a_crashed_holder_of_either_side_frees_the_lock_fault() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let name = rw_name("crash");
    for write in [true, false] {
        let (a, b) = (connect(&server), connect(&server));
        let rw_a = a.rw_lock(&name).unwrap();
        let (read, written) = match write {
            true => (None, Some(rw_a.write().unwrap())),
            false => (Some(rw_a.read().unwrap()), None),
        };
        let (lost, token) = held(&read, &written);
        let rw_b = b.rw_lock(&name).unwrap();
        let wanted = std::thread::spawn(move || rw_b.write().map(|g| g.token()));
        wait_until("the writer queues", SOON, || keys(&facts, &name).len() == 2);
        let lease = a.session_id().unwrap();
        let mut etcd = facts.client();
        block_on(async move { etcd.lease_revoke(lease).await }).unwrap();
        wait_until("the writer enters", SOON, || wanted.is_finished());
        assert!(wanted.join().unwrap().unwrap() > token);
        assert_eq!(lost.wait_timeout(SOON), Some(LossReason::Deleted));
        drop((read, written));
        wait_keys(&facts, &name, 0);
    }
}

/// A holder that stops renewing (a paused or crashed process) loses its
/// guard at its local deadline, before the store lets the next one in, and
/// its fenced writes are refused.
#[test]
fn a_holder_past_its_ttl_loses_and_the_next_one_enters_fault() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let name = rw_name("paused");
    for write in [true, false] {
        let (a, b) = (connect_with_ttl(&server, SHORT_TTL), connect(&server));
        let rw_a = a.rw_lock(&name).unwrap();
        let (read, written) = match write {
            true => (None, Some(rw_a.write().unwrap())),
            false => (Some(rw_a.read().unwrap()), None),
        };
        let (lost, token) = held(&read, &written);
        let rw_b = b.rw_lock(&name).unwrap();
        let next = std::thread::spawn(move || rw_b.write().map(|g| (g.token(), g)));
        wait_until("the writer queues", SOON, || keys(&facts, &name).len() == 2);
        a.orphan();
        let reason = lost.wait_timeout(scale(Duration::from_secs(10)));
        assert!(matches!(
            reason,
            Some(LossReason::DeadlineExpired | LossReason::Deleted)
        ));
        wait_until("the next writer enters", scale(SOON), || next.is_finished());
        let (t2, g2) = next.join().unwrap().unwrap();
        assert!(t2 > token);
        let data = format!("{name}-data");
        let put = match (&read, &written) {
            (Some(r), _) => r.put(&data, b"old"),
            (_, Some(w)) => w.put(&data, b"old"),
            _ => unreachable!(),
        };
        assert!(
            matches!(
                put,
                Err(Error::FenceRejected { .. }) | Err(Error::NotHeld { .. })
            ),
            "{put:?}"
        );
        g2.release().unwrap();
        drop((read, written));
        wait_keys(&facts, &name, 0);
    }
}

/// The loss signal and token of whichever guard is held.
fn held(
    read: &Option<RwLockReadGuard>,
    written: &Option<RwLockWriteGuard>,
) -> (recipes_core::LossSignal, FencingToken) {
    match (read, written) {
        (Some(r), _) => (r.lost().clone(), r.token()),
        (_, Some(w)) => (w.lost().clone(), w.token()),
        _ => unreachable!("one guard is held"),
    }
}
