//! A holder of either side that goes silent — its connection black-holed,
//! which is how a crashed or paused process looks to the server — loses
//! first (its loss signal fires at its local deadline) and frees the lock
//! when the server expires its session; its fenced write is then refused.
//! Each test has its own server and runs alone (`fault` in its name).

use std::time::Duration;

use integration::{scale, Proxy, ZkServer};
use recipes_core::{BootInstant, Client as _, Error};
use recipes_zk::ZkClient;

use crate::hold;

/// The session timeout of these tests: short, so a test takes seconds.
const SESSION: Duration = Duration::from_secs(2);

fn client(hosts: String) -> ZkClient {
    ZkClient::builder(hosts)
        .session_timeout(SESSION)
        .rpc_timeout(Duration::from_secs(1))
        .connect()
        .expect("connect")
}

fn silent_holder_loses_first_and_frees_the_lock(write: bool) {
    let server = ZkServer::start();
    let proxy = Proxy::start(server.client_addr());
    let facts = server.facts();
    let p = format!("/faults/silent-{write}");
    let held = hold(
        &client(proxy.addr().to_string()).rw_lock(&p).unwrap(),
        write,
        format!("{p}-data"),
    );
    let waiter = client(server.connect_string()).rw_lock(&p).unwrap();
    let (tx, taken) = crossbeam_channel::bounded(1);
    let taker = std::thread::spawn(move || {
        let g = waiter.try_write_for(scale(SESSION * 10)).unwrap();
        tx.send(BootInstant::now()).unwrap();
        g.map(|g| g.release())
    });
    facts.wait_children(&p, "a writer queued behind", scale(SESSION * 2), |c| {
        c.len() == 2
    });

    let silenced = BootInstant::now();
    proxy.blackhole();
    let reason = held.lost.wait_timeout(scale(SESSION * 3));
    assert!(reason.is_some(), "the silent holder's loss signal fires");
    let taken_at = taken
        .recv_timeout(scale(SESSION * 10))
        .expect("the writer takes over");
    let lost_by = held.lost.valid_until().expect("a deadline");
    assert!(
        lost_by <= taken_at,
        "the silent holder's lease ran until {:?} after the takeover",
        lost_by - taken_at
    );
    assert!(
        taken_at <= silenced + SESSION + scale(Duration::from_secs(3)),
        "taken over {:?} after the holder went silent (session {SESSION:?})",
        taken_at - silenced
    );
    taker.join().unwrap().expect("acquired").unwrap();
    proxy.restore();
    match (held.put)() {
        Err(Error::FenceRejected { .. }) => {}
        other => panic!("the old holder's fenced put must be refused: {other:?}"),
    }
    assert!(facts.children(&p).is_empty(), "{:?}", facts.children(&p));
}

#[test]
fn fault_a_silent_reader_loses_first_and_frees_the_lock() {
    silent_holder_loses_first_and_frees_the_lock(false);
}

#[test]
fn fault_a_silent_writer_loses_first_and_frees_the_lock() {
    silent_holder_loses_first_and_frees_the_lock(true);
}

/// A downgrade whose reply never comes (the proxy holds it) is an
/// unconfirmed write: `Indeterminate`, nothing held, and neither the
/// writer's node nor the reader the multi may have put in its place is
/// left — deleted by us (the deletes follow the multi on the session; the
/// server runs them while the replies are held), not by the session's
/// expiry.
#[test]
fn fault_an_unconfirmed_downgrade_leaves_nothing_held() {
    let server = ZkServer::start();
    let proxy = Proxy::start(server.client_addr());
    let facts = server.facts();
    let p = "/faults/downgrade";
    // A session that outlives the test's outage: its nodes must go by our
    // deletes, not by its expiry.
    let ours = ZkClient::builder(proxy.addr().to_string())
        .session_timeout(SESSION * 4)
        .rpc_timeout(Duration::from_secs(1))
        .connect()
        .unwrap();
    let session = ours.session_id();
    let w = ours.rw_lock(p).unwrap().write().unwrap();
    proxy.freeze_replies();
    let outcome = w.downgrade();
    assert!(
        matches!(outcome, Err(Error::Indeterminate { .. })),
        "an unanswered downgrade is indeterminate: {outcome:?}"
    );
    proxy.drop_connections();
    proxy.restore();
    facts.wait_children(p, "lose both nodes", scale(SESSION * 3), |c| c.is_empty());
    ours.ping().expect("our session is alive");
    assert_eq!(ours.session_id(), session, "deleted by us, not by expiry");
    let other = client(server.connect_string()).rw_lock(p).unwrap();
    other
        .try_write_for(scale(SESSION))
        .unwrap()
        .expect("the lock is free")
        .release()
        .unwrap();
}
