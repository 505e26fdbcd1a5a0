//! A *synced* watch on a prefix on a stream of its own: an election
//! observer's, which hears every change (a proclaim is a put). The
//! recipes' own waits and loss watches share the client's one stream
//! instead (`hub`).
//!
//! etcd serves a watch that starts at a past revision from its "unsynced"
//! loop, which runs every 100 ms; a watch started without a revision is
//! synced and hears of a change at once. It only sees what happens after
//! it exists, so the protocol is: start the watch, wait for the server's
//! `created` reply, then read — whatever changes after the read, the
//! watch reports.

use std::time::Duration;

use etcd_client::{WatchFilterType, WatchOptions, WatchResponse, WatchStream};
use recipes_core::store::within;
use recipes_core::{Error, Result};

use crate::rpc::from_etcd;

/// A synced watch on every key under a prefix.
#[derive(Debug)]
pub(crate) struct Watch {
    stream: WatchStream,
    what: String,
}

impl Watch {
    /// Watch every change under `prefix` from now on (once this returns,
    /// at most `timeout` later).
    pub(crate) async fn prefix(
        etcd: &etcd_client::Client,
        prefix: &str,
        timeout: Duration,
    ) -> Result<Watch> {
        Watch::open(etcd, prefix, WatchOptions::new().with_prefix(), timeout).await
    }

    /// Watch every change of the one key `key` from now on (once this
    /// returns, at most `timeout` later).
    pub(crate) async fn key(
        etcd: &etcd_client::Client,
        key: &str,
        timeout: Duration,
    ) -> Result<Watch> {
        Watch::open(etcd, key, WatchOptions::new(), timeout).await
    }

    /// Watch the puts under `prefix` after revision `rev` (from etcd's
    /// history: no put after a read at `rev` is missed).
    pub(crate) async fn puts_after(
        etcd: &etcd_client::Client,
        prefix: &str,
        rev: i64,
        timeout: Duration,
    ) -> Result<Watch> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_filters([WatchFilterType::NoDelete])
            .with_start_revision(rev + 1);
        Watch::open(etcd, prefix, options, timeout).await
    }

    /// Watch every change of the one key `key` after revision `rev`
    /// (from etcd's history: no change after a read at `rev` is missed;
    /// synced at once when nothing was written since).
    pub(crate) async fn key_after(
        etcd: &etcd_client::Client,
        key: &str,
        rev: i64,
        timeout: Duration,
    ) -> Result<Watch> {
        let options = WatchOptions::new().with_start_revision(rev + 1);
        Watch::open(etcd, key, options, timeout).await
    }

    async fn open(
        etcd: &etcd_client::Client,
        prefix: &str,
        options: WatchOptions,
        timeout: Duration,
    ) -> Result<Watch> {
        let opened = async {
            let mut etcd = etcd.clone();
            let stream = etcd
                .watch(prefix, Some(options))
                .await
                .map_err(|e| from_etcd("start a watch", e))?;
            let mut watch = Watch {
                stream,
                what: prefix.to_owned(),
            };
            while !watch.next().await?.created() {}
            Ok(watch)
        };
        within("start a watch", timeout, opened).await
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
}
