//! *Synced* watches: on our key, on the key ahead of it, on a prefix.
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
//! A [`Watch`] is one stream with one watch: our own key (its deletion is
//! loss, while waiting and while held), or every key under a prefix (a
//! semaphore waiter's permit keys, an election's candidates for an
//! observer). A [`WatchSet`] adds the contender just ahead of ours, whose
//! deletion is our cue to read again.

use std::time::Duration;

use etcd_client::{EventType, WatchFilterType, WatchOptions, WatchResponse, WatchStream};
use recipes_core::{within, Error, Result};

use crate::rpc::from_etcd;

/// A synced watch on one key, or on every key under a prefix.
#[derive(Debug)]
pub(crate) struct Watch {
    stream: WatchStream,
    what: String,
    synced_at: i64,
}

impl Watch {
    /// Watch the deletion of `key` from now on; returns once the server
    /// confirmed, at most `timeout` later.
    pub(crate) async fn key(
        etcd: &etcd_client::Client,
        key: &[u8],
        timeout: Duration,
    ) -> Result<Watch> {
        Watch::open(etcd, key, deletions(), timeout).await
    }

    /// Watch every change under `prefix` — or only deletions — from now on
    /// (once this returns).
    pub(crate) async fn prefix(
        etcd: &etcd_client::Client,
        prefix: &str,
        deletions_only: bool,
        timeout: Duration,
    ) -> Result<Watch> {
        let options = match deletions_only {
            true => deletions(),
            false => WatchOptions::new(),
        };
        Watch::open(etcd, prefix.as_bytes(), options.with_prefix(), timeout).await
    }

    /// Start a watch of `key` with `options` on a new stream and wait for
    /// the server's `created` reply, at most `timeout`: from then on the
    /// watch is synced, and reports every change after the reply's header
    /// revision.
    async fn open(
        etcd: &etcd_client::Client,
        key: &[u8],
        options: WatchOptions,
        timeout: Duration,
    ) -> Result<Watch> {
        let opened = async {
            let mut etcd = etcd.clone();
            let stream = etcd
                .watch(key, Some(options))
                .await
                .map_err(|e| from_etcd("start a watch", e))?;
            let mut watch = Watch {
                stream,
                what: String::from_utf8_lossy(key).into_owned(),
                synced_at: i64::MAX,
            };
            loop {
                let reply = watch.next().await?;
                if reply.created() {
                    watch.synced_at = reply.header().map_or(i64::MAX, |h| h.revision());
                    return Ok(watch);
                }
            }
        };
        within("start a watch", timeout, opened).await
    }

    /// The store revision when the watch was created: every change at a
    /// later revision is reported.
    pub(crate) fn synced_at(&self) -> i64 {
        self.synced_at
    }

    /// The next batch of changes. An error means the stream broke (or the
    /// server cancelled the watch): open another and read again.
    /// Cancel-safe.
    pub(crate) async fn next(&mut self) -> Result<WatchResponse> {
        let reply = match self.stream.message().await {
            Ok(Some(reply)) => reply,
            Ok(None) => return Err(Error::ConnectionLoss),
            Err(e) => return Err(from_etcd("watch", e)),
        };
        if reply.canceled() {
            return Err(Error::Backend {
                message: format!(
                    "etcd cancelled the watch on {}: {}",
                    self.what,
                    reply.cancel_reason()
                ),
                retryable: true,
                source: None,
            });
        }
        Ok(reply)
    }

    /// Resolves when a watched key is deleted. Cancel-safe.
    pub(crate) async fn deleted(&mut self) -> Result<()> {
        loop {
            let reply = self.next().await?;
            let events = reply.events();
            if events.iter().any(|ev| ev.event_type() == EventType::Delete) {
                return Ok(());
            }
        }
    }
}

/// Deletions only.
fn deletions() -> WatchOptions {
    WatchOptions::new().with_filters([WatchFilterType::NoPut])
}

/// Which watched key was deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// Our own key.
    Ours,
    /// The contender ahead of ours.
    Ahead,
}

/// The watch on our key, and the one on the key ahead of it once we
/// waited for one.
#[derive(Debug)]
pub(crate) struct WatchSet {
    ours: Watch,
    ahead: Option<(Vec<u8>, Watch)>,
}

impl WatchSet {
    /// Watch `ours` for deletion from now on; returns once the server
    /// confirmed, at most `timeout` later.
    pub(crate) async fn open(
        etcd: &etcd_client::Client,
        ours: &str,
        timeout: Duration,
    ) -> Result<WatchSet> {
        let ours = Watch::key(etcd, ours.as_bytes(), timeout).await?;
        Ok(WatchSet { ours, ahead: None })
    }

    /// The watch on our key, from [`Watch::synced_at`] on.
    pub(crate) fn into_ours(self) -> Watch {
        self.ours
    }

    /// What is ahead of ours being watched.
    pub(crate) fn ahead(&self) -> Option<&[u8]> {
        self.ahead.as_ref().map(|(key, _)| key.as_slice())
    }

    /// Watch what is ahead of ours (`ahead` names it) with `watch`,
    /// instead of the previous one.
    pub(crate) fn set_ahead(&mut self, ahead: Vec<u8>, watch: Watch) {
        self.ahead = Some((ahead, watch));
    }

    /// Resolves when a watched key is deleted. An error means a stream
    /// broke: open another and read again. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Result<Gone> {
        let ahead = async {
            match self.ahead.as_mut() {
                Some((_, watch)) => watch.deleted().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = self.ours.deleted() => r.map(|()| Gone::Ours),
            r = ahead => r.map(|()| Gone::Ahead),
        }
    }
}
