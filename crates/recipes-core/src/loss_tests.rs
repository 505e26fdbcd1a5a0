//! The loss signal's tests.

use super::*;
use crossbeam_channel::select;

#[test]
fn a_signal_of_several_fires_with_the_first_part_that_fires() {
    let (a, b) = (LossTrigger::root(), LossTrigger::root());
    let both = LossSignal::any_of(&[a.signal(), b.signal()]);
    assert!(!both.is_lost());
    assert_eq!(both.wait_timeout(Duration::from_millis(10)), None);
    b.fire(LossReason::Deleted);
    assert_eq!(both.reason(), Some(LossReason::Deleted));
    assert!(both.receiver().recv().is_err(), "the receiver disconnects");
    a.fire(LossReason::Closed);
    assert_eq!(both.reason(), Some(LossReason::Deleted), "the first counts");
    // A part lost before the signal was made: lost at once.
    let late = LossSignal::any_of(&[a.signal(), LossTrigger::root().signal()]);
    assert_eq!(late.reason(), Some(LossReason::Closed));
    assert!(late.receiver().recv().is_err());
}

#[test]
fn fires_once_and_every_clone_sees_it() {
    let t = LossTrigger::root();
    let (a, b) = (t.signal(), t.signal().clone());
    assert!(!a.is_lost());
    assert_eq!(a.wait_timeout(Duration::from_millis(10)), None);
    assert!(t.fire(LossReason::Deleted));
    assert!(!t.fire(LossReason::Closed), "only the first fire counts");
    for s in [&a, &b] {
        assert!(s.is_lost());
        assert_eq!(s.reason(), Some(LossReason::Deleted));
        assert_eq!(s.wait_timeout(Duration::ZERO), Some(LossReason::Deleted));
    }
    assert!(a.valid_until().is_some(), "fired_at bounds validity");
}

#[test]
fn usable_in_select_and_wakes_a_blocked_thread() {
    let t = LossTrigger::root();
    let s = t.signal();
    let waiter = std::thread::spawn(move || {
        let never = crossbeam_channel::never::<u8>();
        select! {
            recv(s.receiver()) -> msg => { assert!(msg.is_err()); s.reason() }
            recv(never) -> _ => unreachable!(),
        }
    });
    t.fire(LossReason::Revoked);
    assert_eq!(waiter.join().unwrap(), Some(LossReason::Revoked));
}

#[test]
fn children_fire_with_their_parent_and_alone() {
    let root = LossTrigger::root();
    let a = root.child();
    let b = root.child();
    let a1 = a.child();
    assert!(a.fire(LossReason::Deleted));
    assert!(a1.signal().is_lost() && !b.signal().is_lost() && !root.signal().is_lost());
    root.fire(LossReason::Closed);
    assert_eq!(b.signal().reason(), Some(LossReason::Closed));
    assert_eq!(a.signal().reason(), Some(LossReason::Deleted));
    // A child of a fired trigger is born fired.
    let late = root.child();
    assert_eq!(late.signal().reason(), Some(LossReason::Closed));
}

#[test]
fn async_waiters_wake_when_fired() {
    let t = LossTrigger::root();
    let child = t.child();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = child.signal();
    let waiter = rt.spawn(async move { s.fired().await });
    let firer = std::thread::spawn(move || t.fire(LossReason::Revoked));
    let reason = rt.block_on(waiter).unwrap();
    firer.join().unwrap();
    assert_eq!(reason, LossReason::Revoked);
    // Already fired: resolves at once.
    assert_eq!(rt.block_on(child.signal().fired()), LossReason::Revoked);
}

#[test]
fn dropped_children_are_pruned() {
    let root = LossTrigger::root();
    for _ in 0..1000 {
        let _ = root.child();
    }
    assert!(root.inner.state.lock().children.len() <= 1);
}

#[test]
fn a_panicking_hook_neither_stops_the_firing_nor_the_other_hooks() {
    let root = LossTrigger::root();
    let child = root.child();
    let heard = Arc::new(parking_lot::Mutex::new(Vec::new()));
    root.signal().on_fire(|_| panic!("a hook that panics"));
    let h = heard.clone();
    root.signal().on_fire(move |r| h.lock().push(("root", r)));
    let h = heard.clone();
    child.signal().on_fire(move |r| h.lock().push(("child", r)));
    assert!(root.fire(LossReason::Revoked));
    assert_eq!(
        child.signal().receiver().try_recv(),
        Err(crossbeam_channel::TryRecvError::Disconnected)
    );
    assert_eq!(child.signal().reason(), Some(LossReason::Revoked));
    assert_eq!(
        *heard.lock(),
        [
            ("root", LossReason::Revoked),
            ("child", LossReason::Revoked)
        ]
    );
}
