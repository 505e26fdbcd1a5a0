//! A server restart (kill -9, then a start on the same data) under the
//! read-write lock and the multi-lock (issue 24), on every store that
//! keeps its data: ZooKeeper, etcd, PostgreSQL in lease mode and Redis
//! with its append-only file synced at every write. The holder rides the
//! restart out (its session or lease, 10 s, outlasts it): it still holds,
//! its fenced write lands, and once it releases the waiters queued before
//! the restart acquire in their order, with greater fences, one side at a
//! time; nothing is left behind. In PostgreSQL's session mode the restart
//! ends the backend that holds the advisory lock: the holder loses (its
//! loss signal fires, its fenced write is refused) before a waiter holds.
//! On Redis the holder's fenced write waits for the client's first answer
//! after the restart (`Rig::ready_to_write`). Every test kills a server of
//! its own: they are `fault` tests, in nextest's `serial` group
//! (.config/nextest.toml).

mod restart_common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Select, Sender};
use integration::{scale, EtcdServer, PgServer, RedisServer, ZkServer};
use recipes_core::{
    BootInstant, Client, Error, FencingToken, LossReason, LossSignal, MultiLockGuard, Result,
};
use restart_common::{nothing_left, queued, PgSessionMode, Rig, AFTER_RESTART};

/// The read-write lock.
const RW: &str = "/restart/rw";
/// The multi-lock's names.
const A: &str = "/restart/multi/a";
const B: &str = "/restart/multi/b";
/// Where the holder writes, fenced, after the restart.
const RESOURCE: &str = "/restart/resource";

/// What a waiter saw the moment it held.
struct Acquired<T> {
    /// Its token, or its tokens by name.
    tokens: T,
    /// The loss reason of the holder it queued behind, by then.
    holder_loss: Option<LossReason>,
    /// How many other waiters of the test held at that moment.
    beside: usize,
}

/// A waiter on a thread of its own, with its own client: it reports once
/// it holds, and releases when told (or when the test drops it).
struct Waiting<T> {
    got: Receiver<Result<Acquired<T>>>,
    go: Sender<()>,
    thread: JoinHandle<Result<()>>,
}

/// How a waiter's guard is released.
type Release = Box<dyn FnOnce() -> Result<()> + Send>;

/// What a test's waiters report against: the loss of the holder they
/// queue behind, and how many of them hold.
struct Watch {
    holder: LossSignal,
    holding: Arc<AtomicUsize>,
}

impl Watch {
    fn new(holder: &LossSignal) -> Watch {
        let holding = Arc::new(AtomicUsize::new(0));
        let holder = holder.clone();
        Watch { holder, holding }
    }

    /// A waiter: `take` acquires, and gives its fences and its release.
    fn waiter<T: Send + 'static>(
        &self,
        take: impl FnOnce() -> Result<(T, Release)> + Send + 'static,
    ) -> Waiting<T> {
        let (tx, got) = crossbeam_channel::bounded(1);
        let (go, told) = crossbeam_channel::bounded(1);
        let (holder, holding) = (self.holder.clone(), self.holding.clone());
        let thread = std::thread::spawn(move || {
            let (tokens, release) = match take() {
                Ok(taken) => taken,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return Ok(());
                }
            };
            let beside = holding.fetch_add(1, Ordering::SeqCst);
            let holder_loss = holder.reason();
            let _ = tx.send(Ok(Acquired {
                tokens,
                holder_loss,
                beside,
            }));
            let _ = told.recv();
            holding.fetch_sub(1, Ordering::SeqCst);
            release()
        });
        Waiting { got, go, thread }
    }
}

impl<T> Waiting<T> {
    /// What it reported once it held, within `bound`.
    fn holds(&self, bound: Duration) -> Acquired<T> {
        let got = self.got.recv_timeout(bound);
        let got = got.unwrap_or_else(|_| panic!("it did not acquire within {bound:?}"));
        got.expect("it acquires, no error")
    }

    /// Tell it to release, and its release's outcome.
    fn release(self) -> Result<()> {
        self.go.send(()).expect("the waiter waits to be told");
        self.thread.join().expect("the waiter's thread")
    }
}

/// The first of two waiters to hold within `bound`: which, and what it
/// reported.
fn first_to_hold<T>(waiters: [&Waiting<T>; 2], bound: Duration) -> (usize, Acquired<T>) {
    let mut select = Select::new();
    for w in waiters {
        select.recv(&w.got);
    }
    let ready = select.select_timeout(bound);
    let op = ready.unwrap_or_else(|_| panic!("no waiter acquired within {bound:?}"));
    let i = op.index();
    let got = op.recv(&waiters[i].got).expect("the waiter reports");
    (i, got.unwrap_or_else(|e| panic!("waiter {i} failed: {e}")))
}

/// Kill -9 the server and start it again on its data; when it was killed.
fn restart<R: Rig>(rig: &R) -> BootInstant {
    rig.kill();
    let killed = BootInstant::now();
    rig.restart();
    killed
}

/// The holder once the server is back. Where holdings are kept, it still
/// holds (`check` is Ok) and its fenced write lands; in session mode it
/// lost: its loss signal fires, `check` fails and its fenced write is
/// refused, and nothing of it lands.
fn the_holder_after_the_restart<R: Rig>(
    rig: &R,
    killed: BootInstant,
    client: &R::C,
    lost: &LossSignal,
    check: impl Fn() -> Result<()>,
    put: impl Fn(&[u8]) -> Result<()>,
) {
    let read = || client.read(RESOURCE).expect("read the resource");
    if R::KEEPS_HOLDINGS {
        check().expect("the holder rode out the restart");
        rig.ready_to_write(client, killed);
        put(b"after").expect("the holder's fenced write lands");
        assert_eq!(read().as_deref(), Some(&b"after"[..]));
        return;
    }
    let reason = lost.wait_timeout(scale(AFTER_RESTART));
    reason.expect("the holder loses: the restart ended its backend");
    assert!(check().is_err(), "a lost holder's check passes");
    match put(b"late") {
        Err(Error::FenceRejected { .. }) => {}
        other => panic!("the lost holder's fenced write: {other:?}"),
    }
    assert_eq!(read(), None, "the lost holder's write landed");
}

/// The holder's release after the restart: it succeeds where the holding
/// rode it out; a lost one's (session mode) may say it was lost.
fn released_after_the_restart<R: Rig>(released: Result<()>, who: &str) {
    if R::KEEPS_HOLDINGS {
        released.unwrap_or_else(|e| panic!("{who} releases after the restart: {e}"));
    }
}

/// A waiter's report: the holder had released (or, in session mode, lost)
/// before it held, and no other waiter of the test held beside it.
fn held_after_the_holder<R: Rig, T>(got: &Acquired<T>, who: &str) {
    match got.holder_loss {
        Some(LossReason::Released) if R::KEEPS_HOLDINGS => {}
        Some(reason) if !R::KEEPS_HOLDINGS && reason != LossReason::Released => {}
        other => panic!("{who} held while the holder's loss was {other:?}"),
    }
    assert_eq!(got.beside, 0, "{who} held beside another waiter");
}

/// A reader (`write` false) or a writer of `RW`, waiting through `client`.
fn rw_waiter<C: Client>(client: &C, write: bool, watch: &Watch) -> Waiting<FencingToken> {
    let rw = client.rw_lock(RW).unwrap();
    watch.waiter(move || match write {
        false => rw
            .read()
            .map(|g| (g.token(), Box::new(move || g.release()) as Release)),
        true => rw
            .write()
            .map(|g| (g.token(), Box::new(move || g.release()) as Release)),
    })
}

/// A writer holds; a reader, then a second writer, queue (each on its own
/// client); the server restarts. The writer comes through (or, in session
/// mode, loses), then the reader holds with a greater fence, and the
/// second writer only once the reader released, with a fence greater than
/// both. In session mode the restart ends the waiters' waits too, so the
/// two may queue again in either order: whichever holds first, the other
/// waits for it.
fn rw_lock_comes_through_a_restart<R: Rig>() {
    let rig = R::start();
    let clients = [rig.connect(), rig.connect(), rig.connect()];
    let held = clients[0].rw_lock(RW).unwrap().write().unwrap();
    let watch = Watch::new(held.lost());
    let reader = rw_waiter(&clients[1], false, &watch);
    queued(&rig, &[RW], 2);
    let writer = rw_waiter(&clients[2], true, &watch);
    queued(&rig, &[RW], 3);

    let killed = restart(&rig);
    let first = held.token();
    the_holder_after_the_restart(
        &rig,
        killed,
        &clients[0],
        held.lost(),
        || held.check(),
        |v| held.put(RESOURCE, v),
    );
    released_after_the_restart::<R>(held.release(), "the writer");
    let bound = scale(AFTER_RESTART);
    let (i, one) = first_to_hold([&reader, &writer], bound);
    if R::KEEPS_HOLDINGS {
        assert_eq!(i, 0, "the second writer passed the reader queued before it");
    }
    held_after_the_holder::<R, _>(&one, "the first waiter");
    assert!(one.tokens > first, "fence {} after {first}", one.tokens);
    let (one_waiter, other) = match i {
        0 => (reader, writer),
        _ => (writer, reader),
    };
    assert!(other.got.is_empty(), "a reader and a writer held at once");
    one_waiter.release().expect("the first waiter releases");
    let two = other.holds(bound);
    held_after_the_holder::<R, _>(&two, "the second waiter");
    assert!(
        two.tokens > one.tokens,
        "fence {} after {}",
        two.tokens,
        one.tokens
    );
    other.release().expect("the second waiter releases");
    nothing_left(&rig, &[RW], clients);
}

/// A multi-lock guard's tokens of `A` and `B`.
fn tokens_of<C: Client>(guard: &MultiLockGuard<C>) -> [FencingToken; 2] {
    [A, B].map(|n| guard.token(n).expect("a token for each name"))
}

/// Client 0 holds a multi-lock over `A` and `B`; client 1 waits for one
/// over `B` and `A`; the server restarts. The holder comes through (or,
/// in session mode, loses), and the waiter holds with each name's fence
/// above the holder's for that name.
fn multi_lock_comes_through_a_restart<R: Rig>() {
    let rig = R::start();
    let clients = [rig.connect(), rig.connect()];
    let held = clients[0].multi_lock(&[A, B]).unwrap().lock().unwrap();
    let multi = clients[1].multi_lock(&[B, A]).unwrap();
    let waiter = Watch::new(held.lost()).waiter(move || {
        let g = multi.lock()?;
        let tokens = tokens_of(&g);
        Ok((tokens, Box::new(move || g.release()) as Release))
    });
    // Both names held, and the waiter queued on the first of them.
    queued(&rig, &[A, B], 3);

    let killed = restart(&rig);
    let before = tokens_of(&held);
    the_holder_after_the_restart(
        &rig,
        killed,
        &clients[0],
        held.lost(),
        || held.check(),
        |v| held.put(A, RESOURCE, v),
    );
    if !R::KEEPS_HOLDINGS {
        assert!(held.lost_name().is_some(), "the loss names no name");
    }
    released_after_the_restart::<R>(held.release(), "the holder");
    let got = waiter.holds(scale(AFTER_RESTART));
    held_after_the_holder::<R, _>(&got, "the waiter");
    for ((name, old), new) in [A, B].iter().zip(before).zip(got.tokens) {
        assert!(new > old, "{name}: fence {new} after the holder's {old}");
    }
    waiter.release().expect("the waiter releases");
    nothing_left(&rig, &[A, B], clients);
}

#[test]
fn zk_fault_restart_rw_lock_writer_rides_it_out_reader_then_writer_follow() {
    rw_lock_comes_through_a_restart::<ZkServer>();
}

#[test]
fn etcd_fault_restart_rw_lock_writer_rides_it_out_reader_then_writer_follow() {
    rw_lock_comes_through_a_restart::<EtcdServer>();
}

#[test]
fn pg_fault_restart_rw_lock_writer_rides_it_out_reader_then_writer_follow() {
    rw_lock_comes_through_a_restart::<PgServer>();
}

#[test]
fn pg_session_fault_restart_rw_lock_writer_loses_then_reader_and_writer_follow() {
    rw_lock_comes_through_a_restart::<PgSessionMode>();
}

#[test]
fn redis_fault_restart_rw_lock_writer_rides_it_out_reader_then_writer_follow() {
    rw_lock_comes_through_a_restart::<RedisServer>();
}

#[test]
fn zk_fault_restart_multi_lock_holder_rides_it_out_waiter_follows() {
    multi_lock_comes_through_a_restart::<ZkServer>();
}

#[test]
fn etcd_fault_restart_multi_lock_holder_rides_it_out_waiter_follows() {
    multi_lock_comes_through_a_restart::<EtcdServer>();
}

#[test]
fn pg_fault_restart_multi_lock_holder_rides_it_out_waiter_follows() {
    multi_lock_comes_through_a_restart::<PgServer>();
}

#[test]
fn pg_session_fault_restart_multi_lock_holder_loses_waiter_follows() {
    multi_lock_comes_through_a_restart::<PgSessionMode>();
}

#[test]
fn redis_fault_restart_multi_lock_holder_rides_it_out_waiter_follows() {
    multi_lock_comes_through_a_restart::<RedisServer>();
}
