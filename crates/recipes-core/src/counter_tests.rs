//! The counter's logic over an in-memory store: the encoding, the kinds'
//! ranges, `add`'s retried compare-and-set under racing writers, the
//! watch's missed count, the latch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::*;
use crate::count_down::CountDownLatch;

/// A counter in memory: the value and the version, writes by version.
#[derive(Clone)]
struct Memory {
    kind: CounterKind,
    cell: Arc<Mutex<Versioned>>,
}

impl Memory {
    fn new(kind: CounterKind) -> Memory {
        Memory {
            kind,
            cell: Arc::new(Mutex::new(Versioned {
                value: 0,
                version: 0,
            })),
        }
    }
}

impl CounterBackend for Memory {
    fn name(&self) -> &str {
        "/memory"
    }

    fn kind(&self) -> CounterKind {
        self.kind
    }

    fn get(&self) -> Result<Versioned> {
        Ok(*self.cell.lock())
    }

    fn set_if(&self, version: u64, value: i64) -> Result<bool> {
        let mut cell = self.cell.lock();
        if cell.version != version {
            return Ok(false);
        }
        *cell = Versioned {
            value,
            version: version + 1,
        };
        Ok(true)
    }

    fn delete_if(&self, version: u64) -> Result<bool> {
        let mut cell = self.cell.lock();
        if cell.version != version {
            return Ok(false);
        }
        *cell = Versioned {
            value: 0,
            version: 0,
        };
        Ok(true)
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
