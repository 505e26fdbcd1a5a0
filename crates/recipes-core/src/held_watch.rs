//! Following a held entry (a key, a node) until it is deleted: its deletion
//! is loss. The store's watch is opened again, and the entry read again,
//! whenever it breaks.

use std::future::Future;

use crate::store::{Backoff, LossTrigger};
use crate::{LossReason, Result};

/// How one held entry is watched in its store.
pub trait EntryWatcher: Send + Sync {
    /// One watch of the entry.
    type Watch: Send;

    /// A new watch on the entry, then a read of it, so that a deletion
    /// before the watch existed is seen too: `None` when it is gone.
    fn watch(&self) -> impl Future<Output = Result<Option<Self::Watch>>> + Send;

    /// Resolves when the entry is deleted; an error when the watch broke.
    fn deleted(watch: &mut Self::Watch) -> impl Future<Output = Result<()>> + Send;
}

/// Watch the entry `holder` until it is deleted, then fire `trigger` with
/// [`LossReason::Deleted`] and return `true`; return `false` once `trigger`
/// fired otherwise (released, or the session lost). Starts with
/// `handed_over` when the acquisition's watch covers the entry since the
/// confirming read.
pub async fn watch_held<W: EntryWatcher>(
    watcher: &W,
    label: &str,
    holder: &str,
    mut handed_over: Option<W::Watch>,
    trigger: &LossTrigger,
) -> bool {
    let watching = async {
        let mut backoff = Backoff::RETRY;
        loop {
            let mut watch = match handed_over.take() {
                Some(w) => w,
                // Boxed: a held entry's task waits in `deleted` nearly
                // all its life, and a request's future (several KiB)
                // inline would make every held entry's task that large.
                None => match Box::pin(watcher.watch()).await {
                    Ok(Some(w)) => {
                        backoff.reset();
                        w
                    }
                    Ok(None) => return "is gone",
                    Err(e) => {
                        log::debug!("[{label}] watch on {holder} failed: {e}");
                        backoff.pause().await;
                        continue;
                    }
                },
            };
            match W::deleted(&mut watch).await {
                Ok(()) => return "was deleted",
                Err(e) => log::debug!("[{label}] watch on {holder} broke: {e}"),
            }
        }
    };
    // Released, or the session lost: the watch has nothing left to say.
    let ended = trigger.signal();
    tokio::select! {
        _ = ended.fired() => false,
        why = watching => {
            if trigger.fire(LossReason::Deleted) {
                log::info!("[{label}] {holder} {why}: lost");
            }
            true
        }
    }
}
