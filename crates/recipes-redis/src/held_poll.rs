//! One poll for every entry a client holds: each [`POLL`], one `MGET` of
//! their hold keys (in batches of [`BATCH`]) instead of a `GET` per entry,
//! so the requests of an idle client do not grow with the locks it holds
//! (10,000 held locks sent 20,000 `GET`s a second).
//!
//! The poll is how a hold key deleted by hand, or lost with a restart or a
//! failover, shows as loss; safety never rides on it (the session's
//! deadline and the fence do), so a failed poll is tried again at the next
//! tick.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::contend::POLL;
use crate::rpc::Redis;

/// Hold keys per `MGET`.
const BATCH: usize = 1000;

/// The entries a client holds, and whether their poll runs.
#[derive(Clone, Default)]
pub(crate) struct HeldPoll {
    inner: Arc<Mutex<Registry>>,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    watched: HashMap<u64, Watched>,
    /// The poll task runs (it ends when nothing is watched).
    running: bool,
}

struct Watched {
    hold_key: String,
    member: String,
    gone: oneshot::Sender<()>,
}

/// Stops watching an entry however its wait ends.
struct Unwatch {
    inner: Arc<Mutex<Registry>>,
    id: u64,
}

impl Drop for Unwatch {
    fn drop(&mut self) {
        self.inner.lock().watched.remove(&self.id);
    }
}

impl Redis {
    /// Resolves once the client's poll sees `hold_key` no longer holding
    /// `member` (deleted, expired, or another member's); on the runtime.
    pub(crate) async fn held_gone(&self, hold_key: &str, member: &str, timeout: Duration) {
        let inner = &self.held.inner;
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut r = inner.lock();
            let id = r.next_id;
            r.next_id += 1;
            r.watched.insert(
                id,
                Watched {
                    hold_key: hold_key.to_owned(),
                    member: member.to_owned(),
                    gone: tx,
                },
            );
            if !r.running {
                r.running = true;
                tokio::spawn(poll(inner.clone(), self.clone(), timeout));
            }
            id
        };
        let _unwatch = Unwatch {
            inner: inner.clone(),
            id,
        };
        if rx.await.is_err() {
            // The poll task went with the runtime: nothing was seen.
            std::future::pending::<()>().await;
        }
    }
}

/// Every [`POLL`] while anything is watched: read every watched hold key
/// and tell the entries whose key no longer holds their member.
async fn poll(inner: Arc<Mutex<Registry>>, redis: Redis, timeout: Duration) {
    loop {
        tokio::time::sleep(POLL).await;
        let watched: Vec<(u64, String, String)> = {
            let mut r = inner.lock();
            if r.watched.is_empty() {
                r.running = false;
                return;
            }
            r.watched
                .iter()
                .map(|(id, w)| (*id, w.hold_key.clone(), w.member.clone()))
                .collect()
        };
        for batch in watched.chunks(BATCH) {
            let mut mget = redis::cmd("MGET");
            for (_, hold_key, _) in batch {
                mget.arg(hold_key);
            }
            let values: Vec<Option<String>> =
                match redis.read("poll the held entries", timeout, mget).await {
                    Ok(values) => values,
                    Err(e) => {
                        log::debug!("poll of {} held entries failed: {e}", batch.len());
                        continue;
                    }
                };
            let mut r = inner.lock();
            for ((id, _, member), value) in batch.iter().zip(values) {
                if value.as_deref() != Some(member.as_str()) {
                    if let Some(w) = r.watched.remove(id) {
                        let _ = w.gone.send(());
                    }
                }
            }
        }
    }
}
