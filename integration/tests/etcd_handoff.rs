//! The etcd mutex's handoff on the client's watch stream: a waiter that
//! heard every key ahead of its own deleted knows it is first without a
//! read (its fence is the revision of the last of those deletions), and a
//! waiter that heard only the key it waited for deleted, with another
//! still ahead, reads again and goes on waiting.
//!
//! Each test starts its own server: they count the server's requests.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::time::Duration;

use integration::handoff::Behind;
use integration::{wait_until, EtcdServer};

#[test]
fn a_waiter_that_heard_every_key_ahead_deleted_acquires_without_a_read() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let (a, b) = (connect(&server), connect(&server));
    let name = lock_name("handoff-no-read");
    let held = a.mutex(&name).unwrap().lock().unwrap();
    let waiter = queue_waiter(&facts, &b, &name);
    let reads = range_rpcs(&server);
    let old_fence = held.token();
    held.release().unwrap();
    let (fence, _, g) = waiter.join().unwrap().unwrap();
    assert_eq!(
        range_rpcs(&server) - reads,
        0.0,
        "the woken waiter read nothing"
    );
    // The release was the store's last write (winning writes nothing):
    // its revision is the deletion of the key ahead.
    let deleted_at = store_revision(&facts);
    assert!(fence > old_fence, "{fence:?} after {old_fence:?}");
    assert_eq!(
        fence.get(),
        deleted_at as u64,
        "the fence is the revision of the deletion that made ours first"
    );
    assert!(!g.is_lost());
    g.release().unwrap();
    assert!(keys(&facts, &name).is_empty());
}

/// A holds; B waits behind A, C behind B (C waits for B's key, with A's
/// still ahead). B gives up: C hears the deletion it waited for, reads
/// again, sees A and waits for A — it never holds while A does.
#[test]
fn a_waiter_whose_predecessor_gives_up_reads_again_and_waits_for_the_holder() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let (a, b, c) = (connect(&server), connect(&server), connect(&server));
    let name = lock_name("handoff-gives-up");
    let held = a.mutex(&name).unwrap().lock().unwrap();
    let behind = queue_waiter(&facts, &b, &name);
    let last = Behind::spawn(c.mutex(&name).unwrap());
    wait_keys(&facts, &name, 3);
    let reads = range_rpcs(&server);
    // B gives up: closing its client ends its acquisition and its key.
    let _ = b.close_within(Duration::from_secs(5));
    assert!(behind.join().unwrap().is_err(), "B's lock() ended");
    wait_until("C reads the queue again", SOON, || {
        range_rpcs(&server) > reads
    });
    last.takes_over(held).release().unwrap();
    assert!(keys(&facts, &name).is_empty());
}
