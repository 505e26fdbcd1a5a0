//! The etcd backend when the store loses or refuses our writes (named
//! `*_fault`, one at a time, each on a server of its own): a downgrade
//! whose marker put got no reply leaves nothing behind, and an etcd out of
//! space (alarm NOSPACE) is a typed error at once, not retried.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use integration::runtime::block_on;
use integration::{wait_until, EtcdServer, Proxy};
use recipes_core::Error;
use recipes_etcd::etcd_client::{AlarmAction, AlarmOptions, AlarmType};
use recipes_etcd::EtcdClient;

/// The RPC timeout of the clients here.
const RPC: Duration = Duration::from_secs(1);

/// Joins `t` within `bound` (scaled), or fails the test: a call that
/// should end on its own.
fn joined<T>(what: &str, t: JoinHandle<T>, bound: Duration) -> T {
    wait_until(what, bound, || t.is_finished());
    t.join().unwrap()
}

/// A write guard's downgrade whose marker put reached etcd but whose reply
/// never came: the client cannot know the marker exists. The downgrade
/// fails, and neither the write key nor the marker (both on the client's
/// lease, which lives on) stays: another client's writer gets the lock
/// well before that lease would end, and nothing of ours is left.
#[test]
fn a_downgrade_whose_marker_reply_is_lost_leaves_nothing_fault() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let proxy = Proxy::start(server.client_addr());
    let a = EtcdClient::builder([proxy.addr().to_string()])
        .ttl(Duration::from_secs(60))
        .rpc_timeout(RPC)
        .connect()
        .unwrap();
    let b = connect(&server);
    let name = lock_name("rw-downgrade-lost");
    let w = a.rw_lock(&name).unwrap().write().unwrap();
    let lease = a.session_id().unwrap();
    let readers = format!("{name}/read/");
    proxy.freeze_replies();
    let downgrade = std::thread::spawn(move || w.downgrade().map(drop));
    facts.wait_keys(&readers, "hold the marker", SOON, |k| k.len() == 1);
    let outcome = joined("the downgrade ends", downgrade, 5 * RPC);
    assert!(outcome.is_err(), "no reply, no read guard: {outcome:?}");
    proxy.drop_connections();
    proxy.restore();
    let taken = Instant::now();
    let g = b
        .rw_lock(&name)
        .unwrap()
        .try_write_for(Duration::from_secs(20))
        .unwrap()
        .expect("another client's writer gets the lock");
    println!("the writer got the lock after {:?}", taken.elapsed());
    assert_eq!(keys(&facts, &name), [g.holder()]);
    g.release().unwrap();
    assert!(facts.lease_time_to_live(lease) > 0, "the lease lives on");
    assert!(keys(&facts, &name).is_empty());
}

/// Raise (`Activate`) or disarm (`Deactivate`) the NOSPACE alarm of
/// `server`'s member, as etcd raises it when its database reaches
/// `--quota-backend-bytes`.
fn nospace(server: &EtcdServer, action: AlarmAction) {
    let member = server.status().expect("the member's status").member_id;
    let mut options = AlarmOptions::new();
    options.with_member(member);
    let mut raw = server.facts().client();
    block_on(async move { raw.alarm(action, AlarmType::Nospace, Some(options)).await })
        .expect("the alarm request");
}

/// The error of an etcd out of space: not retryable, and it says what to
/// change.
fn assert_out_of_space(outcome: Result<(), Error>) {
    let e = outcome.expect_err("refused");
    assert!(!e.is_retryable(), "{e:?}");
    assert!(matches!(e, Error::Backend { .. }), "{e:?}");
    let text = e.to_string();
    println!("{text}");
    for hint in ["out of space", "alarm disarm", "--quota-backend-bytes"] {
        assert!(text.contains(hint), "{hint:?} in {text:?}");
    }
}

/// etcd out of space (alarm NOSPACE) refuses every write that adds data:
/// a lock's, a read-write lock's and a permit's acquisition (with no
/// deadline) and a new client's lease fail within the RPC timeout with an
/// error that says what to change, instead of being retried as if
/// transient; nothing is left. Once the alarm is disarmed they work again.
#[test]
fn an_etcd_out_of_space_refuses_at_once_with_what_to_change_fault() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let a = EtcdClient::builder(server.endpoints())
        .rpc_timeout(RPC)
        .connect()
        .unwrap();
    let (lock, rw, sem) = (
        lock_name("nospace"),
        lock_name("nospace-rw"),
        sem_name("nospace"),
    );
    let (m, r, s) = (
        a.mutex(&lock).unwrap(),
        a.rw_lock(&rw).unwrap(),
        a.semaphore(&sem, 2).unwrap(),
    );
    nospace(&server, AlarmAction::Activate);
    let calls: [(&str, JoinHandle<Result<(), Error>>); 3] = [
        ("lock", std::thread::spawn(move || m.lock().map(drop))),
        ("write", std::thread::spawn(move || r.write().map(drop))),
        ("acquire", std::thread::spawn(move || s.acquire().map(drop))),
    ];
    for (what, call) in calls {
        assert_out_of_space(joined(what, call, 2 * RPC));
    }
    let started = Instant::now();
    let connect = EtcdClient::builder(server.endpoints())
        .rpc_timeout(RPC)
        .connect();
    assert!(started.elapsed() < 2 * RPC, "{:?}", started.elapsed());
    assert_out_of_space(connect.map(drop));
    assert!(keys(&facts, &lock).is_empty());
    assert!(keys(&facts, &rw).is_empty());
    assert_eq!(keys(&facts, &sem), [format!("{sem}/config")]);
    // Disarmed, they work again (a failed acquisition keeps the client's
    // turn at its name for an RPC timeout: a wait, not a try).
    nospace(&server, AlarmAction::Deactivate);
    let m = a.mutex(&lock).unwrap();
    m.try_lock_for(SOON)
        .unwrap()
        .expect("free")
        .release()
        .unwrap();
    let r = a.rw_lock(&rw).unwrap();
    r.try_write_for(SOON)
        .unwrap()
        .expect("free")
        .release()
        .unwrap();
    let s = a.semaphore(&sem, 2).unwrap();
    s.try_acquire_for(SOON)
        .unwrap()
        .expect("free")
        .release()
        .unwrap();
}
