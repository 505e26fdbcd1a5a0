//! What a call returns when the store does not answer or the lease is
//! already gone, asserted on every backend (the error table of
//! `docs/architecture.md`):
//!
//! - no reply within the RPC timeout: a read or a ping is
//!   [`Error::Timeout`] (nothing changed; it may be made again), a write is
//!   [`Error::Indeterminate`] (it may or may not have landed);
//! - `release()` is `Ok(())` only when the store confirmed the entry gone,
//!   [`Error::LeaseLost`] when the lease was gone before the call, and
//!   [`Error::Indeterminate`] when no confirmation came; in that last case
//!   the entry is still removed once the store answers again.

use std::time::{Duration, Instant};

use integration::{scale, wait_until, Proxy};
use recipes_core::{Client, Error, LossReason};

use super::{name, Kit};

const RPC: Duration = Duration::from_millis(500);
const TTL: Duration = Duration::from_secs(10);

/// `call`, made while the store does not answer: it ends within the RPC
/// timeout (plus slack, before it counts as hung) with the error `expected`
/// names, `Timeout` for a read, `Indeterminate` for a write.
fn unanswered<T: std::fmt::Debug>(
    what: &str,
    expected: &str,
    call: impl FnOnce() -> recipes_core::Result<T>,
) {
    let started = Instant::now();
    let got = call();
    let named = match &got {
        Err(Error::Timeout { .. }) => "Timeout",
        Err(Error::Indeterminate { .. }) => "Indeterminate",
        _ => "",
    };
    assert_eq!(named, expected, "{what} without a reply: {got:?}");
    let bound = scale(RPC + Duration::from_secs(2));
    assert!(
        started.elapsed() < bound,
        "{what} took {:?}, over {bound:?}",
        started.elapsed()
    );
}

/// Reads, a ping and writes (fenced, a compare-and-set, a barrier's set)
/// while the store holds its replies.
pub fn an_unanswered_read_is_timeout_and_an_unanswered_write_is_indeterminate<K: Kit>(kit: &K) {
    let proxy = Proxy::start(kit.server_addr());
    let client = kit.connect_via(proxy.addr(), TTL, RPC).expect("connect");
    let lock = name("outcomes-unanswered");
    let guard = client.mutex(&lock).unwrap().lock().unwrap();
    let resource = format!("{lock}-resource");
    let counter = client.counter(&format!("{lock}-count")).unwrap();
    let barrier = client.barrier(&format!("{lock}-barrier")).unwrap();

    proxy.freeze_replies();
    unanswered("a read", "Timeout", || client.read(&resource));
    unanswered("a ping", "Timeout", || client.ping());
    unanswered("a fenced put", "Indeterminate", || {
        guard.put(&resource, b"x")
    });
    unanswered("a fenced delete", "Indeterminate", || {
        guard.delete(&resource)
    });
    unanswered("a compare-and-set", "Indeterminate", || {
        counter.set_if(0, 5)
    });
    unanswered("a barrier set", "Indeterminate", || barrier.set());
    proxy.restore();

    // The client serves again once the replies flow, and gives its lock
    // back; nothing stays behind.
    wait_until(
        "the client answers again",
        scale(Duration::from_secs(10)),
        || client.read(&resource).is_ok(),
    );
    // What the unanswered writes may have left goes too.
    barrier.remove().expect("the barrier's removal");
    let _ = counter.delete().expect("the counter's removal");
    drop(guard);
    wait_until(
        "the lock is released",
        scale(Duration::from_secs(10)),
        || kit.entries_under(&lock).is_empty(),
    );
    client.close().expect("close");
}

/// A release after the holder's entry was deleted behind its back.
pub fn release_after_the_lease_is_gone_is_lease_lost<K: Kit>(kit: &K) {
    let client = kit.connect(TTL).expect("connect");
    let lock = name("outcomes-gone");
    let guard = client.mutex(&lock).unwrap().lock().unwrap();
    kit.delete_entry(guard.holder());
    assert_eq!(
        guard.lost().wait_timeout(scale(Duration::from_secs(10))),
        Some(LossReason::Deleted)
    );
    match guard.release() {
        Err(Error::LeaseLost {
            reason: LossReason::Deleted,
        }) => {}
        other => panic!("a release after the entry went: expected LeaseLost, got {other:?}"),
    }
    assert!(kit.entries_under(&lock).is_empty());
    // The lock is free for the next holder.
    let next = client.mutex(&lock).unwrap().try_lock().unwrap();
    assert!(
        next.is_some(),
        "the lock is free after a lost holder released"
    );
    drop(next);
    client.close().expect("close");
}

/// A release while nothing reaches the store.
pub fn an_unconfirmed_release_is_indeterminate_and_still_frees_the_lock<K: Kit>(kit: &K) {
    let proxy = Proxy::start(kit.server_addr());
    let client = kit.connect_via(proxy.addr(), TTL, RPC).expect("connect");
    let lock = name("outcomes-unconfirmed");
    let guard = client.mutex(&lock).unwrap().lock().unwrap();
    let holder = guard.holder().to_owned();

    proxy.blackhole();
    unanswered("a release that reached nobody", "Indeterminate", || {
        guard.release()
    });
    assert!(kit.exists(&holder), "nothing reached the store yet");
    // The connection the delete was sent on dies with it: what stays
    // undone must be done again on the next one.
    proxy.drop_connections();
    proxy.restore();

    // The entry goes once the store is reachable again, while the client
    // and its session live on: the lock is not blocked until they end.
    wait_until(
        "the entry is removed",
        scale(Duration::from_secs(10)),
        || !kit.exists(&holder),
    );
    let other = kit.connect(TTL).expect("connect");
    let next = other.mutex(&lock).unwrap().try_lock().unwrap();
    assert!(
        next.is_some(),
        "the lock is free while the first client lives"
    );
    drop(next);
    other.close().expect("close");
    client.close().expect("close");
    assert!(kit.entries_under(&lock).is_empty());
}
