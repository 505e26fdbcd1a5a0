//! Group membership, the same on every store: join, members and leave with
//! rising versions; an id already present is a typed error that changes
//! nothing; a watch sees joins and leaves in order; a killed member leaves
//! the view within its TTL; a paused member is told it is lost before the
//! others see it gone; bad input is refused and leaves nothing. A store
//! without groups in this release must refuse with a typed error.

use std::time::Duration;

use integration::test_dir::TestDir;
use integration::worker::{worker_binary, Worker};
use integration::{scale, wait_until};
use recipes_core::{BootInstant, Client, Error, GroupView, LossReason, MAX_MEMBER_DATA_BYTES};

use super::{boot, field, name, Kit};

const TTL: Duration = Duration::from_secs(10);

fn client<K: Kit>(kit: &K) -> K::Client {
    kit.connect(TTL).expect("connect")
}

/// Whether the store has groups; if not, its refusal is checked.
fn has_groups<C: Client>(c: &C) -> bool {
    match c.group("/conformance/probe") {
        Ok(_) => true,
        Err(Error::InvalidArgument(why)) => {
            assert!(why.contains("not available"), "refusal says why: {why}");
            false
        }
        Err(e) => panic!("a group of {} failed: {e}", c.store()),
    }
}

fn invalid<T: std::fmt::Debug>(what: &str, r: recipes_core::Result<T>) -> String {
    match r {
        Err(Error::InvalidArgument(msg)) => msg,
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

fn ids(view: &GroupView) -> Vec<&str> {
    view.ids()
}

/// Two clients join with their data, a third reads both with a version
/// that rises with each change; release and drop each remove a member;
/// nothing is left.
pub fn join_members_and_leave<K: Kit>(kit: &K) {
    let (a, b, reader) = (client(kit), client(kit), client(kit));
    if !has_groups(&a) {
        return;
    }
    let name = name("group");
    let group = reader.group(&name).unwrap();
    let empty = group.members().unwrap();
    assert!(empty.members.is_empty());
    let first = a.group(&name).unwrap().join("a", b"addr-a").unwrap();
    assert_eq!((first.id(), first.data()), ("a", &b"addr-a"[..]));
    assert!(!first.is_lost());
    let one = group.members().unwrap();
    assert_eq!(ids(&one), ["a"]);
    assert!(one.version > empty.version, "{one:?} after {empty:?}");
    let second = b.group(&name).unwrap().join("b", b"").unwrap();
    let two = group.members().unwrap();
    assert_eq!(ids(&two), ["a", "b"]);
    assert_eq!(two.members[0].data, b"addr-a");
    assert_eq!(two.members[1].data, b"");
    assert!(two.version > one.version);
    first.release().unwrap();
    let three = group.members().unwrap();
    assert_eq!(ids(&three), ["b"]);
    assert!(three.version > two.version);
    drop(second);
    wait_until(
        "the dropped member left",
        scale(Duration::from_secs(10)),
        || group.members().unwrap().members.is_empty(),
    );
    assert!(kit.entries_under(&name).is_empty(), "nothing left");
}

/// A leave the store cannot confirm (the member's client cut off) ends
/// within the RPC timeout as `Indeterminate`, and the member still goes
/// once its session ends.
pub fn an_unconfirmed_leave_is_indeterminate_within_the_rpc_timeout<K: Kit>(kit: &K) {
    let reader = client(kit);
    if !has_groups(&reader) {
        return;
    }
    let name = name("group-cut-off");
    let (ttl, rpc) = (Duration::from_secs(2), Duration::from_secs(1));
    let proxy = integration::Proxy::start(kit.server_addr());
    let cut = kit.connect_via(proxy.addr(), ttl, rpc).expect("connect");
    let member = cut.group(&name).unwrap().join("cut", b"").unwrap();
    let group = reader.group(&name).unwrap();
    assert_eq!(ids(&group.members().unwrap()), ["cut"]);
    proxy.blackhole();
    let started = std::time::Instant::now();
    let left = member.release();
    assert!(
        matches!(left, Err(Error::Indeterminate { .. })),
        "an unconfirmed leave: {left:?}"
    );
    assert!(
        started.elapsed() < scale(rpc * 3),
        "the leave took {:?}",
        started.elapsed()
    );
    wait_until(
        "the cut-off member's session ended",
        scale(Duration::from_secs(15)),
        || group.members().unwrap().members.is_empty(),
    );
    drop(cut);
}

/// A member whose entry is deleted behind its back while its session
/// lives (an operator's delete, a restore from before the join, a lost
/// write) is told it is lost within a bound; a second member of the same
/// id joins then, and the first one's leave does not touch it.
pub fn a_member_whose_entry_is_deleted_is_lost<K: Kit>(kit: &K) {
    member_deleted(kit, false);
}

/// As [`a_member_whose_entry_is_deleted_is_lost`], with the id taken by
/// another client's join at once, before the first member could look: it
/// is still told (a look that found an entry under its id, another's, took
/// it for its own).
pub fn a_member_whose_id_is_taken_after_its_entry_went_is_lost<K: Kit>(kit: &K) {
    member_deleted(kit, true);
}

fn member_deleted<K: Kit>(kit: &K, taken_at_once: bool) {
    let (a, b) = (client(kit), client(kit));
    if !has_groups(&a) {
        return;
    }
    let name = name("group-deleted");
    let first = a.group(&name).unwrap().join("w1", b"first").unwrap();
    let entries = kit.entries_under(&name);
    assert_eq!(entries.len(), 1, "{entries:?}");
    kit.delete_entry(&entries[0]);
    let join = || b.group(&name).unwrap().join("w1", b"second").unwrap();
    let early = taken_at_once.then(join);
    let reason = first.lost().wait_timeout(scale(TTL / 2));
    assert_eq!(
        reason,
        Some(LossReason::Deleted),
        "the member whose entry was deleted is told"
    );
    let second = early.unwrap_or_else(join);
    assert!(!second.is_lost());
    // The first member's leave removes only what is its own.
    let _ = first.release();
    let view = b.group(&name).unwrap().members().unwrap();
    assert_eq!(ids(&view), ["w1"]);
    assert_eq!(view.members[0].data, b"second");
    assert!(!second.is_lost(), "the second member holds the id");
    second.release().unwrap();
    assert!(kit.entries_under(&name).is_empty(), "nothing left");
}

/// A second join with an id already present is a typed error: the first
/// member and its data stay, and nothing else is written.
pub fn a_taken_id_is_refused_and_changes_nothing<K: Kit>(kit: &K) {
    let (a, b) = (client(kit), client(kit));
    if !has_groups(&a) {
        return;
    }
    let name = name("group-dup");
    let held = a.group(&name).unwrap().join("x", b"first").unwrap();
    let before = a.group(&name).unwrap().members().unwrap();
    let why = invalid("a taken id", b.group(&name).unwrap().join("x", b"second"));
    assert!(why.contains("already in the group"), "{why}");
    // The same client cannot take its own member over either.
    invalid("a taken id", a.group(&name).unwrap().join("x", b"again"));
    let after = b.group(&name).unwrap().members().unwrap();
    assert_eq!(after.members, before.members, "nothing changed");
    assert_eq!(after.members[0].data, b"first");
    assert!(!held.is_lost());
    assert_eq!(kit.entries_under(&name).len(), 1);
    held.release().unwrap();
    assert!(kit.entries_under(&name).is_empty(), "nothing left");
}

/// A client of `kit` through a proxy (TTL 6 s, RPC timeout [`CUT_RPC`]),
/// a reader, and a fresh group name with `tag`; `None` without groups.
fn through_proxy<K: Kit>(
    kit: &K,
    tag: &str,
) -> Option<(K::Client, K::Client, String, integration::Proxy)> {
    let reader = client(kit);
    if !has_groups(&reader) {
        return None;
    }
    let proxy = integration::Proxy::start(kit.server_addr());
    let c = kit
        .connect_via(proxy.addr(), Duration::from_secs(6), CUT_RPC)
        .expect("connect");
    Some((reader, c, name(tag), proxy))
}

/// The RPC timeout of [`through_proxy`]'s client.
const CUT_RPC: Duration = Duration::from_secs(1);

/// A join of "w" through `c` with `proxy` cut off is refused as taken,
/// and at once: nothing was sent (a request would wait out [`CUT_RPC`]).
fn refused_at_once<C: Client>(c: &C, name: &str, proxy: &integration::Proxy, what: &str) {
    proxy.blackhole();
    let started = std::time::Instant::now();
    let why = invalid(what, c.group(name).unwrap().join("w", b"second"));
    let took = started.elapsed();
    proxy.restore();
    assert!(why.contains("already in the group"), "{why}");
    assert!(
        took < scale(CUT_RPC / 2),
        "refused after {took:?}: it waited on the store"
    );
}

/// A join of an id that a membership of the same client holds is refused
/// before anything is sent (the store cannot tell two memberships of one
/// session apart: a retry after a failure before the create went out
/// would take the other's member for its own): at once even with the
/// connection cut off, the held member untouched. Once that membership
/// is gone, the client may join with the id again.
pub fn our_own_held_id_is_refused_before_anything_is_sent<K: Kit>(kit: &K) {
    let Some((reader, c, name, proxy)) = through_proxy(kit, "group-own-id") else {
        return;
    };
    let held = c.group(&name).unwrap().join("w", b"first").unwrap();
    refused_at_once(&c, &name, &proxy, "our own id");
    assert!(!held.is_lost(), "the held member is untouched");
    let view = reader.group(&name).unwrap().members().unwrap();
    assert_eq!(ids(&view), ["w"]);
    assert_eq!(view.members[0].data, b"first");
    held.release().unwrap();
    let again = c.group(&name).unwrap().join("w", b"again").unwrap();
    again.release().unwrap();
    assert!(kit.entries_under(&name).is_empty(), "nothing left");
}

/// A dropped membership's id stays claimed by its client until the
/// removal of its member ended: a join of it meanwhile (the connection
/// cut off, the removal pending) is refused at once rather than sent,
/// and once the removal is done the id is the client's to join again.
pub fn a_dropped_members_id_stays_claimed_until_its_removal_ended<K: Kit>(kit: &K) {
    let Some((reader, c, name, proxy)) = through_proxy(kit, "group-dropped-id") else {
        return;
    };
    let held = c.group(&name).unwrap().join("w", b"first").unwrap();
    proxy.blackhole();
    drop(held);
    refused_at_once(&c, &name, &proxy, "a dropped member's id");
    wait_until("the dropped member removed", scale(TTL), || {
        let view = reader.group(&name).unwrap().members().unwrap();
        view.members.is_empty()
    });
    let mut again = None;
    wait_until("the id free again", scale(CUT_RPC * 4), || {
        again = c.group(&name).unwrap().join("w", b"again").ok();
        again.is_some()
    });
    again.expect("joined").release().unwrap();
    assert!(kit.entries_under(&name).is_empty(), "nothing left");
}

/// A watch sees each join and leave in order, each view's version above
/// the one before; a burst it did not follow one by one ends in the
/// right view, with what it missed counted where the store counts.
pub fn watch_sees_joins_and_leaves_in_order<K: Kit>(kit: &K) {
    let (c, watcher) = (client(kit), client(kit));
    if !has_groups(&c) {
        return;
    }
    let name = name("group-watch");
    let group = c.group(&name).unwrap();
    let mut watch = watcher.group(&name).unwrap().watch().unwrap();
    let mut version = watch.last().version;
    let within = scale(Duration::from_secs(10));
    let mut next = |expect_joined: &[&str], expect_left: &[&str]| {
        let change = watch
            .next_timeout(within)
            .unwrap()
            .expect("the watch saw the change");
        assert_eq!(change.joined, expect_joined, "{change:?}");
        assert_eq!(change.left, expect_left, "{change:?}");
        assert!(change.view.version > version, "{change:?} after {version}");
        assert!(matches!(change.missed, Some(0) | None), "{change:?}");
        version = change.view.version;
        change
    };
    let m1 = group.join("m1", b"1").unwrap();
    next(&["m1"], &[]);
    let m2 = group.join("m2", b"2").unwrap();
    let c2 = next(&["m2"], &[]);
    assert_eq!(ids(&c2.view), ["m1", "m2"]);
    m1.release().unwrap();
    next(&[], &["m1"]);
    m2.release().unwrap();
    let c4 = next(&[], &["m2"]);
    assert!(c4.view.members.is_empty());

    // A join and a leave while nobody reads: where the store counts its
    // changes, the changes seen and missed add up to all three.
    let quick = group.join("quick", b"").unwrap();
    quick.release().unwrap();
    let stay = group.join("stay", b"").unwrap();
    let (mut counted, mut total) = (true, 0);
    while !watch.last().contains("stay") {
        let change = watch.next_timeout(within).unwrap().expect("a change");
        assert!(change.view.version > version, "{change:?} after {version}");
        version = change.view.version;
        match change.missed {
            Some(missed) => total += change.joined.len() + change.left.len() + missed as usize,
            None => counted = false,
        }
    }
    if counted && watch.last().changes.is_some() {
        assert_eq!(total, 3, "every change seen or counted as missed");
    }
    assert!(watch.next_timeout(Duration::ZERO).unwrap().is_none());
    drop(stay);
    wait_until("left", scale(Duration::from_secs(10)), || {
        kit.entries_under(&name).is_empty()
    });
}

/// Bad input is refused with a typed error before anything is written:
/// an empty, too long or `/`-holding id, oversized data, a group on a
/// name that holds a lock. Nothing is left.
pub fn bad_input_is_refused_and_leaves_nothing<K: Kit>(kit: &K) {
    let c = client(kit);
    if !has_groups(&c) {
        return;
    }
    let name = name("group-bad");
    let group = c.group(&name).unwrap();
    invalid("an empty id", group.join("", b""));
    invalid("a long id", group.join(&"i".repeat(256), b""));
    invalid("a path id", group.join("a/b", b""));
    let big = vec![b'd'; MAX_MEMBER_DATA_BYTES + 1];
    let why = invalid("big data", group.join("big", &big));
    assert!(why.contains("65536"), "says the limit: {why}");
    invalid("an empty name", c.group(""));
    assert!(kit.entries_under(&name).is_empty(), "nothing written");
    assert!(group.members().unwrap().members.is_empty());

    let lock = name.clone() + "-lock";
    let held = c.mutex(&lock).unwrap().lock().unwrap();
    let on_lock = c.group(&lock).unwrap();
    let why = invalid("a lock's name", on_lock.join("m", b""));
    assert!(why.contains("holds"), "says what the name holds: {why}");
    invalid("a lock's name", on_lock.members());
    assert_eq!(kit.entries_under(&lock).len(), 1, "only the lock's entry");
    held.release().unwrap();
    assert!(kit.entries_under(&lock).is_empty(), "nothing left");
}

/// A member in a worker process that is killed leaves the others' view
/// within its TTL (plus the store's expiry granularity and slack).
pub fn killed_member_leaves_the_view_within_its_ttl<K: Kit>(kit: &K, ttl: Duration) {
    let c = client(kit);
    if !has_groups(&c) {
        return;
    }
    let name = name("group-killed");
    let dir = TestDir::new("group-killed");
    let mut member = Worker::start(&worker_binary(), "member", dir.path());
    member.ok(&kit.worker_connect(ttl), Duration::from_secs(15));
    member.ok(&format!("join {name} w addr"), Duration::from_secs(10));
    let group = c.group(&name).unwrap();
    let mut watch = group.watch().unwrap();
    assert_eq!(ids(watch.last()), ["w"]);
    assert_eq!(watch.last().members[0].data, b"addr");
    let killed_at = BootInstant::now();
    member.kill();
    let bound = kit.granted(ttl) + scale(kit.expiry_granularity() + Duration::from_secs(2));
    let change = watch
        .next_timeout(bound + Duration::from_secs(5))
        .unwrap()
        .expect("the killed member left the view");
    let gone_at = BootInstant::now();
    assert_eq!(change.left, ["w"]);
    assert!(
        gone_at <= killed_at + bound,
        "gone {:?} after the kill; the TTL is {:?}",
        gone_at - killed_at,
        kit.granted(ttl)
    );
    assert!(kit.entries_under(&name).is_empty(), "nothing left");
}

/// A member paused (SIGSTOP) past its TTL: the others see it gone; once
/// resumed it has been told it is lost, at a deadline before they saw it
/// gone.
pub fn paused_member_is_told_lost_before_others_see_it_gone<K: Kit>(kit: &K, ttl: Duration) {
    let c = client(kit);
    if !has_groups(&c) {
        return;
    }
    let name = name("group-paused");
    let dir = TestDir::new("group-paused");
    let mut member = Worker::start(&worker_binary(), "member", dir.path());
    member.ok(&kit.worker_connect(ttl), Duration::from_secs(15));
    member.ok(&format!("join {name} p"), Duration::from_secs(10));
    let group = c.group(&name).unwrap();
    assert_eq!(ids(&group.members().unwrap()), ["p"]);
    member.pause();
    wait_until(
        "the paused member left the view",
        kit.granted(ttl) + Duration::from_secs(10),
        || !group.members().unwrap().contains("p"),
    );
    let gone_at = BootInstant::now();
    member.resume();
    let status = member.ok("member-status", Duration::from_secs(10));
    assert_ne!(field(&status, "lost"), "no", "the member knows: {status}");
    assert_ne!(field(&status, "valid_until_ms"), "0", "{status}");
    let valid_until = boot(field(&status, "valid_until_ms"));
    assert!(
        valid_until <= gone_at,
        "told lost at {valid_until:?}, after the others saw it gone at {gone_at:?}"
    );
    let _ = member.request("group-leave", Duration::from_secs(30));
    assert!(!group.members().unwrap().contains("p"));
}
