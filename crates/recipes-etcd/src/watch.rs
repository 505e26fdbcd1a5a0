//! *Synced* watches: on our key and the key ahead of it, and on a prefix.
//!
//! etcd serves a watch that starts at a past revision from its "unsynced"
//! loop, which runs every 100 ms: a waiter watching that way wakes up to
//! 100 ms after the key went (measured: Go's `concurrency.Mutex` manages
//! 30–40 contended acquisitions a second for this reason). A watch started
//! without a revision is synced and hears of a deletion at once. It only
//! sees what happens after it exists, so the protocol is: start the watch,
//! wait for the server's `created` reply, then read — whatever the read
//! still shows, the watch will report going.
//!
//! A [`WatchSet`] is one stream with two watches: our own key (its deletion
//! is loss, while waiting and while held) and the contender just ahead of
//! ours (its deletion is our cue to read again). A [`PrefixWatch`] follows
//! every key under a prefix: a semaphore waiter's permit keys, an
//! election's candidates for an observer.

use std::time::Duration;

use etcd_client::{EventType, WatchFilterType, WatchOptions, WatchResponse, WatchStream};
use recipes_core::{within, Error, Result};

use crate::rpc::from_etcd;

/// Start a watch of `key` with `options` on a new stream and wait for the
/// server's `created` reply, at most `timeout`: from then on the watch is
/// synced, and reports every change after the reply's header revision.
async fn open(
    etcd: &etcd_client::Client,
    key: &str,
    options: WatchOptions,
    timeout: Duration,
) -> Result<(WatchStream, WatchResponse)> {
    let opened = async {
        let mut etcd = etcd.clone();
        let mut stream = etcd
            .watch(key, Some(options))
            .await
            .map_err(|e| from_etcd("start a watch", e))?;
        loop {
            let reply = message(&mut stream).await?;
            if reply.canceled() {
                return Err(cancelled(key, &reply));
            }
            if reply.created() {
                return Ok((stream, reply));
            }
        }
    };
    within("start a watch", timeout, opened).await
}

/// Deletions only.
fn deletions() -> WatchOptions {
    WatchOptions::new().with_filters([WatchFilterType::NoPut])
}

async fn message(stream: &mut WatchStream) -> Result<WatchResponse> {
    match stream.message().await {
        Ok(Some(reply)) => Ok(reply),
        Ok(None) => Err(Error::ConnectionLoss),
        Err(e) => Err(from_etcd("watch", e)),
    }
}

fn cancelled(what: &str, reply: &WatchResponse) -> Error {
    Error::Backend {
        message: format!(
            "etcd cancelled the watch on {what}: {}",
            reply.cancel_reason()
        ),
        retryable: true,
        source: None,
    }
}

fn has_deletion(reply: &WatchResponse) -> bool {
    reply
        .events()
        .iter()
        .any(|ev| ev.event_type() == EventType::Delete)
}

/// Which watched key was deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// Our own key.
    Ours,
    /// The contender ahead of ours.
    Ahead,
}

/// A watch stream on our key, and optionally on the key ahead of it.
#[derive(Debug)]
pub(crate) struct WatchSet {
    stream: WatchStream,
    ours: i64,
    ahead: Option<(i64, Vec<u8>)>,
    synced_at: i64,
    // Deletions seen while waiting for another watch's `created` reply.
    ours_gone: bool,
    ahead_gone: bool,
}

impl WatchSet {
    /// Watch `ours` for deletion from now on; returns once the server
    /// confirmed, at most `timeout` later.
    pub(crate) async fn open(
        etcd: &etcd_client::Client,
        ours: &str,
        timeout: Duration,
    ) -> Result<WatchSet> {
        let (stream, created) = open(etcd, ours, deletions(), timeout).await?;
        Ok(WatchSet {
            stream,
            ours: created.watch_id(),
            ahead: None,
            synced_at: created.header().map(|h| h.revision()).unwrap_or(i64::MAX),
            ours_gone: false,
            ahead_gone: false,
        })
    }

    /// The store revision when the watch on our key was created: every
    /// deletion at a later revision is reported.
    pub(crate) fn synced_at(&self) -> i64 {
        self.synced_at
    }

    /// The key ahead of ours being watched.
    pub(crate) fn ahead(&self) -> Option<&[u8]> {
        self.ahead.as_ref().map(|(_, k)| k.as_slice())
    }

    /// Watch `key` as the contender ahead of ours (instead of the previous
    /// one); returns once the server confirmed. Not cancel-safe: a set
    /// whose call was dropped half-way must not be used again.
    pub(crate) async fn watch_ahead(&mut self, key: &[u8], timeout: Duration) -> Result<()> {
        let added = async {
            if let Some((id, _)) = self.ahead.take() {
                self.stream
                    .cancel(id)
                    .await
                    .map_err(|e| from_etcd("cancel a watch", e))?;
            }
            self.ahead_gone = false;
            self.stream
                .watch(key.to_vec(), Some(deletions()))
                .await
                .map_err(|e| from_etcd("start a watch", e))?;
            loop {
                let reply = message(&mut self.stream).await?;
                if reply.created() {
                    if reply.canceled() {
                        return Err(cancelled("the key ahead", &reply));
                    }
                    self.ahead = Some((reply.watch_id(), key.to_vec()));
                    return Ok(());
                }
                self.note(&reply)?;
            }
        };
        within("start a watch", timeout, added).await
    }

    /// Resolves when a watched key is deleted. An error means the stream
    /// broke: open another and read again. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Result<Gone> {
        loop {
            if std::mem::take(&mut self.ours_gone) {
                return Ok(Gone::Ours);
            }
            if std::mem::take(&mut self.ahead_gone) {
                return Ok(Gone::Ahead);
            }
            let reply = message(&mut self.stream).await?;
            self.note(&reply)?;
        }
    }

    /// Record what a reply says about our watches. Replies of cancelled
    /// watches (a previous key ahead) are ignored.
    fn note(&mut self, reply: &WatchResponse) -> Result<()> {
        let id = reply.watch_id();
        if id == self.ours {
            if reply.canceled() {
                return Err(cancelled("our key", reply));
            }
            self.ours_gone |= has_deletion(reply);
        } else if self.ahead.as_ref().is_some_and(|(ahead, _)| *ahead == id) {
            if reply.canceled() {
                return Err(cancelled("the key ahead", reply));
            }
            self.ahead_gone |= has_deletion(reply);
        }
        Ok(())
    }
}

/// A synced watch on every key under a prefix.
#[derive(Debug)]
pub(crate) struct PrefixWatch {
    stream: WatchStream,
    prefix: String,
}

impl PrefixWatch {
    /// Watch every change under `prefix` — or only deletions — from now on
    /// (once this returns).
    pub(crate) async fn open(
        etcd: &etcd_client::Client,
        prefix: &str,
        deletions_only: bool,
        timeout: Duration,
    ) -> Result<PrefixWatch> {
        let options = match deletions_only {
            true => deletions(),
            false => WatchOptions::new(),
        };
        let (stream, _) = open(etcd, prefix, options.with_prefix(), timeout).await?;
        Ok(PrefixWatch {
            stream,
            prefix: prefix.to_owned(),
        })
    }

    /// The next batch of changes. An error means the stream broke: open
    /// another and read again. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Result<WatchResponse> {
        let reply = message(&mut self.stream).await?;
        if reply.canceled() {
            return Err(cancelled(&self.prefix, &reply));
        }
        Ok(reply)
    }

    /// Resolves when a key under the prefix is deleted. Cancel-safe.
    pub(crate) async fn deleted(&mut self) -> Result<()> {
        while !has_deletion(&self.next().await?) {}
        Ok(())
    }
}
