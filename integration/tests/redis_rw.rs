//! The Redis read-write lock against a real `redis-server`: readers
//! share, writers exclude, fair (a reader waits behind a queued writer),
//! downgrade in place, no upgrade, one increasing fence for both sides,
//! fenced writes refused once the entry is gone, timeouts and refusals
//! leave nothing, a name is one recipe's either way round; and, each on
//! its own server, a crashed or black-holed holder of either side and a
//! `FLUSHALL`. Tests whose names contain `fault` run one at a time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use integration::{scale, wait_until, Proxy, RedisServer};
use recipes_core::store::engine::Role;
use recipes_core::{BootInstant, Client, Error, FenceGate, LossReason};
use recipes_redis::{RedisClient, RwLock};

const NS: &str = "{recipes}:";

fn name(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("/rw/{test}-{}-{n}", std::process::id())
}

fn connect(server: &RedisServer, ttl: Duration) -> RedisClient {
    RedisClient::builder(server.url())
        .ttl(ttl)
        .connect()
        .expect("connect")
}

/// Three clients of `server`, each with its own session.
fn three(server: &RedisServer) -> [RedisClient; 3] {
    [0, 1, 2].map(|_| connect(server, Duration::from_secs(5)))
}

fn rw(client: &RedisClient, name: &str) -> RwLock {
    client.rw_lock(name).expect("a read-write lock")
}

/// The keys of `name` on `server` (its fence counter aside: kept for
/// ever, so that fences never repeat).
fn keys_of(server: &RedisServer, name: &str) -> Vec<String> {
    let mut keys = server.keys(&format!("{NS}*{name}*"));
    keys.retain(|k| !k.starts_with(&format!("{NS}fence:")));
    keys.sort();
    keys
}

/// The roles of `name`'s live members, in queue order.
fn roles(client: &RedisClient, name: &str) -> Vec<Option<Role>> {
    let listed = client.contenders(name).expect("contenders");
    listed.into_iter().map(|c| c.role).collect()
}

fn queued(client: &RedisClient, name: &str, n: usize) {
    wait_until(
        &format!("{n} members queued on {name}"),
        scale(Duration::from_secs(10)),
        || roles(client, name).len() == n,
    );
}

/// A held side of `lock`, either one.
type Held = Box<dyn std::any::Any + Send>;

fn take(lock: &RwLock, write: bool) -> recipes_core::Result<Held> {
    match write {
        true => lock.write().map(|g| Box::new(g) as Held),
        false => lock.read().map(|g| Box::new(g) as Held),
    }
}

/// Wait until nothing of `name` is left (a release in the background,
/// a stale entry's removal).
fn nothing_left(server: &RedisServer, name: &str) {
    let what = format!("nothing of {name} left");
    wait_until(&what, scale(Duration::from_secs(10)), || {
        keys_of(server, name).is_empty()
    });
}

/// An acquisition that must come back empty-handed.
fn none<G>(r: recipes_core::Result<Option<G>>) {
    assert!(matches!(r, Ok(None)), "the other side holds");
}

fn invalid<T>(r: recipes_core::Result<T>, says: &str) {
    match r {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains(says), "{msg}"),
        Err(e) => panic!("expected InvalidArgument saying {says:?}: {e:?}"),
        Ok(_) => panic!("expected InvalidArgument saying {says:?}: it went through"),
    }
}

/// A fenced write refused: the entry it was fenced by is gone.
fn fenced_out(r: recipes_core::Result<()>) {
    assert!(matches!(r, Err(Error::FenceRejected { .. })), "{r:?}");
}

#[test]
fn readers_share_and_a_writer_excludes_both_sides() {
    let server = RedisServer::shared();
    let [a, b, _] = three(server);
    let n = name("share");
    let (ra, rb) = (rw(&a, &n), rw(&b, &n));
    let r1 = ra.read().unwrap();
    let r2 = rb.try_read().unwrap().expect("a second reader shares");
    // Another handle: through `rb` this thread holds a read (no upgrade).
    none(rw(&b, &n).try_write());
    assert_eq!(roles(&a, &n), [Some(Role::Reader), Some(Role::Reader)]);
    r1.release().unwrap();
    r2.release().unwrap();
    let w = ra.try_write().unwrap().expect("free again");
    none(rb.try_write());
    none(rb.try_read());
    assert_eq!(roles(&a, &n), [Some(Role::Writer)]);
    w.release().unwrap();
    nothing_left(server, &n);
}

#[test]
fn a_reader_waits_behind_a_queued_writer_who_gets_in_when_the_readers_go() {
    let server = RedisServer::shared();
    let [a, b, c] = three(server);
    let n = name("fair");
    let first = rw(&a, &n).read().unwrap();
    let writer = rw(&b, &n);
    let queued_writer = thread::spawn(move || writer.write().map(|g| (g.token(), g)));
    queued(&c, &n, 2);
    assert_eq!(roles(&c, &n), [Some(Role::Reader), Some(Role::Writer)]);
    let late = rw(&c, &n);
    none(late.try_read());
    none(late.try_read_for(Duration::from_millis(300)));
    let read_token = first.token();
    first.release().unwrap();
    let (token, w) = queued_writer.join().unwrap().expect("the writer gets in");
    assert!(token > read_token, "{token} after {read_token}");
    none(late.try_read());
    w.release().unwrap();
    let r = late.try_read().unwrap().expect("free after the writer");
    assert!(r.token() > token);
    r.release().unwrap();
    nothing_left(server, &n);
}

#[test]
fn a_downgrade_lets_the_readers_behind_in_and_keeps_the_writers_out() {
    let server = RedisServer::shared();
    let [a, b, c] = three(server);
    let n = name("downgrade");
    let w = rw(&a, &n).write().unwrap();
    let write_token = w.token();
    let place = a.contenders(&n).unwrap()[0].created;
    let reader = rw(&b, &n);
    let queued_reader = thread::spawn(move || reader.read().map(|g| (g.token(), g)));
    queued(&a, &n, 2);
    let writer = rw(&c, &n);
    let queued_writer = thread::spawn(move || writer.write().map(|g| (g.token(), g)));
    queued(&a, &n, 3);
    let r = w.downgrade().expect("downgraded");
    assert_eq!(r.token(), write_token, "keeps the write token");
    let listed = a.contenders(&n).unwrap();
    assert_eq!(listed[0].created, place, "the same place in the queue");
    assert_eq!(
        listed.iter().map(|c| c.role).collect::<Vec<_>>(),
        [Some(Role::Reader), Some(Role::Reader), Some(Role::Writer)]
    );
    let (reader_token, behind) = queued_reader.join().unwrap().expect("the reader enters");
    assert!(reader_token > write_token);
    let other = connect(server, Duration::from_secs(5));
    let probe = rw(&other, &n);
    none(probe.try_write());
    none(probe.try_write_for(Duration::from_millis(300)));
    assert!(!queued_writer.is_finished(), "the writer behind stays out");
    r.put(&format!("{n}-data"), b"read side").unwrap();
    r.release().unwrap();
    behind.release().unwrap();
    let (token, w2) = queued_writer.join().unwrap().expect("the writer gets in");
    assert!(token > reader_token);
    w2.release().unwrap();
    nothing_left(server, &n);
}

#[test]
fn a_downgrade_of_a_lost_write_lease_fails_and_leaves_nothing() {
    let server = RedisServer::shared();
    let [a, _, _] = three(server);
    let n = name("lost-downgrade");
    let w = rw(&a, &n).write().unwrap();
    let _: i64 = server.cmd(&["DEL", w.lease().hold_key()]);
    let r = w.downgrade();
    assert!(matches!(r, Err(Error::LeaseLost { .. })), "{r:?}");
    nothing_left(server, &n);
}

#[test]
fn an_upgrade_is_refused_at_once() {
    let server = RedisServer::shared();
    let a = connect(server, Duration::from_secs(5));
    let n = name("upgrade");
    let lock = rw(&a, &n);
    let r = lock.read().unwrap();
    let started = std::time::Instant::now();
    invalid(r.upgrade(), "read lock");
    invalid(lock.write(), "read lock");
    invalid(lock.try_write_for(Duration::from_secs(30)), "read lock");
    assert!(started.elapsed() < scale(Duration::from_secs(1)));
    r.release().unwrap();
    lock.try_write().unwrap().expect("free").release().unwrap();
    nothing_left(server, &n);
}

#[test]
fn writers_fences_rise_above_every_earlier_reader_and_readers_above_earlier_writers() {
    let server = RedisServer::shared();
    let clients = three(server);
    let n = name("fences");
    let gate = FenceGate::new();
    let (mut last_write, mut highest_read) = (0, 0);
    for round in 0..4 {
        let readers: Vec<_> = clients
            .iter()
            .map(|c| rw(c, &n).try_read().unwrap().expect("readers share"))
            .collect();
        for r in &readers {
            assert!(
                r.token().0 > last_write,
                "round {round}: a read after a write"
            );
            highest_read = highest_read.max(r.token().0);
        }
        drop(readers);
        let w = rw(&clients[round % 3], &n)
            .try_write_for(scale(Duration::from_secs(10)))
            .unwrap()
            .expect("the readers went");
        assert!(w.token().0 > highest_read && w.token().0 > last_write);
        gate.admit(w.token())
            .expect("a later writer passes the gate");
        last_write = w.token().0;
        w.release().unwrap();
    }
    // A stale guard: its entry deleted behind its back.
    let r = rw(&clients[0], &n).try_read().unwrap().expect("free");
    let hold = r.lease().hold_key().to_owned();
    assert!(hold.starts_with(&format!("{NS}rw:{n}:")), "{hold}");
    let _: i64 = server.cmd(&["DEL", &hold]);
    fenced_out(r.put(&format!("{n}-data"), b"late"));
    let noticed = r.lost().wait_timeout(scale(Duration::from_secs(3)));
    assert!(noticed.is_some(), "its poll found the key gone");
    drop(r);
    nothing_left(server, &n);
}

#[test]
fn timed_out_reads_and_writes_leave_nothing_behind() {
    let server = RedisServer::shared();
    let [a, b, _] = three(server);
    let n = name("timeout");
    let w = rw(&a, &n).write().unwrap();
    let held = keys_of(server, &n);
    let lock = rw(&b, &n);
    none(lock.try_read_for(Duration::from_millis(200)));
    none(lock.try_write_for(Duration::from_millis(200)));
    none(lock.try_read());
    assert_eq!(keys_of(server, &n), held, "only the holder's keys");
    assert_eq!(roles(&a, &n), [Some(Role::Writer)]);
    w.release().unwrap();
    nothing_left(server, &n);
    invalid(b.rw_lock(""), "name");
    invalid(b.rw_lock("no-slash\u{7}"), "name");
}

#[test]
fn a_name_is_one_recipes_either_way_round_and_a_refusal_leaves_nothing() {
    let server = RedisServer::shared();
    let [a, b, _] = three(server);
    let n = name("clash");
    let r = rw(&a, &n).read().unwrap();
    let before = keys_of(server, &n);
    let says = "a read-write lock";
    invalid(b.mutex(&n).unwrap().try_lock(), says);
    invalid(b.election(&n).unwrap().try_campaign(b"x"), says);
    invalid(b.semaphore(&n, 2), says);
    assert_eq!(keys_of(server, &n), before);
    r.release().unwrap();
    let g = b.mutex(&n).unwrap().lock().unwrap();
    let before = keys_of(server, &n);
    let says = "a lock or election";
    invalid(rw(&a, &n).try_read(), says);
    invalid(rw(&a, &n).try_write_for(Duration::from_secs(5)), says);
    assert_eq!(keys_of(server, &n), before);
    g.release().unwrap();
    let sem = name("clash-sem");
    let permit = b.semaphore(&sem, 1).unwrap().acquire().unwrap();
    invalid(rw(&a, &sem).try_read(), "a semaphore");
    let inside = format!("{sem}/leases");
    invalid(rw(&a, &inside).try_write(), "part of the semaphore");
    permit.release().unwrap();
    nothing_left(server, &n);
}

/// Subscribers of the channel where `holder`'s member's going is told.
fn listening_on(server: &RedisServer, holder: &str) -> i64 {
    let member = holder.rsplit_once('/').expect("<name>/<member>").1;
    let reply: (String, i64) = server.cmd(&["PUBSUB", "NUMSUB", &format!("{NS}gone:{member}")]);
    reply.1
}

/// Readers wait on the nearest writer ahead, a writer on the member just
/// ahead: with W holding and R1 R2 W2 R3 queued, W's going is listened to
/// by R1 and R2 only, R2's by W2, W2's by R3; W's release lets R1 and R2
/// in and wakes no one else.
#[test]
fn readers_wait_on_the_nearest_writer_and_a_writer_on_the_member_ahead() {
    let server = RedisServer::shared();
    let [a, b, _] = three(server);
    let n = name("herd");
    let w = rw(&a, &n).write().unwrap();
    let mut waiters = Vec::new();
    for (i, write) in [false, false, true, false].into_iter().enumerate() {
        let lock = rw(&b, &n);
        waiters.push(thread::spawn(move || take(&lock, write)));
        queued(&a, &n, i + 2);
    }
    let queue = a.contenders(&n).unwrap();
    let expect = |listening: [i64; 5]| {
        let says = "the waiters listen where the rule says";
        wait_until(says, scale(Duration::from_secs(10)), || {
            let now = queue.iter().map(|c| listening_on(server, &c.holder));
            now.eq(listening)
        });
    };
    expect([2, 0, 1, 1, 0]);
    w.release().unwrap();
    let mut waiters = waiters.into_iter();
    let (r1, r2) = (waiters.next().unwrap(), waiters.next().unwrap());
    let (r1, r2) = (r1.join().unwrap().unwrap(), r2.join().unwrap().unwrap());
    expect([0, 0, 1, 1, 0]);
    let finished = waiters.as_slice().iter().any(|t| t.is_finished());
    assert!(!finished, "W2 and R3 still wait");
    drop((r1, r2));
    for t in waiters {
        drop(t.join().unwrap().unwrap());
    }
    nothing_left(server, &n);
}

/// A holder of `access` whose client stops renewing, as a crashed
/// process's would: the other side gets in once its TTL ran out after its
/// last acknowledged renewal (never before), within the TTL and a margin.
fn a_crashed_holder_frees_the_lock_within_its_ttl(read_first: bool) {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(2);
    let n = name("crash");
    let crashed = connect(&server, ttl);
    let held = take(&rw(&crashed, &n), !read_first).unwrap();
    // Held past its TTL: the session's renewals extend its hold key too.
    let since = BootInstant::now();
    wait_until("renewed past a TTL", scale(3 * ttl), || {
        crashed.last_acknowledged().is_some_and(|t| t > since + ttl)
    });
    let hold_keys = server.keys(&format!("{NS}rw:{n}:*"));
    assert_eq!(hold_keys.len(), 1, "its hold key lives on");
    let other = connect(&server, Duration::from_secs(10));
    let lock = rw(&other, &n);
    let last_ack = crashed.last_acknowledged().expect("acknowledged");
    crashed.orphan();
    let bound = scale(ttl + Duration::from_secs(5));
    let got = match read_first {
        true => lock.try_write_for(bound).unwrap().map(|g| g.token()),
        false => lock.try_read_for(bound).unwrap().map(|g| g.token()),
    };
    let at = BootInstant::now();
    assert!(at >= last_ack + ttl, "{:?} after it", at - last_ack);
    assert!(got.is_some(), "the crashed holder's lease expired");
    drop(held);
    nothing_left(&server, &n);
}

#[test]
fn fault_a_crashed_reader_frees_the_lock_within_its_ttl() {
    a_crashed_holder_frees_the_lock_within_its_ttl(true);
}

#[test]
fn fault_a_crashed_writer_frees_the_lock_within_its_ttl() {
    a_crashed_holder_frees_the_lock_within_its_ttl(false);
}

/// A reader cut off from the server (a black-holed connection: to the
/// server, a paused process) past its TTL: its loss signal fires at its
/// local deadline, before a writer gets in; the writer's fence is above
/// its own, and once the connection is back its fenced write is refused.
#[test]
fn fault_a_reader_cut_off_past_its_ttl_loses_before_a_writer_gets_in() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(2);
    let n = name("paused");
    let proxy = Proxy::start(server.addr());
    let cut = RedisClient::builder(format!("redis://{}", proxy.addr()))
        .ttl(ttl)
        .connect()
        .expect("connect through the proxy");
    let held = rw(&cut, &n).read().unwrap();
    let other = connect(&server, Duration::from_secs(10));
    let writer = rw(&other, &n);
    let (tx, rx) = crossbeam_channel::bounded(1);
    let taker = thread::spawn(move || {
        let g = writer.write().expect("the writer gets in");
        tx.send(BootInstant::now()).unwrap();
        g
    });
    proxy.blackhole();
    held.lost()
        .wait_timeout(scale(ttl + Duration::from_secs(5)))
        .expect("the cut-off reader's signal fires");
    let valid_until = held.valid_until().expect("a deadline");
    let taken_at = rx
        .recv_timeout(scale(ttl + Duration::from_secs(10)))
        .expect("the writer gets in");
    assert!(valid_until <= taken_at, "{valid_until:?} {taken_at:?}");
    let w = taker.join().unwrap();
    assert!(w.token() > held.token());
    proxy.restore();
    fenced_out(held.put(&format!("{n}-data"), b"late"));
    drop(held);
    w.release().unwrap();
}

/// `FLUSHALL` under a reader (after a writer): the next holder's fence is
/// above both (the hybrid clock), and the reader learns
/// it lost within a poll, long before its TTL; its fenced write is
/// refused.
#[test]
fn fault_a_flushall_never_repeats_a_fence_and_the_reader_learns_it_lost() {
    let server = RedisServer::start();
    let long = Duration::from_secs(30);
    let n = name("flush");
    let old_client = connect(&server, long);
    let w = rw(&old_client, &n).write().unwrap();
    let write_token = w.token();
    w.release().unwrap();
    let old = rw(&old_client, &n).read().unwrap();
    assert!(old.token() > write_token);
    let _: String = server.cmd(&["FLUSHALL"]);
    // A new client at once, before the old holder can know.
    let new_client = connect(&server, long);
    let new = rw(&new_client, &n)
        .try_write()
        .unwrap()
        .expect("the flush freed the lock");
    assert!(new.token() > old.token(), "never back after a flush");
    let reason = old
        .lost()
        .wait_timeout(scale(Duration::from_secs(3)))
        .expect("the reader learns within a poll");
    assert_ne!(reason, LossReason::DeadlineExpired);
    fenced_out(old.put(&format!("{n}-data"), b"late"));
    drop(old);
    new.release().unwrap();
}

/// A crashed holder of the other recipe refuses the name only while its
/// session lives: once its key expired, the next comer sweeps its stale
/// entry and takes the name, either way round.
#[test]
fn fault_a_crashed_holder_of_the_other_recipe_refuses_the_name_until_its_ttl() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(1);
    let (n, m) = (name("stale-mutex"), name("stale-rw"));
    let crashed = connect(&server, ttl);
    let held = (crashed.mutex(&n).unwrap().lock(), rw(&crashed, &m).read());
    let session = format!("{NS}s:{}", crashed.session_id().unwrap());
    let other = connect(&server, Duration::from_secs(10));
    invalid(rw(&other, &n).try_write(), "a lock or election");
    invalid(other.mutex(&m).unwrap().try_lock(), "a read-write lock");
    crashed.orphan();
    wait_until("the crashed session expired", scale(5 * ttl), || {
        !server.cmd::<bool>(&["EXISTS", &session])
    });
    let w = rw(&other, &n).try_write_for(scale(3 * ttl)).unwrap();
    let g = other
        .mutex(&m)
        .unwrap()
        .try_lock_for(scale(3 * ttl))
        .unwrap();
    w.expect("the stale mutex entry swept").release().unwrap();
    g.expect("the stale reader swept").release().unwrap();
    drop(held);
    nothing_left(&server, &n);
    nothing_left(&server, &m);
}
