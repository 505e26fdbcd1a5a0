//! M2's bookkeeping, shared by our contenders and the raw ones: overlaps,
//! fence inversions and the time from each release to the next
//! acquisition.
//!
//! The raw limit of an etcd handoff (`etcd`): each contender its own
//! client and lease with one persistent deletions watch on the prefix,
//! opened once — the put-if-absent + read transaction, then the watch's
//! events until every key ahead of ours is deleted, then a delete. What a
//! lock on a persistent watch can do at most, with no recipe around it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::out::{percentile_us, Figures, V};

/// What every contender of one M2 run shares.
#[derive(Default)]
pub struct Handoffs {
    inside: AtomicBool,
    violations: AtomicU64,
    /// The last release (when), and the last fence.
    last: Mutex<(Option<Instant>, u64)>,
    samples: Mutex<Vec<Duration>>,
}

impl Handoffs {
    /// A contender acquired with `fence`: check it and time the handoff.
    pub fn acquired(&self, fence: u64) {
        let at = Instant::now();
        if self.inside.swap(true, Ordering::SeqCst) {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        let mut last = self.last.lock();
        if fence <= last.1 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(released) = last.0 {
            self.samples
                .lock()
                .push(at.saturating_duration_since(released));
        }
        last.1 = fence;
    }

    /// The holder is about to release.
    pub fn releasing(&self) {
        self.inside.store(false, Ordering::SeqCst);
        self.last.lock().0 = Some(Instant::now());
    }

    /// Acquisitions so far.
    pub fn count(&self) -> usize {
        self.samples.lock().len() + 1
    }

    pub fn violations(&self) -> u64 {
        self.violations.load(Ordering::SeqCst)
    }

    /// Acquisitions per second over `elapsed`, handoff p50 and p99.
    pub fn figures(&self, elapsed: Duration) -> Figures {
        let mut samples = self.samples.lock().clone();
        vec![
            (
                "acquisitions_per_sec",
                V::N((samples.len() + 1) as f64 / elapsed.as_secs_f64()),
            ),
            ("handoff_p50_us", V::N(percentile_us(&mut samples, 50.0))),
            ("handoff_p99_us", V::N(percentile_us(&mut samples, 99.0))),
        ]
    }
}

/// `n` raw contenders handing one etcd lock on for `seconds` (see the
/// module's notes), and how long they ran.
pub fn etcd(endpoints: &[String], n: usize, seconds: Duration) -> (Handoffs, Duration) {
    let handoffs = Handoffs::default();
    let stop_at = Instant::now() + seconds;
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..n {
            let handoffs = &handoffs;
            s.spawn(move || etcd_contender(endpoints, handoffs, stop_at));
        }
    });
    (handoffs, started.elapsed())
}

const PREFIX: &str = "/bench/raw-handoff/";

fn etcd_contender(endpoints: &[String], handoffs: &Handoffs, stop_at: Instant) {
    use etcd_client::{
        Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
        WatchFilterType, WatchOptions,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let mut etcd = etcd_client::Client::connect(endpoints, None)
            .await
            .expect("connect");
        let lease = etcd.lease_grant(10, None).await.unwrap().id();
        let key = format!("{PREFIX}{lease:x}");
        let now = etcd.get(PREFIX, None).await.unwrap();
        let from = now.header().unwrap().revision() + 1;
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from)
            .with_filters([WatchFilterType::NoPut]);
        let mut events = etcd.watch(PREFIX, Some(options)).await.unwrap();
        let oldest = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_keys_only();
        while Instant::now() < stop_at {
            let txn = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([
                    TxnOp::put(key.as_str(), "", Some(PutOptions::new().with_lease(lease))),
                    TxnOp::get(PREFIX, Some(oldest.clone())),
                ]);
            let reply = etcd.txn(txn).await.unwrap();
            let mut fence = reply.header().unwrap().revision();
            let read_at = fence;
            let Some(etcd_client::TxnOpResponse::Get(listing)) = reply.op_responses().pop() else {
                panic!("the txn's read");
            };
            let mut ahead: Vec<Vec<u8>> = listing
                .kvs()
                .iter()
                .map(|kv| kv.key().to_vec())
                .take_while(|k| *k != key.as_bytes())
                .collect();
            while !ahead.is_empty() {
                let reply = events.message().await.unwrap().expect("the watch runs");
                for event in reply.events() {
                    let Some(kv) = event.kv() else { continue };
                    if event.event_type() == EventType::Delete && kv.mod_revision() > read_at {
                        ahead.retain(|k| k != kv.key());
                        fence = fence.max(kv.mod_revision());
                    }
                }
            }
            handoffs.acquired(fence as u64);
            handoffs.releasing();
            etcd.delete(key.as_str(), None).await.unwrap();
        }
        let _ = etcd.lease_revoke(lease).await;
    });
}
