//! The read-write lock on PostgreSQL in both modes: lease mode (queue rows
//! with a role) and session mode (an advisory key, shared or exclusive).
//! Each property runs once per mode on the shared server; `fault` tests run
//! one at a time, those that crash or cut off a holder on their own server.

mod pg_common;
mod pg_rw_support;

use std::time::Duration;

use integration::{scale, wait_until, PgServer};
use pg_common::*;
use pg_rw_support::*;
use recipes_core::store::engine::Role;
use recipes_core::{BootInstant, Client, Error, FencingToken};
use recipes_pg::PgClient;

macro_rules! both_modes {
    ($($test:ident),* $(,)?) => {
        mod lease {
            $(#[test] fn $test() { super::$test(super::Mode::Lease) })*
        }
        mod session {
            $(#[test] fn $test() { super::$test(super::Mode::Session) })*
        }
    };
}

/// Tests that run one function with the given arguments each.
macro_rules! cases {
    ($f:ident: $($test:ident($($arg:expr),*),)*) => {
        $(#[test] fn $test() { $f($($arg),*) })*
    };
}

both_modes!(
    readers_share_and_a_writer_is_alone,
    a_reader_waits_behind_a_queued_writer,
    downgrade_lets_readers_in_and_keeps_writers_out,
    after_a_downgrade_readers_stay_behind_a_writer_queued_before_them,
    fault_a_lost_writer_cannot_write_or_downgrade_and_holds_nothing,
    upgrade_is_refused_at_once,
    fences_order_writers_after_readers,
    timeouts_leave_nothing_behind,
    contenders_show_roles_in_queue_order,
    other_recipes_are_refused_both_ways,
);

fn readers_share_and_a_writer_is_alone(mode: Mode) {
    let rig = Rig::on(PgServer::shared(), mode);
    let n = name("rw-share");
    let (a, b) = (rig.client(), rig.client());
    let ra = a.rw_lock(&n).unwrap().read().unwrap();
    let rb = b
        .rw_lock(&n)
        .unwrap()
        .try_read()
        .unwrap()
        .expect("readers share");
    assert!(b.rw_lock(&n).unwrap().try_write().unwrap().is_none());
    ra.release().unwrap();
    rb.release().unwrap();
    let w = a.rw_lock(&n).unwrap().write().unwrap();
    assert!(b.rw_lock(&n).unwrap().try_write().unwrap().is_none());
    assert!(b.rw_lock(&n).unwrap().try_read().unwrap().is_none());
    w.release().unwrap();
    let again = b.rw_lock(&n).unwrap().try_write().unwrap().expect("free");
    again.release().unwrap();
    assert_eq!(rig.left(&n), Vec::<String>::new());
}

/// Fair: with a reader holding and a writer queued, a new reader waits
/// behind the writer (its try fails; its blocking read does not pass the
/// writer, for several of session mode's wait slices); the writer gets in
/// when the first reader releases, and the reader after it.
fn a_reader_waits_behind_a_queued_writer(mode: Mode) {
    let rig = Rig::on(PgServer::shared(), mode);
    let n = name("rw-fair");
    let (a, b, c) = (rig.client(), rig.client(), rig.client());
    let first = a.rw_lock(&n).unwrap().read().unwrap();
    let writer = take(b.rw_lock(&n).unwrap(), true);
    rig.wait_for_waiters(&n, 1, 1);
    assert!(c.rw_lock(&n).unwrap().try_read().unwrap().is_none());
    let reader = take(c.rw_lock(&n).unwrap(), false);
    rig.wait_for_waiters(&n, 1, 2);
    let queued = rig.left(&n);
    // Past the TTL: session mode's waits stay in the server's queue (their
    // heartbeats go over the statement connection meanwhile).
    reader.does_not_hold_for(TTL + TTL / 2);
    assert_eq!(rig.left(&n), queued, "the same holder and waiters");
    let first_token = first.token();
    first.release().unwrap();
    let w = writer.holds(Duration::from_secs(10));
    assert!(w > first_token);
    reader.does_not_hold_for(Duration::from_millis(200));
    writer.release();
    let r = reader.holds(Duration::from_secs(10));
    assert!(r > w, "{r} after the writer's {w}");
    reader.release();
}

/// A downgraded guard keeps the write token and lets the reader queued
/// behind it in; a writer stays out until it is released.
fn downgrade_lets_readers_in_and_keeps_writers_out(mode: Mode) {
    let rig = Rig::on(PgServer::shared(), mode);
    let n = name("rw-downgrade");
    let (a, b, c) = (rig.client(), rig.client(), rig.client());
    let w = a.rw_lock(&n).unwrap().write().unwrap();
    let token = w.token();
    let reader = take(b.rw_lock(&n).unwrap(), false);
    rig.wait_for_waiters(&n, 1, 1);
    let r = w.downgrade().unwrap();
    assert_eq!(r.token(), token);
    let theirs = reader.holds(Duration::from_secs(10));
    assert!(theirs > token);
    let other = c.rw_lock(&n).unwrap();
    assert!(other.try_write().unwrap().is_none());
    let timed = other.try_write_for(Duration::from_millis(300)).unwrap();
    assert!(timed.is_none(), "a writer got in past a downgraded guard");
    r.put(&format!("{n}-resource"), b"read side").unwrap();
    r.release().unwrap();
    reader.release();
    let next = other
        .try_write_for(scale(Duration::from_secs(10)))
        .unwrap()
        .expect("the writer gets in once both are released");
    assert!(next.token() > theirs);
    next.release().unwrap();
    assert_eq!(rig.left(&n), Vec::<String>::new());
}

/// The queue's order stands through a downgrade: a reader queued behind a
/// writer that waits behind the downgraded guard stays behind that writer.
fn after_a_downgrade_readers_stay_behind_a_writer_queued_before_them(mode: Mode) {
    let rig = Rig::on(PgServer::shared(), mode);
    let n = name("rw-downgrade-order");
    let (a, b, c) = (rig.client(), rig.client(), rig.client());
    let w = a.rw_lock(&n).unwrap().write().unwrap();
    let writer = take(b.rw_lock(&n).unwrap(), true);
    rig.wait_for_waiters(&n, 1, 1);
    let reader = take(c.rw_lock(&n).unwrap(), false);
    rig.wait_for_waiters(&n, 1, 2);
    let r = w.downgrade().unwrap();
    reader.does_not_hold_for(Duration::from_millis(500));
    let r_token = r.token();
    r.release().unwrap();
    let theirs = writer.holds(Duration::from_secs(10));
    assert!(theirs > r_token);
    reader.does_not_hold_for(Duration::from_millis(200));
    writer.release();
    assert!(reader.holds(Duration::from_secs(10)) > theirs);
    reader.release();
}

/// A write guard whose entry is deleted (lease mode) or whose backend is
/// terminated (session mode): its fenced put is refused, its downgrade is
/// an error, and nothing is left held.
fn fault_a_lost_writer_cannot_write_or_downgrade_and_holds_nothing(mode: Mode) {
    let rig = Rig::on(PgServer::shared(), mode);
    let n = name("rw-downgrade-gone");
    let a = rig.client();
    let w = a.rw_lock(&n).unwrap().write().unwrap();
    match mode {
        Mode::Lease => rig.facts.delete(w.holder()),
        Mode::Session => {
            // Until its backend exited it holds the key: a write then lands.
            rig.facts.terminate(w.holder());
            wait_until("the backend is gone", scale(Duration::from_secs(5)), || {
                !rig.facts.advisory_held(w.holder())
            });
        }
    }
    match w.put(&format!("{n}-resource"), b"stale") {
        Err(Error::FenceRejected { .. }) => {}
        other => panic!("a lost writer's put: {other:?}"),
    }
    assert!(rig.facts.get(&format!("{n}-resource")).is_none());
    assert!(w.downgrade().is_err(), "a downgrade of a lost write guard");
    wait_until("nothing is left", scale(Duration::from_secs(5)), || {
        rig.left(&n).is_empty()
    });
    let again = a
        .rw_lock(&n)
        .unwrap()
        .try_write_for(scale(TTL * 3))
        .unwrap();
    again.expect("the lock is free again").release().unwrap();
}

fn upgrade_is_refused_at_once(mode: Mode) {
    let rig = Rig::on(PgServer::shared(), mode);
    let n = name("rw-upgrade");
    let a = rig.client();
    let rw = a.rw_lock(&n).unwrap();
    let r = rw.read().unwrap();
    let started = std::time::Instant::now();
    assert!(matches!(r.upgrade(), Err(Error::InvalidArgument(_))));
    assert!(matches!(rw.write(), Err(Error::InvalidArgument(_))));
    assert!(started.elapsed() < scale(Duration::from_secs(1)));
    r.release().unwrap();
    rw.write().unwrap().release().unwrap();
}

/// Writers' tokens strictly increase and exceed every earlier reader's; a
/// reader's exceeds every earlier writer's; a reader's fenced write works
/// after later readers moved the name's fence.
fn fences_order_writers_after_readers(mode: Mode) {
    let rig = Rig::on(PgServer::shared(), mode);
    let n = name("rw-fences");
    let clients = [rig.client(), rig.client(), rig.client()];
    let (mut last_write, mut readers_max) = (FencingToken(0), FencingToken(0));
    for round in 0..3 {
        let w = clients[round % 3].rw_lock(&n).unwrap().write().unwrap();
        assert!(w.token() > last_write && w.token() > readers_max);
        last_write = w.token();
        w.release().unwrap();
        let r1 = clients[(round + 1) % 3]
            .rw_lock(&n)
            .unwrap()
            .read()
            .unwrap();
        let r2 = clients[(round + 2) % 3]
            .rw_lock(&n)
            .unwrap()
            .read()
            .unwrap();
        for r in [&r1, &r2] {
            assert!(r.token() > last_write);
            readers_max = readers_max.max(r.token());
        }
        r1.put(&format!("{n}-resource"), b"r1").unwrap();
        r1.release().unwrap();
        r2.release().unwrap();
    }
    assert_eq!(
        rig.facts.get(&format!("{n}-resource")).as_deref(),
        Some("r1")
    );
}

fn timeouts_leave_nothing_behind(mode: Mode) {
    let rig = Rig::on(PgServer::shared(), mode);
    let n = name("rw-timeouts");
    let (a, b) = (rig.client(), rig.client());
    let w = a.rw_lock(&n).unwrap().write().unwrap();
    let other = b.rw_lock(&n).unwrap();
    assert!(other
        .try_read_for(Duration::from_millis(300))
        .unwrap()
        .is_none());
    assert!(other
        .try_write_for(Duration::from_millis(300))
        .unwrap()
        .is_none());
    assert!(other.try_read().unwrap().is_none());
    wait_until(
        "only the writer is left",
        scale(Duration::from_secs(5)),
        || rig.left(&n) == vec![w.holder().to_owned()],
    );
    w.release().unwrap();
    let r = a.rw_lock(&n).unwrap().read().unwrap();
    assert!(other
        .try_write_for(Duration::from_millis(300))
        .unwrap()
        .is_none());
    wait_until(
        "only the reader is left",
        scale(Duration::from_secs(5)),
        || rig.left(&n) == vec![r.holder().to_owned()],
    );
    r.release().unwrap();
    assert_eq!(rig.left(&n), Vec::<String>::new());
}

fn contenders_show_roles_in_queue_order(mode: Mode) {
    let rig = Rig::on(PgServer::shared(), mode);
    let n = name("rw-contenders");
    let (a, b, c) = (rig.client(), rig.client(), rig.client());
    let r = a.rw_lock(&n).unwrap().read().unwrap();
    let writer = take(b.rw_lock(&n).unwrap(), true);
    rig.wait_for_waiters(&n, 1, 1);
    // Session mode's waits stay at the server, so its order is the
    // server's queue too.
    let reader = take(c.rw_lock(&n).unwrap(), false);
    rig.wait_for_waiters(&n, 1, 2);
    let expected = [Role::Reader, Role::Writer, Role::Reader].map(Some);
    let listed = c.contenders(&n).unwrap();
    let roles: Vec<Option<Role>> = listed.iter().map(|c| c.role).collect();
    assert_eq!(roles, expected.to_vec(), "{listed:?}");
    assert_eq!(listed[0].holder, r.holder());
    r.release().unwrap();
    writer.holds(Duration::from_secs(10));
    writer.release();
    reader.holds(Duration::from_secs(10));
    reader.release();
}

/// A mutex, a semaphore or an election on a read-write lock's name is
/// refused naming the layout, and a read-write lock on theirs; the other
/// mode's read-write lock too. Nothing is left by a refusal.
fn other_recipes_are_refused_both_ways(mode: Mode) {
    let rig = Rig::on(PgServer::shared(), mode);
    let (a, b) = (rig.client(), rig.client());
    let n = name("rw-clash");
    let w = a.rw_lock(&n).unwrap().write().unwrap();
    let said = invalid("a mutex", b.mutex(&n).and_then(|m| m.try_lock()));
    assert!(said.contains("read-write lock"), "{said}");
    let said = invalid("a semaphore", b.semaphore(&n, 2).map(drop));
    assert!(said.contains("read-write lock"), "{said}");
    let elected = b.election(&n).and_then(|e| e.try_campaign(b"x"));
    let said = invalid("an election", elected);
    assert!(said.contains("read-write lock"), "{said}");
    let other = match mode {
        Mode::Lease => Mode::Session,
        Mode::Session => Mode::Lease,
    };
    let c = client_of(&rig.server.url(), other, TTL);
    let said = invalid("the other mode", c.rw_lock(&n).and_then(|rw| rw.try_read()));
    assert!(said.contains("mode"), "{said}");
    assert_eq!(rig.left(&n), vec![w.holder().to_owned()]);
    w.release().unwrap();

    let m = name("rw-clash-mutex");
    let held = a.mutex(&m).unwrap().lock().unwrap();
    let said = invalid(
        "a read on a mutex",
        b.rw_lock(&m).and_then(|rw| rw.try_read()),
    );
    assert!(said.contains("lock"), "{said}");
    let said = invalid(
        "a write on a mutex",
        b.rw_lock(&m).and_then(|rw| rw.try_write()),
    );
    assert!(said.contains("lock"), "{said}");
    held.release().unwrap();
    let s = name("rw-clash-semaphore");
    let permit = a.semaphore(&s, 2).unwrap().acquire().unwrap();
    let said = invalid(
        "a read on a semaphore",
        b.rw_lock(&s).and_then(|rw| rw.try_read()),
    );
    assert!(said.contains("semaphore"), "{said}");
    permit.release().unwrap();
    assert_eq!(rig.left(&n), Vec::<String>::new());
}

/// A crashed holder of either side frees the lock within its TTL: the
/// waiter (the other side) holds after the holder's deadline, with a
/// higher token, and the old holder's fenced put is refused.
fn crashed_holder_frees_the_lock(mode: Mode, write: bool) {
    let server = PgServer::start();
    let rig = Rig::on(&server, mode);
    let n = name("rw-crash");
    let (a, b) = (rig.client(), rig.client());
    let held = Held::take(&a.rw_lock(&n).unwrap(), write);
    let (holder, token, lost) = held.facts();
    let waiter = take(b.rw_lock(&n).unwrap(), !write);
    rig.wait_for_waiters(&n, 1, 1);
    let crashed_at = BootInstant::now();
    crash(&rig, &a, &holder);
    let theirs = waiter.holds(TTL + Duration::from_secs(10));
    let taken_at = BootInstant::now();
    assert!(lost.is_lost(), "the old holder's loss fired first");
    let deadline = held.valid_until();
    assert!(
        deadline <= taken_at,
        "held before the crashed holder's deadline"
    );
    assert!(
        taken_at <= crashed_at + TTL + scale(Duration::from_secs(3)),
        "freed {:?} after the crash",
        taken_at - crashed_at
    );
    assert!(theirs > token);
    assert!(matches!(
        held.put(&format!("{n}-resource")),
        Err(Error::FenceRejected { .. })
    ));
    waiter.release();
}

cases!(
    crashed_holder_frees_the_lock:
    fault_lease_a_crashed_writer_frees_the_lock_within_its_ttl(Mode::Lease, true),
    fault_lease_a_crashed_reader_frees_the_lock_within_its_ttl(Mode::Lease, false),
    fault_session_a_terminated_writer_frees_the_lock_within_its_ttl(Mode::Session, true),
    fault_session_a_terminated_reader_frees_the_lock_within_its_ttl(Mode::Session, false),
);

/// A holder of either side cut off from the database past its TTL (its
/// connections black-holed, as a paused process's would be): its loss
/// fires by its deadline, the waiter on the other side holds after that
/// deadline with a higher token, and once the holder is reachable again
/// its fenced put is refused.
fn cut_off_holder_loses_and_the_next_gets_in(mode: Mode, write: bool) {
    let server = PgServer::start();
    let rig = Rig::on(&server, mode);
    let proxy = integration::Proxy::start(server.addr());
    let via = format!("postgresql://postgres@{}/recipes", proxy.addr());
    let a = client_of(&via, mode, TTL);
    let b = rig.client();
    let n = name("rw-cut-off");
    let held = Held::take(&a.rw_lock(&n).unwrap(), write);
    let (_, token, lost) = held.facts();
    let waiter = take(b.rw_lock(&n).unwrap(), !write);
    rig.wait_for_waiters(&n, 1, 1);
    proxy.blackhole();
    let theirs = waiter.holds(TTL * 2 + Duration::from_secs(10));
    let taken_at = BootInstant::now();
    assert!(lost.is_lost(), "the cut-off holder's loss fired first");
    assert!(held.valid_until() <= taken_at, "held before its deadline");
    assert!(theirs > token);
    proxy.restore();
    assert!(matches!(
        held.put(&format!("{n}-resource")),
        Err(Error::FenceRejected { .. })
    ));
    waiter.release();
}

cases!(
    cut_off_holder_loses_and_the_next_gets_in:
    fault_lease_a_cut_off_writer_loses_and_a_reader_gets_in(Mode::Lease, true),
    fault_lease_a_cut_off_reader_loses_and_a_writer_gets_in(Mode::Lease, false),
    fault_session_a_cut_off_writer_loses_and_a_reader_gets_in(Mode::Session, true),
    fault_session_a_cut_off_reader_loses_and_a_writer_gets_in(Mode::Session, false),
);

/// Behind pgbouncer in transaction mode (each statement on any backend,
/// `LISTEN` to the server directly) lease mode's read-write lock works
/// whole — readers share, a writer waits for them and downgrades — and
/// session mode is refused at connect, as for every recipe.
#[test]
fn through_a_transaction_pooler_lease_mode_works_and_session_mode_is_refused() {
    use integration::{PgBouncer, PoolMode};
    let server = PgServer::shared();
    let rig = Rig::on(server, Mode::Lease);
    let pooled = PgBouncer::start(server, PoolMode::Transaction);
    let pooled_client = || {
        PgClient::builder(pooled.url())
            .ttl(TTL)
            .listen_url(server.url())
            .connect()
            .expect("lease mode through the pooler")
    };
    let (a, b) = (pooled_client(), pooled_client());
    let n = name("rw-pooled");
    let r = a.rw_lock(&n).unwrap().read().unwrap();
    let r2 = b
        .rw_lock(&n)
        .unwrap()
        .try_read()
        .unwrap()
        .expect("readers share");
    let writer = take(b.rw_lock(&n).unwrap(), true);
    rig.wait_for_waiters(&n, 2, 1);
    r.release().unwrap();
    r2.release().unwrap();
    writer.holds(Duration::from_secs(10));
    writer.release();
    let w = a.rw_lock(&n).unwrap().write().unwrap();
    let token = w.token();
    let read = w.downgrade().unwrap();
    assert_eq!(read.token(), token);
    let shared = b
        .rw_lock(&n)
        .unwrap()
        .try_read()
        .unwrap()
        .expect("after a downgrade");
    read.release().unwrap();
    shared.release().unwrap();
    assert_eq!(rig.left(&n), Vec::<String>::new());
    let refused = PgClient::builder(pooled.url())
        .ttl(TTL)
        .session_mode()
        .connect();
    let said = invalid("session mode through the pooler", refused);
    assert!(said.contains("lease mode"), "{said}");
}

/// A name PostgreSQL cannot hold or index is refused before anything is
/// sent, in either mode, and nothing is written.
#[test]
fn bad_names_are_refused_and_leave_nothing() {
    let rig = Rig::on(PgServer::shared(), Mode::Lease);
    let long = format!("/{}", "x".repeat(recipes_core::MAX_NAME_BYTES));
    for mode in [Mode::Lease, Mode::Session] {
        let c = client_of(&rig.server.url(), mode, TTL);
        for bad in ["", "/a\u{0}b", long.as_str()] {
            invalid("a bad name", c.rw_lock(bad).map(drop));
        }
    }
    let rows = rig
        .facts
        .sql("SELECT count(*) FROM recipes.names WHERE name LIKE '/a%b'");
    assert_eq!(rows.trim(), "0");
}
