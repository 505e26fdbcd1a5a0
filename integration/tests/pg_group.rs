//! PostgreSQL's group rows beyond the conformance suite: a session's end
//! (which deletes its member rows by cascade, with no statement of ours)
//! still raises the version; a member whose session expired is taken over
//! by the next join of its id; the last member out leaves no row; a lock
//! on a group's name is refused naming the group.

mod pg_common;

use std::time::Duration;

use integration::{scale, PgFacts, PgServer};
use pg_common::*;
use recipes_core::{Client, Error};

const TTL: Duration = Duration::from_secs(10);

/// The name's rows of `recipes.names`, as `kind next_seq permits`.
fn names_row(server: &PgServer, name: &str) -> String {
    server
        .sql(&format!(
            "SELECT kind || ' ' || next_seq || ' ' || coalesce(permits::text, '-') \
             FROM recipes.names WHERE name = '{name}'"
        ))
        .trim()
        .to_owned()
}

/// A client closed with a member in the group: its session row's delete
/// takes the member's row with it; the next read sees it gone with a
/// version above the last, and the last member's leave deletes the name's
/// row.
#[test]
fn a_session_end_raises_the_version_and_the_last_leave_leaves_no_row() {
    let server = PgServer::shared();
    let n = name("group-closed");
    let (a, b, reader) = (
        connect(&server.url(), TTL).unwrap(),
        connect(&server.url(), TTL).unwrap(),
        connect(&server.url(), TTL).unwrap(),
    );
    let _a = a.group(&n).unwrap().join("a", b"1").unwrap();
    let held_b = b.group(&n).unwrap().join("b", b"2").unwrap();
    let group = reader.group(&n).unwrap();
    let both = group.members().unwrap();
    assert_eq!(both.ids(), ["a", "b"]);
    assert!(
        names_row(server, &n).ends_with(" 2"),
        "{}",
        names_row(server, &n)
    );
    a.close().unwrap();
    let one = group.members().unwrap();
    assert_eq!(one.ids(), ["b"]);
    assert!(one.version > both.version, "{one:?} after {both:?}");
    assert_eq!(group.members().unwrap(), one, "read again: no change");
    held_b.release().unwrap();
    let none = group.members().unwrap();
    assert!(none.members.is_empty());
    assert!(none.version > one.version, "{none:?} after {one:?}");
    assert_eq!(names_row(server, &n), "", "the last leave deleted the row");
    assert!(PgFacts::new(server.addr()).entries_under(&n).is_empty());
}

/// A member whose session expired (its client stopped renewing) is still
/// a row until a read or a join purges it: the next join of its id takes
/// the row over, with a higher version, and the old member is lost.
#[test]
fn an_expired_members_id_is_taken_over_by_the_next_join() {
    let server = PgServer::shared();
    let n = name("group-expired");
    let (a, b) = (
        connect(&server.url(), TTL).unwrap(),
        connect(&server.url(), TTL).unwrap(),
    );
    let old = a.group(&n).unwrap().join("x", b"old").unwrap();
    let before = b.group(&n).unwrap().members().unwrap();
    let session = a.session_id().expect("a's session");
    server.sql(&format!(
        "UPDATE recipes.sessions SET expires_at = clock_timestamp() - interval '1 second' \
         WHERE id = {session}"
    ));
    let new = b.group(&n).unwrap().join("x", b"new").unwrap();
    let after = b.group(&n).unwrap().members().unwrap();
    assert_eq!(after.ids(), ["x"]);
    assert_eq!(after.members[0].data, b"new");
    assert!(after.version > before.version, "{after:?} after {before:?}");
    integration::wait_until("the old member is told it is lost", scale(TTL * 2), || {
        old.is_lost()
    });
    // Its guard's removal is of its own row only: the new member stays.
    drop(old);
    assert_eq!(b.group(&n).unwrap().members().unwrap(), after);
    new.release().unwrap();
    assert_eq!(names_row(server, &n), "", "nothing left");
}

/// A lock on a group's name is refused naming what the name holds;
/// nothing is written.
#[test]
fn a_lock_on_a_groups_name_is_refused_naming_the_group() {
    let server = PgServer::shared();
    let n = name("group-kind");
    let c = connect(&server.url(), TTL).unwrap();
    let member = c.group(&n).unwrap().join("m", b"").unwrap();
    match c.mutex(&n).and_then(|m| m.try_lock()) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("a group"), "{why}"),
        other => panic!("a lock on a group's name: {other:?}"),
    }
    assert_eq!(PgFacts::new(server.addr()).entries_under(&n).len(), 1);
    member.release().unwrap();
    assert_eq!(names_row(server, &n), "");
}
