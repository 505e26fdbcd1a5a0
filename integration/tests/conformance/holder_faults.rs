//! Properties 2, 3, 4 and 7: a holder that is killed, paused or
//! black-holed loses the lock within the bounds of its lease, is fenced out,
//! and cannot remove the next holder's entry.

use std::time::Duration;

use integration::test_dir::TestDir;
use integration::worker::{worker_binary, Worker};
use integration::{scale, wait_until};
use recipes_core::{BootInstant, FenceGate};

use super::{boot, field, name, token_of, Kit};

/// Property 2: a killed holder's lock is taken by another no earlier than
/// the holder's last acknowledged renewal + the lease, and no later than the
/// kill + the lease + slack.
pub fn killed_holder_frees_the_lock_within_the_lease<K: Kit>(kit: &K, ttl: Duration) {
    let name = name("killed");
    let dir = TestDir::new("killed-holder");
    let mut holder = Worker::start(&worker_binary(), "holder", dir.path());
    holder.ok(&kit.worker_connect(ttl), Duration::from_secs(15));
    let reply = holder.ok(&format!("lock {name}"), Duration::from_secs(10));
    let granted = kit.granted(ttl);

    let waiter = kit.mutex(&name, Duration::from_secs(10));
    let (tx, rx) = crossbeam_channel::bounded(1);
    let taker = std::thread::spawn(move || {
        let g = waiter.lock().expect("the waiter acquires");
        tx.send(BootInstant::now()).unwrap();
        g.token()
    });
    let status = holder.ok("status", Duration::from_secs(5));
    let last_ack = boot(field(&status, "last_ack_ms"));
    let killed_at = BootInstant::now();
    holder.kill();
    let taken_at = rx
        .recv_timeout(scale(granted + Duration::from_secs(10)))
        .expect("the lock was taken over");
    let token = taker.join().unwrap();
    assert!(token > token_of(&reply), "the new holder's fence is higher");
    // Lower bound: never scaled.
    assert!(
        taken_at >= last_ack + granted,
        "taken {:?} after the last acknowledged renewal, less than the lease {granted:?}",
        taken_at - last_ack
    );
    let slack = kit.expiry_granularity() + Duration::from_secs(2);
    assert!(
        taken_at <= killed_at + granted + scale(slack),
        "taken {:?} after the kill; the lease is {granted:?}",
        taken_at - killed_at
    );
}

/// Properties 3 and 4: the paused holder. SIGSTOP it, wait until its entry
/// is gone and another holder has written with a higher fence, SIGCONT: its
/// loss signal has fired, its in-store write and the gate refuse it, and its
/// release leaves the new holder's entry alone.
pub fn paused_holder_is_fenced_out<K: Kit>(kit: &K, ttl: Duration) {
    let name = name("paused");
    let resource = format!("{name}-resource");
    let dir = TestDir::new("paused-holder");
    let gate = FenceGate::new();
    let mut old = Worker::start(&worker_binary(), "old", dir.path());
    old.ok(&kit.worker_connect(ttl), Duration::from_secs(15));
    let reply = old.ok(&format!("lock {name}"), Duration::from_secs(10));
    let (old_token, old_holder) = (token_of(&reply), field(&reply, "holder").to_owned());
    old.ok(
        &format!("write {resource} {old_token}"),
        Duration::from_secs(10),
    );
    gate.admit(old_token).unwrap();

    old.pause();
    wait_until(
        "the paused holder's entry is gone",
        kit.granted(ttl) + Duration::from_secs(10),
        || !kit.exists(&old_holder),
    );
    let new = kit
        .mutex(&name, Duration::from_secs(10))
        .try_lock_for(scale(Duration::from_secs(10)))
        .unwrap()
        .expect("another client takes the lock");
    assert!(new.token() > old_token);
    gate.admit(new.token()).unwrap();
    assert!(kit.exists(new.holder()));
    old.resume();

    let status = old.ok("status", Duration::from_secs(10));
    assert_ne!(
        field(&status, "lost"),
        "no",
        "the old holder knows it lost: {status}"
    );
    let refused = old
        .request(
            &format!("write {resource} {old_token}"),
            Duration::from_secs(30),
        )
        .expect_err("the old holder's fenced write is refused");
    assert!(refused.starts_with("fence-rejected"), "{refused}");
    assert!(
        gate.admit(old_token).is_err(),
        "the gate refuses the old fence"
    );
    assert_eq!(
        kit.value(&resource).as_deref(),
        Some(old_token.to_string().as_str())
    );

    // Safe release: the old holder's release leaves the new holder alone.
    let _ = old.request("release", Duration::from_secs(30));
    assert!(kit.exists(new.holder()), "the new holder's entry survived");
    new.check().expect("the new holder still holds");
}

/// Property 7: under `LossPolicy::Deadline`, a black-holed holder's lease
/// deadline passes (and its signal fires) before another client acquires.
pub fn blackholed_holder_loses_before_another_acquires<K: Kit>(kit: &K, ttl: Duration) {
    let name = name("blackhole");
    let proxy = integration::Proxy::start(kit.server_addr());
    let held = kit
        .mutex_via(proxy.addr(), &name, ttl)
        .lock()
        .expect("lock through the proxy");
    let waiter = kit.mutex(&name, Duration::from_secs(10));
    let (tx, rx) = crossbeam_channel::bounded(1);
    let taker = std::thread::spawn(move || {
        let g = waiter.lock().expect("the waiter acquires");
        tx.send(BootInstant::now()).unwrap();
        g
    });
    proxy.blackhole();
    let reason = held
        .lost()
        .wait_timeout(scale(kit.granted(ttl) + Duration::from_secs(5)))
        .expect("the black-holed holder's signal fires");
    let lost_at = BootInstant::now();
    let valid_until = held.valid_until().expect("a deadline");
    let taken_at = rx
        .recv_timeout(scale(kit.granted(ttl) + Duration::from_secs(10)))
        .expect("the other client acquires");
    assert!(
        valid_until <= taken_at,
        "valid_until {valid_until:?} passed after the other acquired at {taken_at:?} ({reason})"
    );
    assert!(lost_at <= taken_at + scale(Duration::from_secs(1)));
    let new = taker.join().unwrap();
    assert!(new.token() > held.token());
    proxy.restore();
}
