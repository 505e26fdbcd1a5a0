//! The counter's logic over an in-memory store: the encoding, the kinds'
//! ranges, `add`'s retried compare-and-set under racing writers, the
//! watch's missed count, the latch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::*;
use crate::count_down::CountDownLatch;
use crate::loss::{LossSignal, LossTrigger};
use crate::runtime::Runtime;

/// A counter in memory: the value and the version, writes by version; a
/// write wakes the reads armed before it. It counts its reads.
#[derive(Clone)]
struct Memory {
    kind: CounterKind,
    cell: Arc<Mutex<Versioned>>,
    written: Arc<tokio::sync::watch::Sender<u64>>,
    rt: Runtime,
    loss: LossTrigger,
    /// `get` calls, and reads that armed a notification.
    gets: Arc<AtomicU64>,
    armed: Arc<AtomicU64>,
    /// Writes of another client, each landing just before one of our
    /// next compare-and-sets (adding 10).
    interlopers: Arc<AtomicU64>,
    /// Whether a lost compare-and-set says what it saw, as etcd's and
    /// Redis's do.
    reports: bool,
}

impl Memory {
    fn new(kind: CounterKind) -> Memory {
        Memory {
            kind,
            cell: Arc::new(Mutex::new(Versioned {
                value: 0,
                version: 0,
            })),
            written: Arc::new(tokio::sync::watch::channel(0).0),
            rt: Runtime::new("memory-counter").unwrap(),
            loss: LossTrigger::root(),
            gets: Arc::default(),
            armed: Arc::default(),
            interlopers: Arc::default(),
            reports: true,
        }
    }

    /// Write `now` if the version is still `version`.
    fn write_if(&self, version: u64, now: Versioned) -> bool {
        let mut cell = self.cell.lock();
        if cell.version != version {
            return false;
        }
        *cell = now;
        drop(cell);
        self.written.send_modify(|n| *n += 1);
        true
    }
}

impl OnRuntime for Memory {
    fn runtime(&self) -> &Runtime {
        &self.rt
    }
}

impl WaitStore for Memory {
    type Epoch = ();
    type Watch = tokio::sync::watch::Receiver<u64>;

    fn name(&self) -> &str {
        "/memory"
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.rt.spawn(task);
    }

    fn rpc_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn epoch(&self) -> Result<()> {
        Ok(())
    }

    fn epoch_signal(&self, (): &()) -> LossSignal {
        self.loss.signal()
    }

    async fn changed(&self, (): &(), mut watch: Self::Watch) -> Result<()> {
        let _ = watch.changed().await;
        Ok(())
    }
}

impl CounterBackend for Memory {
    type Waits = Memory;

    fn name(&self) -> &str {
        "/memory"
    }

    fn kind(&self) -> CounterKind {
        self.kind
    }

    fn get(&self) -> Result<Versioned> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        Ok(*self.cell.lock())
    }

    fn set_if(&self, version: u64, value: i64) -> Result<bool> {
        let now = Versioned {
            value,
            version: version + 1,
        };
        Ok(self.write_if(version, now))
    }

    fn set_if_seen(&self, version: u64, value: i64) -> Result<SetIf> {
        if self.interlopers.load(Ordering::Relaxed) > 0 {
            self.interlopers.fetch_sub(1, Ordering::Relaxed);
            let cell = *self.cell.lock();
            let theirs = Versioned {
                value: cell.value + 10,
                version: cell.version + 1,
            };
            assert!(self.write_if(cell.version, theirs));
        }
        if self.set_if(version, value)? {
            return Ok(SetIf::Set);
        }
        Ok(SetIf::Conflict(self.reports.then(|| *self.cell.lock())))
    }

    fn delete_if(&self, version: u64) -> Result<bool> {
        let none = Versioned {
            value: 0,
            version: 0,
        };
        Ok(self.write_if(version, none))
    }

    fn waits(&self) -> &Memory {
        self
    }

    async fn read_armed(&self, (): &()) -> Result<(Versioned, tokio::sync::watch::Receiver<u64>)> {
        self.armed.fetch_add(1, Ordering::Relaxed);
        let mut watch = self.written.subscribe();
        watch.borrow_and_update();
        Ok((*self.cell.lock(), watch))
    }
}

#[test]
fn the_encoding_is_curators_and_the_kinds_refuse_each_other() {
    assert_eq!(CounterKind::I32.encode(-2), vec![0xff, 0xff, 0xff, 0xfe]);
    assert_eq!(CounterKind::I32.decode("/c", &[0, 0, 1, 0]).unwrap(), 256);
    assert_eq!(
        CounterKind::I64
            .decode("/c", &(-5_i64).to_be_bytes())
            .unwrap(),
        -5
    );
    assert!(CounterKind::I32.decode("/c", &[0; 8]).is_err());
    assert!(CounterKind::I64.decode("/c", &[0; 4]).is_err());
    assert!(
        CounterKind::I32.decode("/c", b"3").is_err(),
        "a semaphore's size"
    );
    assert!(
        CounterKind::I32.decode("/c", b"").is_err(),
        "a lock's folder"
    );
    assert!(CounterKind::I32.fits(i64::from(i32::MIN)));
    assert!(!CounterKind::I32.fits(i64::from(i32::MAX) + 1));
}

#[test]
fn racing_adds_all_land_and_overflow_changes_nothing() {
    let counter = Arc::new(Counter::from_backend(Memory::new(CounterKind::I32)));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let c = counter.clone();
            std::thread::spawn(move || {
                for _ in 0..500 {
                    c.add(1).unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(
        counter.get().unwrap(),
        Versioned {
            value: 4000,
            version: 4000
        }
    );
    counter.set(i64::from(i32::MAX)).unwrap();
    assert!(matches!(counter.add(1), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        counter.set_if(4001, i64::MAX),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(counter.get().unwrap().value, i64::from(i32::MAX));
    let wide = Counter::from_backend(Memory::new(CounterKind::I64));
    assert_eq!(wide.add(i64::MAX).unwrap(), i64::MAX);
    assert!(matches!(wide.add(1), Err(Error::InvalidArgument(_))));
}

#[test]
fn a_lost_compare_and_set_that_says_what_it_saw_costs_no_read() {
    for reports in [true, false] {
        let mut store = Memory::new(CounterKind::I64);
        store.reports = reports;
        store.interlopers.store(2, Ordering::Relaxed);
        let counter = Counter::from_backend(store.clone());
        let added = counter.add_counted(1).unwrap();
        assert_eq!(
            added.now,
            Versioned {
                value: 21,
                version: 3
            }
        );
        assert_eq!(added.conflicts, 2);
        // One read before the first try; a store that cannot say what it
        // saw is read again after each loss.
        let reads = if reports { 1 } else { 3 };
        assert_eq!(
            store.gets.load(Ordering::Relaxed),
            reads,
            "reports: {reports}"
        );
    }
}

#[test]
fn a_watch_counts_what_it_missed_and_sees_a_restart() {
    let counter = Counter::from_backend(Memory::new(CounterKind::I64));
    let mut watch = counter.watch().unwrap();
    assert_eq!(watch.next_timeout(Duration::from_millis(30)).unwrap(), None);
    for _ in 0..3 {
        counter.add(1).unwrap();
    }
    let change = watch.next_timeout(Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!(
        change.now,
        Versioned {
            value: 3,
            version: 3
        }
    );
    assert_eq!((change.missed, change.restarted), (2, false));
    counter.add(1).unwrap();
    let change = watch.next_change().unwrap();
    assert_eq!((change.missed, change.restarted), (0, false));
    assert!(counter.delete().unwrap());
    let change = watch.next_change().unwrap();
    assert!(change.restarted, "{change:?}");
    assert!(matches!(
        watch.next_timeout(crate::limits::MAX_DURATION + Duration::from_secs(1)),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_latch_opens_at_zero_and_not_before() {
    let latch = CountDownLatch::new(Counter::from_backend(Memory::new(CounterKind::I64)));
    assert!(
        latch.wait_timeout(Duration::ZERO).unwrap(),
        "never set: open"
    );
    assert!(latch.try_set_count(2).unwrap());
    assert!(!latch.try_set_count(2).unwrap());
    let started = Instant::now();
    assert!(!latch.wait_timeout(Duration::from_millis(50)).unwrap());
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(latch.count_down().unwrap(), 1);
    assert_eq!(latch.count_down().unwrap(), 0);
    assert_eq!(latch.count_down().unwrap(), 0, "never below zero");
    assert!(latch.wait_timeout(Duration::from_millis(50)).unwrap());
    assert!(
        latch.try_set_count(1).unwrap(),
        "open again: may be set again"
    );
}

/// A blocked waiter sends nothing to the store while nothing changes: one
/// read arms the notification, then no read at all (no `get`, no poll)
/// until a write wakes it, at once.
#[test]
fn a_waiter_reads_once_then_sleeps_until_a_write_wakes_it() {
    let store = Memory::new(CounterKind::I64);
    let counter = Counter::from_backend(store.clone());
    let mut watch = counter.watch().unwrap();
    let gets = store.gets.load(Ordering::Relaxed);
    assert_eq!(
        watch.next_timeout(Duration::from_millis(400)).unwrap(),
        None
    );
    assert_eq!(store.armed.load(Ordering::Relaxed), 1, "one armed read");
    assert_eq!(store.gets.load(Ordering::Relaxed), gets, "no get: no poll");

    let writer = {
        let counter = Counter::from_backend(store.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            (counter.add(1).unwrap(), Instant::now())
        })
    };
    let change = watch.next_change().unwrap();
    let woke = Instant::now();
    let (value, written) = writer.join().unwrap();
    assert_eq!((change.now.value, value), (1, 1));
    assert!(
        woke - written < Duration::from_millis(200),
        "woken by the write"
    );
    assert_eq!(store.armed.load(Ordering::Relaxed), 3, "armed, woken, read");

    let latch = CountDownLatch::new(Counter::from_backend(store.clone()));
    latch.counter().set(2).unwrap();
    let armed = store.armed.load(Ordering::Relaxed);
    assert!(!latch.wait_timeout(Duration::from_millis(300)).unwrap());
    assert_eq!(store.armed.load(Ordering::Relaxed), armed + 1, "one read");
    let downs = {
        let latch = CountDownLatch::new(Counter::from_backend(store.clone()));
        std::thread::spawn(move || {
            latch.count_down().unwrap();
            latch.count_down().unwrap()
        })
    };
    assert!(latch.wait_timeout(Duration::from_secs(5)).unwrap());
    assert_eq!(downs.join().unwrap(), 0);
}
