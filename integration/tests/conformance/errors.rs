//! The error table of `docs/architecture.md`, asserted on every backend:
//! the same condition gets the same `Error` variant (or outcome) whatever
//! the store, and nothing is left behind in the store.

use std::time::Duration;

use recipes_core::{Client, Error, LossReason};

use super::{invalid, name, Kit};

/// Bad names, sizes, ids and leases: `InvalidArgument`, before anything is
/// written.
pub fn bad_input_is_invalid_argument<K: Kit>(kit: &K) {
    let client = kit.connect(Duration::from_secs(5)).expect("connect");
    for bad in ["", "locks/x", "/a/", "/a//b", "/a\u{1}b"] {
        invalid(&format!("mutex {bad:?}"), client.mutex(bad));
        invalid(&format!("semaphore {bad:?}"), client.semaphore(bad, 2));
        invalid(&format!("election {bad:?}"), client.election(bad));
        invalid(&format!("latch {bad:?}"), client.leader_latch(bad, "id"));
        invalid(
            &format!("selector {bad:?}"),
            client.leader_selector(bad, "id"),
        );
        invalid(&format!("contenders {bad:?}"), client.contenders(bad));
    }
    // A name over the store's request limit is refused before it is sent,
    // with a message that quotes only a short cut of it, and costs no other
    // lock of the client.
    let innocent = client
        .mutex(&name("errors-innocent"))
        .unwrap()
        .lock()
        .unwrap();
    let huge = format!("/{}", "n".repeat(1_100_000));
    for r in [
        client.mutex(&huge).map(drop),
        client.election(&huge).map(drop),
    ] {
        match r {
            Err(Error::InvalidArgument(msg)) => assert!(msg.len() < 400, "{} bytes", msg.len()),
            other => panic!("a 1.1 MB name: {other:?}"),
        }
    }
    innocent.check().expect("the innocent lock is still held");
    innocent.release().unwrap();
    let ok = name("errors-ok");
    invalid("zero permits", client.semaphore(&ok, 0));
    invalid("an empty latch id", client.leader_latch(&ok, ""));
    invalid("an empty selector id", client.leader_selector(&ok, ""));
    for ttl in [
        Duration::ZERO,
        Duration::from_millis(500),
        Duration::from_secs(2 * 86_400),
    ] {
        invalid(&format!("a TTL of {ttl:?}"), kit.connect(ttl));
    }
    assert!(kit.entries_under(&ok).is_empty(), "nothing was written");
    let _ = client.close();
}

/// A semaphore opened with another size than the stored one is refused
/// with `InvalidArgument`, and its refused acquisition leaves no permit.
pub fn a_mismatched_semaphore_size_is_invalid_argument<K: Kit>(kit: &K) {
    let client = kit.connect(Duration::from_secs(5)).expect("connect");
    let sem = name("errors-size");
    let permit = client.semaphore(&sem, 2).unwrap().acquire().unwrap();
    let other = client.semaphore(&sem, 3).and_then(|s| s.try_acquire());
    invalid("a semaphore of 3 where 2 is stored", other);
    let (size, permits) = client.permits(&sem).unwrap();
    assert_eq!(size, Some(2));
    assert_eq!(permits.len(), 1, "only the first permit: {permits:?}");
    permit.release().unwrap();
    let _ = client.close();
}

/// A fenced write the store refuses (our entry was deleted behind our
/// back) fires the guard's loss signal at once: the holder learns it from
/// the refusal, whatever the store's watch or poll has yet to tell.
pub fn a_refused_fenced_write_fires_the_loss_signal<K: Kit>(kit: &K) {
    let client = kit.connect(Duration::from_secs(10)).expect("connect");
    let lock = name("errors-refused");
    let resource = format!("{lock}-resource");
    let guard = client.mutex(&lock).unwrap().lock().unwrap();
    guard
        .put(&resource, b"first")
        .expect("a holder's write lands");
    kit.delete_entry(guard.holder());
    match guard.put(&resource, b"late") {
        Err(Error::FenceRejected { .. }) => {}
        other => panic!("a fenced write after our entry went: {other:?}"),
    }
    assert!(
        guard.is_lost(),
        "refused, and the guard still says it holds"
    );
    assert!(matches!(guard.check(), Err(Error::LeaseLost { .. })));
    assert_eq!(kit.value(&resource).as_deref(), Some("first"));
    drop(guard);
    let _ = client.close();
}

/// A held lock: a try-lock elsewhere is `Ok(None)` and leaves no entry;
/// once the holder's entry is deleted its loss fires with `Deleted`, its
/// `check` is `LeaseLost`, its fenced write is `FenceRejected`; a call on a
/// closed client is `Closed`.
pub fn held_lost_and_closed_outcomes_are_the_same<K: Kit>(kit: &K) {
    let (a, b) = (
        kit.connect(Duration::from_secs(5)).expect("connect"),
        kit.connect(Duration::from_secs(5)).expect("connect"),
    );
    let lock = name("errors-held");
    let guard = a.mutex(&lock).unwrap().lock().unwrap();
    assert!(b.mutex(&lock).unwrap().try_lock().unwrap().is_none());
    let timed = b
        .mutex(&lock)
        .unwrap()
        .try_lock_for(Duration::from_millis(100));
    assert!(timed.unwrap().is_none());
    assert_eq!(
        kit.entries_under(&lock),
        vec![guard.holder().to_owned()],
        "timed-out acquisitions left nothing"
    );
    let contenders = b.contenders(&lock).unwrap();
    assert_eq!(contenders.len(), 1);
    assert_eq!(contenders[0].holder, guard.holder());

    // A fenced write never lands inside the recipe's own entries (on etcd a
    // put to our own key would strip its lease and block the lock forever).
    for inside in [guard.holder().to_owned(), format!("{lock}/forged")] {
        invalid(
            &format!("a fenced put to {inside}"),
            guard.put(&inside, b"x"),
        );
        invalid(
            &format!("a fenced delete of {inside}"),
            guard.delete(&inside),
        );
    }
    assert_eq!(kit.entries_under(&lock), vec![guard.holder().to_owned()]);
    let sem = name("errors-sem-layout");
    let permit = a.semaphore(&sem, 1).unwrap().acquire().unwrap();
    invalid(
        "a fenced put to the semaphore's own keys",
        permit.put(&format!("{sem}/config"), b"9"),
    );
    assert_eq!(
        a.permits(&sem).unwrap().0,
        Some(1),
        "the stored size is untouched"
    );
    permit.release().unwrap();

    kit.delete_entry(guard.holder());
    let reason = guard
        .lost()
        .wait_timeout(integration::scale(Duration::from_secs(10)));
    assert_eq!(reason, Some(LossReason::Deleted));
    assert!(matches!(
        guard.check(),
        Err(Error::LeaseLost {
            reason: LossReason::Deleted
        })
    ));
    let resource = format!("{lock}-resource");
    match guard.put(&resource, b"late") {
        Err(Error::FenceRejected { .. }) => {}
        other => panic!("a fenced write after our entry went: {other:?}"),
    }
    assert_eq!(kit.value(&resource), None, "the refused write did not land");
    drop(guard);

    let closed = a.clone();
    let _ = a.close();
    assert!(matches!(
        closed.mutex(&lock).and_then(|m| m.try_lock()),
        Err(Error::Closed)
    ));
    let _ = b.close();
}

/// Entries that are not of the recipe's own layout never count as
/// contenders (issue 10, finding 6): a child with a digit suffix, a nested
/// lock's entries. A recipe opened on a name that holds another recipe's
/// layout (a mutex on a semaphore) is refused.
pub fn only_the_recipes_own_entries_are_contenders<K: Kit>(kit: &K) {
    let client = kit.connect(Duration::from_secs(5)).expect("connect");
    let lock = name("errors-layout");
    kit.write_entry(&format!("{lock}/job-0000000000"), b"");
    let nested = client
        .mutex(&format!("{lock}/nested"))
        .unwrap()
        .lock()
        .unwrap();
    let guard = client.mutex(&lock).unwrap().try_lock().unwrap();
    let guard = guard.expect("an unrelated child and a nested lock do not block the lock");
    assert_eq!(client.contenders(&lock).unwrap().len(), 1, "only our entry");
    guard.release().unwrap();
    nested.release().unwrap();

    // A mutex opened on a semaphore's name neither counts the semaphore's
    // entries as contenders nor runs beside it: it is refused, and leaves
    // nothing of its own.
    let sem = name("errors-layout-sem");
    let permit = client.semaphore(&sem, 2).unwrap().acquire().unwrap();
    let before = kit.entries_under(&sem);
    invalid(
        "a mutex on a semaphore's name",
        client.mutex(&sem).and_then(|m| m.try_lock()),
    );
    assert_eq!(kit.entries_under(&sem), before, "the refusal left nothing");
    // Nor on one of the semaphore's own queues (`<sem>/locks`,
    // `<sem>/leases`), whose entries it would share.
    for inside in ["locks", "leases"] {
        invalid(
            &format!("a mutex on a semaphore's {inside}"),
            client
                .mutex(&format!("{sem}/{inside}"))
                .and_then(|m| m.try_lock()),
        );
        assert_eq!(kit.entries_under(&sem), before, "the refusal left nothing");
    }
    permit.release().unwrap();

    // The other way round: a semaphore whose permits' name holds a mutex
    // (whose entries it would count as permits) is refused, and leaves
    // nothing.
    let sem = name("errors-layout-sem-after");
    let guard = client
        .mutex(&format!("{sem}/leases"))
        .unwrap()
        .lock()
        .unwrap();
    let before = kit.entries_under(&sem);
    let refused = invalid(
        "a semaphore whose permits' name holds a mutex",
        client.semaphore(&sem, 2).and_then(|s| s.try_acquire()),
    );
    assert!(refused.contains("keeps its permits"), "{refused}");
    assert_eq!(kit.entries_under(&sem), before, "the refusal left nothing");
    guard.release().unwrap();
    // Nor stored the semaphore's size, which would refuse the lock now.
    let again = client.mutex(&format!("{sem}/leases")).unwrap().try_lock();
    let again = again.expect("the lock is not refused after the semaphore's refusal");
    again.expect("the lock is free").release().unwrap();
    let _ = client.close();
}

/// A value over the stores' limit (a fenced write's, an election's) is
/// refused before it is sent, and costs no other lock on the same client
/// (issue 10, finding 2: on ZooKeeper one oversized packet dropped the
/// connection and every lock of the session with it).
pub fn an_oversized_value_is_refused_and_costs_no_lock<K: Kit>(kit: &K) {
    let client = kit.connect(Duration::from_secs(10)).expect("connect");
    let lock = name("errors-big-value");
    let guard = client.mutex(&lock).unwrap().lock().unwrap();
    // Over ZooKeeper's 1 MiB packet limit.
    let big = vec![b'v'; 1_100_000];
    let resource = format!("{lock}-resource");
    invalid("an oversized fenced put", guard.put(&resource, &big));
    invalid(
        "a fenced put one byte over the limit",
        guard.put(&resource, &vec![b'v'; recipes_core::MAX_VALUE_BYTES + 1]),
    );
    let election = name("errors-big-election");
    invalid(
        "an oversized campaign value",
        client.election(&election).unwrap().try_campaign(&big),
    );
    let leader = client
        .election(&election)
        .unwrap()
        .try_campaign(b"small")
        .unwrap()
        .expect("nobody leads");
    invalid("an oversized proclaim", leader.proclaim(&big));
    leader.resign().expect("resign");

    // The lock held before is still held, and the client still works.
    assert!(guard.check().is_ok(), "the held lock survived");
    assert!(kit.exists(guard.holder()));
    guard
        .put(&resource, b"fits")
        .expect("a fenced put that fits");
    assert_eq!(kit.value(&resource).as_deref(), Some("fits"));
    guard.release().expect("release");
    assert!(kit.entries_under(&lock).is_empty());
    assert!(kit.entries_under(&election).is_empty());
    client.close().expect("close");
}
