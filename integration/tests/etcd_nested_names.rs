//! etcd names nested below another name are other names: their keys under
//! `<name>/` never make `<name>`'s counter or group refuse it, where any
//! key under the prefix (the counter) or under `read/`, `write/` or
//! `waiters/` (the group) did. Another recipe's keys on the very name are
//! still refused. The tests share one server, each on names of its own.

mod etcd_common;

use std::time::Duration;

use etcd_common::*;
use integration::EtcdServer;
use recipes_core::{Client as _, Error};

fn name(test: &str) -> String {
    format!("/etcd-nested/{test}-{}", std::process::id())
}

fn is_invalid<T: std::fmt::Debug>(r: recipes_core::Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument(_)))
}

#[test]
fn etcd_a_counter_works_beside_counters_and_locks_nested_below_it() {
    let server = EtcdServer::shared();
    let c = connect(server);
    let outer = name("counter");
    let counter = c.counter(&outer).unwrap();
    assert_eq!(counter.add(1).unwrap(), 1);
    // A counter and a lock nested below it, in use.
    let inner = c.counter(&format!("{outer}/x")).unwrap();
    assert_eq!(inner.add(5).unwrap(), 5);
    let held = c.mutex(&format!("{outer}/m")).unwrap().lock().unwrap();
    assert_eq!(counter.get().unwrap().value, 1);
    assert_eq!(counter.add(2).unwrap(), 3);
    assert!(counter.set_if(counter.get().unwrap().version, 10).unwrap());
    assert_eq!(counter.get().unwrap().value, 10);
    assert_eq!(inner.get().unwrap().value, 5);
    held.release().unwrap();
    // A lock on the very name is still another recipe's.
    let clash = name("counter-clash");
    let guard = c.mutex(&clash).unwrap().lock().unwrap();
    let on_lock = c.counter(&clash).unwrap();
    assert!(is_invalid(on_lock.get()), "a counter on a lock's name");
    assert!(is_invalid(on_lock.add(1)), "an add on a lock's name");
    guard.release().unwrap();
    assert!(counter.delete().unwrap());
    assert!(inner.delete().unwrap());
    c.close().unwrap();
}

#[test]
fn etcd_a_group_works_beside_a_group_nested_below_it_named_read() {
    let server = EtcdServer::shared();
    let (a, b) = (connect(server), connect(server));
    let outer = name("group");
    let group = a.group(&outer).unwrap();
    let member = a.group(&outer).unwrap().join("m1", b"").unwrap();
    let mut watch = group.watch().unwrap();
    // A member of the group `<outer>/read`: its key `<outer>/read/m2`.
    let nested = b.group(&format!("{outer}/read")).unwrap();
    let inner = nested.join("m2", b"").unwrap();
    assert_eq!(group.members().unwrap().ids(), ["m1"]);
    assert_eq!(nested.members().unwrap().ids(), ["m2"]);
    let also = a.group(&outer).unwrap().join("m3", b"").unwrap();
    let change = watch
        .next_timeout(integration::scale(Duration::from_secs(10)))
        .unwrap()
        .expect("the watch sees the join");
    assert_eq!(change.view.ids(), ["m1", "m3"]);
    // A read-write lock's reader on the very name is still refused.
    let clash = name("group-clash");
    let read = b.rw_lock(&clash).unwrap().read().unwrap();
    assert!(is_invalid(a.group(&clash).unwrap().members()));
    read.release().unwrap();
    for m in [member, inner, also] {
        m.release().unwrap();
    }
    a.close().unwrap();
    b.close().unwrap();
}
