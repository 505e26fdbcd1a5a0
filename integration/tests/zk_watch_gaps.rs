//! ZooKeeper waits that a change between two requests must not strand: a
//! permit released between a semaphore waiter's listing and its wait. The
//! race is opened on purpose with a proxy that delays the waiter's replies,
//! and closed by what the server reports, never by a sleep. Tests with
//! `fault` in their name run on servers of their own.

use recipes_core::Client as _;
use std::thread;
use std::time::Duration;

use integration::{wait_until, Proxy, ZkServer};
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
