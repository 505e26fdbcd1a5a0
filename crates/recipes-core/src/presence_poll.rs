//! One poll for every entry a client holds, on stores that cannot watch a
//! key (Redis) or whose watch is a hint (PostgreSQL's notifications): each
//! tick, one batched read says which of the watched entries are still
//! there, instead of a read per entry, so the requests of an idle client
//! do not grow with the locks it holds.
//!
//! The poll is how an entry deleted behind the holder's back shows as
//! loss; safety never rides on it (the session's deadline and the fence
//! do), so a failed read is tried again at the next tick.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::error::Result;

/// Entries per read.
pub const PRESENCE_BATCH: usize = 1000;

/// The read that says, in order, which entries are still there.
type Present<K> =
    Arc<dyn Fn(Vec<K>) -> Pin<Box<dyn Future<Output = Result<Vec<bool>>> + Send>> + Send + Sync>;

/// The watched entries of one client, the read that polls them and how
/// often. Cheap to clone.
pub struct PresencePoll<K> {
    inner: Arc<Mutex<Registry<K>>>,
    every: Duration,
    present: Present<K>,
    /// Entries per read ([`PRESENCE_BATCH`] unless set).
    batch: usize,
}

struct Registry<K> {
    next_id: u64,
    watched: HashMap<u64, (K, oneshot::Sender<()>)>,
    /// The poll task runs (it ends when nothing is watched).
    running: bool,
}

/// Stops watching an entry however its wait ends.
struct Unwatch<K> {
    inner: Arc<Mutex<Registry<K>>>,
    id: u64,
}

impl<K> Drop for Unwatch<K> {
    fn drop(&mut self) {
        self.inner.lock().watched.remove(&self.id);
    }
}

impl<K> Clone for PresencePoll<K> {
    fn clone(&self) -> Self {
        PresencePoll {
            inner: self.inner.clone(),
            every: self.every,
            present: self.present.clone(),
            batch: self.batch,
        }
    }
}

impl<K> fmt::Debug for PresencePoll<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PresencePoll")
            .field("watched", &self.inner.lock().watched.len())
            .finish()
    }
}

impl<K: Clone + Send + Sync + 'static> PresencePoll<K> {
    /// A poll that, every `every` while anything is watched, asks
    /// `present` about at most [`PRESENCE_BATCH`] entries at a time; it
    /// answers, in order, which are still there. It starts with the first
    /// entry watched and stops with the last.
    pub fn new<P, F>(every: Duration, present: P) -> PresencePoll<K>
    where
        P: Fn(Vec<K>) -> F + Send + Sync + 'static,
        F: Future<Output = Result<Vec<bool>>> + Send + 'static,
    {
        PresencePoll {
            inner: Arc::new(Mutex::new(Registry {
                next_id: 0,
                watched: HashMap::new(),
                running: false,
            })),
            every,
            present: Arc::new(move |entries| Box::pin(present(entries))),
            batch: PRESENCE_BATCH,
        }
    }

    /// The same poll asking about at most `batch` entries a read (at
    /// least one), for a store whose read of many entries is cheap.
    pub fn with_batch(mut self, batch: usize) -> PresencePoll<K> {
        self.batch = batch.max(1);
        self
    }

    /// Resolves once a poll sees `entry` gone; on the runtime.
    pub async fn gone(&self, entry: K) {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut r = self.inner.lock();
            let id = r.next_id;
            r.next_id += 1;
            r.watched.insert(id, (entry, tx));
            if !r.running {
                r.running = true;
                let (inner, present) = (self.inner.clone(), self.present.clone());
                tokio::spawn(poll(inner, self.every, self.batch, present));
            }
            id
        };
        let _unwatch = Unwatch {
            inner: self.inner.clone(),
            id,
        };
        if rx.await.is_err() {
            // The poll task went with the runtime: nothing was seen.
            std::future::pending::<()>().await;
        }
    }
}

async fn poll<K: Clone>(
    inner: Arc<Mutex<Registry<K>>>,
    every: Duration,
    batch: usize,
    present: Present<K>,
) {
    loop {
        tokio::time::sleep(every).await;
        let watched: Vec<(u64, K)> = {
            let mut r = inner.lock();
            if r.watched.is_empty() {
                r.running = false;
                return;
            }
            r.watched
                .iter()
                .map(|(id, (entry, _))| (*id, entry.clone()))
                .collect()
        };
        for batch in watched.chunks(batch) {
            let entries = batch.iter().map(|(_, e)| e.clone()).collect();
            let there = match present(entries).await {
                Ok(there) => there,
                Err(e) => {
                    log::debug!("presence poll of {} held entries failed: {e}", batch.len());
                    continue;
                }
            };
            let mut r = inner.lock();
            for ((id, _), there) in batch.iter().zip(there) {
                if !there {
                    if let Some((_, gone)) = r.watched.remove(id) {
                        let _ = gone.send(());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Entries still there: those not in `deleted`.
    fn store(
        deleted: &Arc<Mutex<HashSet<u32>>>,
        reads: &Arc<Mutex<Vec<usize>>>,
    ) -> impl Fn(Vec<u32>) -> std::future::Ready<Result<Vec<bool>>> + Send + Sync + 'static {
        let (deleted, reads) = (deleted.clone(), reads.clone());
        move |entries: Vec<u32>| {
            reads.lock().push(entries.len());
            let deleted = deleted.lock();
            std::future::ready(Ok(entries.iter().map(|e| !deleted.contains(e)).collect()))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_read_a_tick_for_every_watched_entry_and_only_the_gone_resolve() {
        let deleted = Arc::new(Mutex::new(HashSet::new()));
        let reads = Arc::new(Mutex::new(Vec::new()));
        let every = Duration::from_millis(500);
        let poll = PresencePoll::new(every, store(&deleted, &reads));
        let mut waits: Vec<_> = (0..2500u32)
            .map(|i| {
                let poll = poll.clone();
                tokio::spawn(async move { poll.gone(i).await })
            })
            .collect();
        tokio::time::sleep(every * 3 + every / 2).await;
        // Three ticks, each in batches of at most 1,000: 3 reads a tick.
        assert_eq!(*reads.lock(), [1000, 1000, 500].repeat(3));
        assert!(waits.iter().all(|w| !w.is_finished()));
        deleted.lock().insert(7);
        tokio::time::sleep(every).await;
        assert!(waits[7].is_finished());
        assert_eq!(waits.iter().filter(|w| w.is_finished()).count(), 1);
        // Dropped waits stop being read; the poll stops with the last.
        for w in waits.drain(..) {
            w.abort();
        }
        tokio::time::sleep(every * 2).await;
        let n = reads.lock().len();
        tokio::time::sleep(every * 4).await;
        assert_eq!(reads.lock().len(), n, "no read once nothing is watched");
        assert!(!poll.inner.lock().running);
    }

    #[tokio::test(start_paused = true)]
    async fn a_larger_batch_reads_every_watched_entry_in_fewer_reads() {
        let deleted = Arc::new(Mutex::new(HashSet::new()));
        let reads = Arc::new(Mutex::new(Vec::new()));
        let every = Duration::from_millis(500);
        let poll = PresencePoll::new(every, store(&deleted, &reads)).with_batch(2000);
        let waits: Vec<_> = (0..2500u32)
            .map(|i| {
                let poll = poll.clone();
                tokio::spawn(async move { poll.gone(i).await })
            })
            .collect();
        tokio::time::sleep(every * 2 + every / 2).await;
        assert_eq!(*reads.lock(), [2000, 500].repeat(2));
        waits.iter().for_each(|w| w.abort());
    }
}
