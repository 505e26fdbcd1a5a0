//! The ZooKeeper mutex's handoff: a waiter whose listing showed one node
//! ahead, and whose watch saw that node deleted, is first without reading
//! the children again; one that saw the node it waited for deleted with
//! another still ahead reads again and waits for that one.

use recipes_core::Client as _;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration::handoff::Behind;
use integration::{wait_until, ZkServer};
use recipes_zk::ZkClient;

fn client(server: &ZkServer) -> ZkClient {
    ZkClient::builder(server.connect_string())
        .session_timeout(Duration::from_secs(10))
        .connect()
        .expect("connect")
}

fn path(test: &str) -> String {
    format!("/recipes-it/{test}-{}", std::process::id())
}

/// The sessions watching `node` (`wchp`: each watched path, then one
/// session id per line).
fn watchers_of(server: &ZkServer, node: &str) -> Vec<String> {
    let out = server.four_letter("wchp");
    let mut lines = out.lines().skip_while(|l| *l != node);
    lines.next();
    lines
        .take_while(|l| l.starts_with(char::is_whitespace))
        .map(|l| l.trim().to_owned())
        .collect()
}

/// A holds; B waits behind A, C behind B (C watches B's node, A's still
/// ahead in its listing). B gives up: C sees the node it waited for
/// deleted, reads again, finds A and watches A's node — it never holds
/// while A does.
#[test]
fn a_waiter_whose_predecessor_gives_up_reads_again_and_waits_for_the_holder() {
    let server = ZkServer::shared();
    let facts = server.facts();
    let (a, b, c) = (client(server), client(server), client(server));
    let name = path("handoff-gives-up");
    let held = a.mutex(&name).unwrap().lock().unwrap();
    let ahead = held.holder().to_owned();
    let m = b.mutex(&name).unwrap();
    let behind = std::thread::spawn(move || m.lock().map(|_| ()));
    wait_until("B is queued", Duration::from_secs(10), || {
        facts.children(&name).len() == 2
    });
    let last = Behind::spawn(c.mutex(&name).unwrap());
    wait_until("C is queued", Duration::from_secs(10), || {
        facts.children(&name).len() == 3
    });
    // C's node is the newest: the highest sequence suffix.
    let newest = facts
        .children(&name)
        .into_iter()
        .max_by_key(|c| c[c.len() - 10..].to_owned());
    let c_node = format!("{name}/{}", newest.expect("three children"));
    let c_session = format!("{:#x}", facts.ephemeral_owner(&c_node).expect("C's node"));
    assert!(
        !watchers_of(server, &ahead).contains(&c_session),
        "C watches B's node, not A's"
    );
    // B gives up: closing its client ends its acquisition and its node.
    let _ = b.close_within(Duration::from_secs(5));
    assert!(behind.join().unwrap().is_err(), "B's lock() ended");
    wait_until("C watches A's node", Duration::from_secs(10), || {
        watchers_of(server, &ahead).contains(&c_session)
    });
    last.takes_over(held).release().unwrap();
    assert!(facts.children(&name).is_empty());
}

/// Handoffs along a queue of four, each waiter alone behind the one it
/// watches by the time its turn comes: every holder in turn, fences in
/// order, nothing left.
#[test]
fn a_queue_hands_the_lock_on_in_order_without_overlap() {
    let server = ZkServer::shared();
    let facts = server.facts();
    let name = path("handoff-queue");
    let holder = client(server);
    let held = holder.mutex(&name).unwrap().lock().unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let clients: Vec<ZkClient> = (0..4).map(|_| client(server)).collect();
    let mut threads = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        let (m, inside) = (c.mutex(&name).unwrap(), inside.clone());
        threads.push(std::thread::spawn(move || {
            let g = m.lock().unwrap();
            assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
            let token = g.token();
            inside.store(false, Ordering::SeqCst);
            g.release().unwrap();
            token
        }));
        wait_until("the waiter is queued", Duration::from_secs(10), || {
            facts.children(&name).len() == i + 2
        });
    }
    let first = held.token();
    held.release().unwrap();
    let tokens: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(tokens[0] > first);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "in queue order: {tokens:?}"
    );
    assert!(facts.children(&name).is_empty());
}
