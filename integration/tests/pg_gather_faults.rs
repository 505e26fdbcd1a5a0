//! The coordination recipes' writing statements (barrier, double barrier,
//! group, counter) when they wait at the server for a row lock, as a
//! queue's enter does in `pg_renewals`: one given up by the client never
//! commits later, under the client's live session, where no call of ours
//! owns what it wrote; a barrier's removal that waited for a set's row
//! lock still removes what that set wrote. Each test has its own server
//! and runs one at a time (`fault` in the name).

mod pg_common;

use std::time::Duration;

use integration::{scale, wait_until, PgFacts, PgServer};
use pg_common::*;
use recipes_core::Client;
use recipes_pg::PgClient;

/// The RPC timeout of the client whose call is given up.
const IMPATIENT: Duration = Duration::from_secs(1);

/// The RPC timeout of the clients whose calls wait for the blocker.
const PATIENT: Duration = Duration::from_secs(10);

/// Wait until no statement of ours waits for a lock at the server: a
/// statement that went on waiting after its call gave up has ended (it
/// committed once the blocker did, or the server ended its wait).
fn no_statement_waits(facts: &PgFacts) {
    wait_until(
        "no statement of ours waits for a lock",
        scale(Duration::from_secs(10)),
        || !waits_for_a_lock(facts),
    );
}

/// A test's own server, a fresh name, the client `q` whose call gives up
/// while it waits and the client `r` that looks after.
struct GivenUp {
    server: PgServer,
    facts: PgFacts,
    n: String,
    q: PgClient,
    r: PgClient,
}

impl GivenUp {
    fn new(test: &str) -> GivenUp {
        let server = PgServer::start();
        let (q, r) = (
            with_rpc(&server.url(), IMPATIENT),
            with_rpc(&server.url(), PATIENT),
        );
        GivenUp {
            facts: PgFacts::new(server.addr()),
            n: name(test),
            server,
            q,
            r,
        }
    }

    /// `call` of `q` fails while an open transaction holds the name's row
    /// (which exists) in share mode, and no statement of it waits at the
    /// server any more (`settle`: once the server ended them, for a call
    /// core's `once` retries, whose last try may be cut off by the call's
    /// deadline). The transaction then commits.
    fn call<T: std::fmt::Debug>(
        &self,
        settle: bool,
        call: impl FnOnce(&PgClient, &str) -> recipes_core::Result<T>,
    ) {
        let blocker = share_lock(&self.server, &self.n);
        let done = call(&self.q, &self.n);
        assert!(done.is_err(), "the call went through the lock: {done:?}");
        if settle {
            no_statement_waits(&self.facts);
        }
        assert!(
            !waits_for_a_lock(&self.facts),
            "a statement of the given-up call still waits at the server"
        );
        commit(&blocker);
        no_statement_waits(&self.facts);
    }

    fn close(self) {
        self.q.close().unwrap();
        self.r.close().unwrap();
    }
}

/// A join that waited at the server for the group's row (held in share
/// mode) past its call's timeout leaves no member behind once the row is
/// free: the member is not listed, and its id is free for the next join.
/// (Before, the join committed once the blocker did, under the client's
/// live session: a member no membership owned, listed until the client
/// closed, and the id refused to that very client.)
#[test]
fn fault_a_group_join_given_up_while_it_waits_leaves_no_member_behind() {
    let t = GivenUp::new("group-given-up");
    let (n, r) = (&t.n, &t.r);
    let keeper = r.group(n).unwrap().join("keeper", b"").unwrap();
    t.call(false, |q, n| q.group(n)?.join("x", b""));
    assert_eq!(r.group(n).unwrap().members().unwrap().ids(), ["keeper"]);
    assert_eq!(t.facts.entries_under(n).len(), 1, "the keeper's row only");
    let x = t.q.group(n).unwrap().join("x", b"").expect("x is free");
    x.release().unwrap();
    keeper.release().unwrap();
    assert!(t.facts.entries_under(n).is_empty());
    t.close();
}

/// The same for a double barrier's enter: a member given up never lands
/// later, where it would count toward every other member's gathering.
#[test]
fn fault_a_double_barrier_enter_given_up_while_it_waits_leaves_no_member_behind() {
    let t = GivenUp::new("double-barrier-given-up");
    let n = &t.n;
    t.server.sql(&format!(
        "INSERT INTO recipes.names (name, kind, next_seq) VALUES ('{n}', 'double-barrier', 0)"
    ));
    t.call(false, |q, n| {
        let entered = q.double_barrier(n, 2)?.enter_timeout(IMPATIENT)?;
        entered.map(drop).ok_or(recipes_core::Error::Closed)
    });
    let left = t.facts.entries_under(n);
    assert!(left.is_empty(), "a member of the given-up enter: {left:?}");
    let alone = t.r.double_barrier(n, 2).unwrap();
    let alone = alone.enter_timeout(Duration::ZERO).unwrap();
    assert!(alone.is_none(), "one member passed a barrier of two");
    t.close();
}

/// A tied set of a barrier that waited at the server for the barrier's
/// row past its call's timeout ends there within the call's timeout, and
/// leaves no row of its session behind once the row is free. (Before, it
/// went on waiting, and committed once the blocker did: the barrier up
/// under a set that had reported its failure, after any call made since.)
/// A set's retry started just before its call's deadline may outlive the
/// call by up to the server's bound: the blocker commits once the server
/// has ended every wait.
#[test]
fn fault_a_tied_barrier_set_given_up_while_it_waits_leaves_no_row_behind() {
    let t = GivenUp::new("barrier-given-up");
    let (n, r) = (&t.n, &t.r);
    r.barrier(n).unwrap().tied_to_session().set().unwrap();
    t.call(true, |q, n| q.barrier(n)?.tied_to_session().set());
    assert_eq!(t.facts.entries_under(n).len(), 1, "r's row only");
    r.barrier(n).unwrap().remove().unwrap();
    assert!(t
        .q
        .barrier(n)
        .unwrap()
        .wait_timeout(Duration::ZERO)
        .unwrap());
    t.close();
}

/// A compare-and-set of a counter that waited at the server for the
/// counter's row past its call's timeout never lands later. (Before, it
/// committed once the blocker did: a write whose call had failed with a
/// retryable timeout, so an `add` retried by its caller added twice.)
#[test]
fn fault_a_counter_write_given_up_while_it_waits_never_lands_later() {
    let t = GivenUp::new("counter-given-up");
    let (n, r) = (&t.n, &t.r);
    assert!(r.counter(n).unwrap().set_if(0, 1).unwrap());
    t.call(false, |q, n| q.counter(n)?.set_if(1, 2));
    let now = r.counter(n).unwrap().get().unwrap();
    assert_eq!(
        (now.value, now.version),
        (1, 1),
        "the given-up write landed"
    );
    t.close();
}

/// A barrier's removal that waited for its row while a tied set held it
/// removes that set's row too, and the reverse order leaves the barrier
/// up under the set's session: each call's outcome is typed, nothing is
/// left behind. (Before, a removal that took the row after the set
/// committed missed the set's row, whose insert it had not seen, and
/// failed with PostgreSQL's raw foreign key violation, 23503.)
#[test]
fn fault_a_barrier_removal_racing_a_tied_set_removes_it_or_leaves_it_up() {
    let server = PgServer::start();
    let facts = PgFacts::new(server.addr());
    let n = name("barrier-race");
    let (r, s) = (
        with_rpc(&server.url(), PATIENT),
        with_rpc(&server.url(), PATIENT),
    );
    let limit = scale(Duration::from_secs(5));
    for set_first in [true, false] {
        // Up under r: the name's row exists.
        r.barrier(&n).unwrap().tied_to_session().set().unwrap();
        let blocker = share_lock(&server, &n);
        let mut calls = Vec::new();
        for set_now in [set_first, !set_first] {
            let (set, remove) = (
                s.barrier(&n).unwrap().tied_to_session(),
                r.barrier(&n).unwrap(),
            );
            calls.push(std::thread::spawn(move || match set_now {
                true => set.set(),
                false => remove.remove(),
            }));
            let queued = calls.len();
            wait_until("the call waits behind the blocker", limit, || {
                lock_waits(&facts) == queued
            });
        }
        commit(&blocker);
        for call in calls {
            call.join().unwrap().expect("the set and the removal");
        }
        // Taken down last, or set last (under s).
        let rows = usize::from(!set_first);
        assert_eq!(
            facts.entries_under(&n).len(),
            rows,
            "set first: {set_first}"
        );
        let down = r.barrier(&n).unwrap().wait_timeout(Duration::ZERO).unwrap();
        assert_eq!(down, set_first);
    }
    s.close().unwrap();
    assert!(r.barrier(&n).unwrap().wait_timeout(limit).unwrap());
    r.close().unwrap();
}

/// A tied set after the client's session row went (truncated behind its
/// back) puts the barrier up under a new session, as a double barrier's
/// or a group's join does. (Before, it failed with PostgreSQL's raw
/// foreign key violation, 23503, until the next renewal saw the row gone.)
#[test]
fn fault_a_tied_barrier_set_after_the_sessions_row_went_sets_it_under_a_new_session() {
    let t = GivenUp::new("barrier-session-gone");
    let (n, c) = (&t.n, &t.r);
    let before = c.session_id().expect("c's session");
    t.server.sql("TRUNCATE recipes.sessions CASCADE");
    c.barrier(n).unwrap().tied_to_session().set().expect("set");
    assert_ne!(c.session_id(), Some(before), "a new session");
    assert_eq!(t.facts.entries_under(n).len(), 1, "up under a live session");
    c.barrier(n).unwrap().remove().unwrap();
    t.close();
}
