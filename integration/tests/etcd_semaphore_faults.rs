//! The etcd semaphore under faults (named `*_fault`, one at a time, each on
//! a server of its own): an orphaned client's permits free the others'
//! turn after the TTL; a paused server loses the permits at their deadline.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::time::Duration;

use integration::{scale, wait_until, EtcdServer};
use recipes_core::{BootInstant, Error, LossReason};

/// A client that stops renewing (as a crashed process would) keeps its
/// permit keys until etcd expires its lease; its permits are lost before
/// then, and only then is a waiter admitted.
#[test]
fn an_orphaned_clients_permits_free_others_after_the_ttl_fault() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect_with_ttl(server, SHORT_TTL);
    let b = connect(server);
    let name = sem_name("orphan");
    let sa = a.semaphore(&name, 2).unwrap();
    let (p1, p2) = (sa.acquire().unwrap(), sa.acquire().unwrap());
    let lease = a.session_id().unwrap();
    let wb = spawn_waiter(b.semaphore(&name, 2).unwrap());
    wait_lease_count(&facts, &name, 3);
    a.orphan();
    let last_deadline = p1.valid_until().unwrap();
    let (admitted_at, pb) = timed("orphan to admission", || wb.join().unwrap().unwrap());
    for p in [&p1, &p2] {
        let reason = p.lost().reason();
        assert!(
            matches!(
                reason,
                Some(LossReason::DeadlineExpired | LossReason::Deleted)
            ),
            "{reason:?}"
        );
        let lost_at = p.valid_until().unwrap();
        assert!(lost_at <= last_deadline);
        assert!(
            lost_at < admitted_at,
            "lost locally ({lost_at:?}) before etcd admitted another ({admitted_at:?})"
        );
        assert!(matches!(
            p.put(&format!("{name}-x"), b"x"),
            Err(Error::FenceRejected { .. })
        ));
    }
    assert_eq!(facts.lease_time_to_live(lease), -1);
    wait_lease_keys(&facts, &name, &[pb.holder()]);
    // The orphaning client goes on with a new lease.
    let p3 = sa.try_acquire().unwrap().expect("one permit free");
    assert_ne!(p3.lease().session_id(), lease);
    p3.release().unwrap();
    pb.release().unwrap();
}

/// The server stops answering: keep-alives go unacknowledged and every
/// permit is lost at its local deadline, before the server's lease ends.
#[test]
fn a_paused_server_loses_the_permits_at_their_deadline_fault() {
    let server = EtcdServer::start();
    let a = connect_with_ttl(&server, SHORT_TTL);
    let name = sem_name("paused");
    let sa = a.semaphore(&name, 2).unwrap();
    let (p1, p2) = (sa.acquire().unwrap(), sa.acquire().unwrap());
    let lease = a.session_id().unwrap();
    let paused_at = BootInstant::now();
    server.pause();
    let reasons = [&p1, &p2].map(|p| p.lost().wait_timeout(scale(Duration::from_secs(10))));
    server.resume();
    for (p, reason) in [&p1, &p2].into_iter().zip(reasons) {
        assert_eq!(reason, Some(LossReason::DeadlineExpired));
        // Lower bound, unscaled: the deadline came from an acknowledgement
        // sent before the pause.
        let lost = p.valid_until().unwrap();
        assert!(lost <= paused_at + SHORT_TTL, "{lost:?} vs {paused_at:?}");
    }
    server
        .facts()
        .wait_lease_gone(lease, Duration::from_secs(10));
    for p in [&p1, &p2] {
        assert!(matches!(
            p.put(&format!("{name}-x"), b"x"),
            Err(Error::FenceRejected { .. })
        ));
    }
    drop((p1, p2));
    let facts = server.facts();
    wait_lease_count(&facts, &name, 0);
    // The client recovers with a new lease.
    let p = sa
        .try_acquire_for(Duration::from_secs(10))
        .unwrap()
        .expect("free");
    assert_ne!(p.lease().session_id(), lease);
    p.release().unwrap();
    wait_until("the internal lock is free", PROMPTLY, || {
        facts.keys_with_prefix(&format!("{name}/locks/")).is_empty()
    });
}
