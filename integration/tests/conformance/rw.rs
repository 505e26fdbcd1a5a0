//! The read-write lock, the same on every store: readers share, a writer
//! is alone, a queued writer is not starved by a stream of readers,
//! downgrade keeps writers out and lets readers in, no upgrade, timeouts
//! leave nothing, fences order writers above everything before them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::{scale, wait_until};
use recipes_core::{Client, Error, LockKind};

use super::{name, Kit};

const TTL: Duration = Duration::from_secs(10);

fn client<K: Kit>(kit: &K) -> K::Client
where
    K::Client: recipes_core::Client,
{
    kit.connect(TTL).expect("connect")
}

/// How many contenders the store lists for `name` (readers and writers,
/// holding or queued).
fn queued<C: Client>(c: &C, name: &str) -> usize {
    c.contenders(name).expect("contenders").len()
}

/// Many readers at once; a writer alone, and readers kept out while it
/// holds. Nothing is left once all are released.
pub fn readers_share_and_a_writer_is_alone<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    let name = name("rw-share");
    let (a, b, c) = (client(kit), client(kit), client(kit));
    let r1 = a.rw_lock(&name).unwrap().read().unwrap();
    let r2 = b.rw_lock(&name).unwrap().try_read().unwrap();
    let r2 = r2.expect("a second reader shares the lock");
    let writer = c.rw_lock(&name).unwrap();
    assert!(
        writer.try_write().unwrap().is_none(),
        "a writer with readers"
    );
    r1.release().unwrap();
    assert!(
        writer.try_write().unwrap().is_none(),
        "a writer with a reader"
    );
    r2.release().unwrap();
    let w = writer.try_write().unwrap().expect("the writer once alone");
    let rw_a = a.rw_lock(&name).unwrap();
    assert!(
        rw_a.try_read().unwrap().is_none(),
        "a reader beside a writer"
    );
    assert!(rw_a.try_write().unwrap().is_none(), "two writers");
    w.release().unwrap();
    assert_eq!(queued(&a, &name), 0, "entries left behind");
}

/// Fair: with a reader holding and a writer queued, a new reader waits
/// behind the writer; the writer gets in when the first reader leaves.
pub fn a_queued_writer_is_not_starved_by_readers<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    let name = name("rw-fair");
    let (a, b, c) = (client(kit), client(kit), client(kit));
    let first = a.rw_lock(&name).unwrap().read().unwrap();
    let writer = b.rw_lock(&name).unwrap();
    let wrote = Arc::new(AtomicBool::new(false));
    let waiting = {
        let wrote = wrote.clone();
        std::thread::spawn(move || {
            let w = writer
                .try_write_for(scale(Duration::from_secs(30)))
                .unwrap();
            let w = w.expect("the queued writer gets in");
            wrote.store(true, Ordering::SeqCst);
            let token = w.token();
            w.release().unwrap();
            token
        })
    };
    wait_until(
        "the writer is queued",
        scale(Duration::from_secs(10)),
        || queued(&a, &name) == 2,
    );
    let late = c.rw_lock(&name).unwrap();
    assert!(
        late.try_read().unwrap().is_none(),
        "a reader passed a queued writer"
    );
    let short = late.try_read_for(Duration::from_millis(300)).unwrap();
    assert!(short.is_none(), "a reader passed a queued writer");
    assert!(!wrote.load(Ordering::SeqCst), "the writer beside a reader");
    let first_token = first.token();
    first.release().unwrap();
    let write_token = waiting.join().unwrap();
    assert!(
        write_token > first_token,
        "{write_token} after reader {first_token}"
    );
    let after = late.read().unwrap();
    assert!(
        after.token() > write_token,
        "a reader's token above the writer's"
    );
    after.release().unwrap();
    assert_eq!(queued(&a, &name), 0, "entries left behind");
}

/// Downgrade: the write guard becomes a read guard with the same token; a
/// reader queued behind it (before any other writer) enters, a writer
/// queued behind it stays out until the read guards go.
pub fn downgrade_lets_readers_in_and_keeps_writers_out<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    let name = name("rw-downgrade");
    let (a, b, c) = (client(kit), client(kit), client(kit));
    let w = a.rw_lock(&name).unwrap().write().unwrap();
    let write_token = w.token();
    // Queued behind the writer: a reader, then a second writer.
    let reader = {
        let rw = c.rw_lock(&name).unwrap();
        std::thread::spawn(move || {
            let g = rw.try_read_for(scale(Duration::from_secs(30))).unwrap();
            g.expect("the reader behind gets in after the downgrade")
        })
    };
    wait_until(
        "the reader is queued",
        scale(Duration::from_secs(10)),
        || queued(&a, &name) == 2,
    );
    let wrote = Arc::new(AtomicBool::new(false));
    let second_writer = {
        let (rw, wrote) = (b.rw_lock(&name).unwrap(), wrote.clone());
        std::thread::spawn(move || {
            let g = rw.try_write_for(scale(Duration::from_secs(30))).unwrap();
            let g = g.expect("the second writer gets in at last");
            wrote.store(true, Ordering::SeqCst);
            let token = g.token();
            g.release().unwrap();
            token
        })
    };
    wait_until(
        "the writer is queued",
        scale(Duration::from_secs(10)),
        || queued(&a, &name) == 3,
    );
    let read = w.downgrade().expect("downgrade");
    assert_eq!(
        read.token(),
        write_token,
        "a downgraded guard keeps its token"
    );
    let r = reader.join().unwrap();
    assert!(
        !wrote.load(Ordering::SeqCst),
        "a writer got in at the downgrade"
    );
    let other = a.rw_lock(&name).unwrap();
    assert!(
        other.try_write().unwrap().is_none(),
        "a writer beside readers"
    );
    r.release().unwrap();
    assert!(
        !wrote.load(Ordering::SeqCst),
        "a writer beside the downgraded reader"
    );
    read.release().unwrap();
    let second = second_writer.join().unwrap();
    assert!(second > write_token, "{second} after {write_token}");
    assert_eq!(queued(&a, &name), 0, "entries left behind");
}

/// No upgrade: from the guard, or a write on the handle through which this
/// thread reads, is `InvalidArgument` at once; so is an untimed write (or
/// multi-lock) of the name through another handle of the client, which
/// would wait for itself forever, while a timed one times out as behind
/// any reader. The read guard stays held.
pub fn an_upgrade_is_refused_at_once<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    let name = name("rw-upgrade");
    let a = client(kit);
    let rw = a.rw_lock(&name).unwrap();
    let r = rw.read().unwrap();
    let started = Instant::now();
    assert!(matches!(r.upgrade(), Err(Error::InvalidArgument(_))));
    assert!(matches!(rw.write(), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        rw.try_write_for(TTL),
        Err(Error::InvalidArgument(_))
    ));
    let other = a.rw_lock(&name).unwrap();
    assert!(matches!(other.write(), Err(Error::InvalidArgument(_))));
    let multi = a
        .multi_lock_of(&[(name.as_str(), LockKind::Write)])
        .unwrap();
    assert!(matches!(multi.lock(), Err(Error::InvalidArgument(_))));
    // Refused before it waits for a name ordered first, held elsewhere.
    let first = name.replace("/rw-upgrade", "/a-rw-upgrade");
    let other_client = client(kit);
    let elsewhere = other_client.mutex(&first).unwrap().lock().unwrap();
    let parts = [
        (first.as_str(), LockKind::Mutex),
        (name.as_str(), LockKind::Write),
    ];
    let both = a.multi_lock_of(&parts).unwrap();
    assert!(matches!(both.lock(), Err(Error::InvalidArgument(_))));
    elsewhere.release().unwrap();
    assert!(
        started.elapsed() < scale(Duration::from_secs(1)),
        "not at once"
    );
    let short = Duration::from_millis(100);
    let behind = other.try_write_for(short).unwrap();
    assert!(behind.is_none(), "a timed write waits behind the reader");
    let behind = multi.try_lock_for(short).unwrap();
    assert!(
        behind.is_none(),
        "a timed multi-lock waits behind the reader"
    );
    assert!(!r.is_lost());
    r.release().unwrap();
    rw.try_write()
        .unwrap()
        .expect("free again")
        .release()
        .unwrap();
    assert_eq!(queued(&a, &name), 0, "entries left behind");
}

/// Timed acquisitions of either side that time out leave no entry.
pub fn timeouts_leave_nothing_behind<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    let name = name("rw-timeout");
    let (a, b) = (client(kit), client(kit));
    let w = a.rw_lock(&name).unwrap().write().unwrap();
    let rw = b.rw_lock(&name).unwrap();
    let short = Duration::from_millis(200);
    assert!(rw.try_read_for(short).unwrap().is_none());
    assert!(rw.try_write_for(short).unwrap().is_none());
    assert!(rw.try_read().unwrap().is_none());
    wait_until(
        "only the holder is left",
        scale(Duration::from_secs(10)),
        || queued(&b, &name) == 1,
    );
    w.release().unwrap();
    assert_eq!(queued(&a, &name), 0, "entries left behind");
}

/// Writers' tokens strictly increase and exceed every earlier reader's;
/// readers' exceed every earlier writer's.
pub fn fences_order_writers_above_everything_before<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    let name = name("rw-fences");
    let clients = [client(kit), client(kit), client(kit)];
    let (mut highest, mut last_write) = (None, None);
    for round in 0..6 {
        let c = &clients[round % clients.len()];
        let rw = c.rw_lock(&name).unwrap();
        if round % 2 == 0 {
            let readers = [
                rw.read().unwrap(),
                clients[(round + 1) % 3]
                    .rw_lock(&name)
                    .unwrap()
                    .read()
                    .unwrap(),
            ];
            for r in readers {
                assert!(
                    Some(r.token()) > last_write,
                    "round {round}: reader under a writer"
                );
                highest = highest.max(Some(r.token()));
                r.release().unwrap();
            }
        } else {
            let w = rw.write().unwrap();
            assert!(
                Some(w.token()) > highest,
                "round {round}: writer not above all"
            );
            highest = Some(w.token());
            last_write = Some(w.token());
            w.release().unwrap();
        }
    }
    assert_eq!(queued(&clients[0], &name), 0, "entries left behind");
}

/// A mutex on a read-write lock's name, and a read-write lock on a
/// mutex's, are refused while the other's entries are there.
pub fn another_recipe_on_the_name_is_refused<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    let (a, b) = (client(kit), client(kit));
    let rw_name = name("rw-clash");
    let r = a.rw_lock(&rw_name).unwrap().read().unwrap();
    let tried = b.mutex(&rw_name).and_then(|m| m.try_lock());
    assert!(matches!(tried, Err(Error::InvalidArgument(_))), "{tried:?}");
    r.release().unwrap();
    let mutex_name = name("mutex-clash");
    let m = a.mutex(&mutex_name).unwrap().lock().unwrap();
    let tried = b.rw_lock(&mutex_name).and_then(|rw| rw.try_read());
    assert!(matches!(tried, Err(Error::InvalidArgument(_))), "{tried:?}");
    let tried = b.rw_lock(&mutex_name).and_then(|rw| rw.try_write());
    assert!(matches!(tried, Err(Error::InvalidArgument(_))), "{tried:?}");
    m.release().unwrap();
    assert_eq!(queued(&a, &rw_name) + queued(&a, &mutex_name), 0);
}
