//! *Synced* watches for the deletion of our key and of the key ahead of it.
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
//! One stream carries two watches: our own key (its deletion is loss, while
//! waiting and while held) and the contender just ahead of ours (its
//! deletion is our cue to read again).

use std::time::Duration;

use etcd_client::{EventType, WatchFilterType, WatchOptions, WatchResponse, WatchStream};
use recipes_core::{Error, Result};

use crate::error::from_etcd;

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

fn options() -> WatchOptions {
    WatchOptions::new().with_filters([WatchFilterType::NoPut])
}

fn broken(what: &str, reply: &WatchResponse) -> Error {
    Error::Backend {
        message: format!("etcd cancelled {what}: {}", reply.cancel_reason()),
        retryable: true,
        source: None,
    }
}

impl WatchSet {
    /// Watch `ours` for deletion from now on; returns once the server
    /// confirmed, at most `timeout` later.
    pub(crate) async fn open(
        etcd: &mut etcd_client::Client,
        ours: &str,
        timeout: Duration,
    ) -> Result<WatchSet> {
        let opened = async {
            let mut stream = etcd
                .watch(ours, Some(options()))
                .await
                .map_err(|e| from_etcd("start a watch", e))?;
            loop {
                match stream.message().await {
                    Ok(Some(reply)) if reply.canceled() => {
                        return Err(broken("a new watch", &reply))
                    }
                    Ok(Some(reply)) if reply.created() => {
                        let synced_at = reply.header().map(|h| h.revision()).unwrap_or(i64::MAX);
                        return Ok(WatchSet {
                            stream,
                            ours: reply.watch_id(),
                            ahead: None,
                            synced_at,
                            ours_gone: false,
                            ahead_gone: false,
                        });
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => return Err(Error::ConnectionLoss),
                    Err(e) => return Err(from_etcd("start a watch", e)),
                }
            }
        };
        within(timeout, "start a watch", opened).await
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
    /// one); returns once the server confirmed.
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
                .watch(key.to_vec(), Some(options()))
                .await
                .map_err(|e| from_etcd("start a watch", e))?;
            loop {
                let reply = self.message().await?;
                if reply.created() {
                    if reply.canceled() {
                        return Err(broken("a new watch", &reply));
                    }
                    self.ahead = Some((reply.watch_id(), key.to_vec()));
                    return Ok(());
                }
                self.note(&reply)?;
            }
        };
        within(timeout, "start a watch", added).await
    }

    /// Resolves when a watched key is deleted. An error means the stream
    /// broke: open another and read again.
    pub(crate) async fn next(&mut self) -> Result<Gone> {
        loop {
            if std::mem::take(&mut self.ours_gone) {
                return Ok(Gone::Ours);
            }
            if std::mem::take(&mut self.ahead_gone) {
                return Ok(Gone::Ahead);
            }
            let reply = self.message().await?;
            self.note(&reply)?;
        }
    }

    async fn message(&mut self) -> Result<WatchResponse> {
        match self.stream.message().await {
            Ok(Some(reply)) => Ok(reply),
            Ok(None) => Err(Error::ConnectionLoss),
            Err(e) => Err(from_etcd("watch", e)),
        }
    }

    /// Record what a reply says about our watches. Replies of cancelled
    /// watches (a previous key ahead) are ignored.
    fn note(&mut self, reply: &WatchResponse) -> Result<()> {
        let id = reply.watch_id();
        let deleted = reply
            .events()
            .iter()
            .any(|ev| ev.event_type() == EventType::Delete);
        if id == self.ours {
            if reply.canceled() {
                return Err(broken("the watch on our key", reply));
            }
            self.ours_gone |= deleted;
        } else if self.ahead.as_ref().is_some_and(|(ahead, _)| *ahead == id) {
            if reply.canceled() {
                return Err(broken("the watch on the key ahead", reply));
            }
            self.ahead_gone |= deleted;
        }
        Ok(())
    }
}

async fn within<T>(
    timeout: Duration,
    what: &str,
    fut: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| Error::Timeout {
            what: what.to_owned(),
            after: timeout,
        })?
}
