//! The etcd backend when the store loses or refuses our writes (named
//! `*_fault`, one at a time, each on a server of its own): a downgrade
//! whose marker put got no reply leaves nothing behind.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use integration::{wait_until, EtcdServer, Proxy};
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
