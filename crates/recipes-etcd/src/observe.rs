//! Reading and following an election's leader: the candidates in create
//! order, the leader (the oldest candidate), and [`LeaderObserver`], which
//! follows a synced watch on the prefix and reads the leader after every
//! change.

use std::time::Duration;

use crossbeam_channel::Sender;
use etcd_client::{EventType, GetOptions, SortOrder, SortTarget};
use recipes_core::{Backoff, LeaderInfo, LeaderObserver, Result};
use tokio::sync::oneshot;

use crate::contend::PAGE;
use crate::election::EtcdElection;
use crate::names::is_contender;
use crate::rpc::retrying;
use crate::watch::PrefixWatch;

impl EtcdElection {
    /// Follow the leader: the returned observer first receives the current
    /// leader (if any), then every change — a new leader, or a new value
    /// proclaimed by the leader. A moment without a leader is not reported.
    ///
    /// When this returns, a synced watch on the prefix is in place: no change
    /// after it is missed. The watch is opened again (and the leader read
    /// again) if its stream breaks, so changes in between are coalesced into
    /// the newest. The channel disconnects when the client closes; dropping
    /// the observer stops the watch.
    ///
    /// Under pause and partition: what the observer reports is what etcd
    /// said, late by however long the observer was cut off; it is no proof
    /// of leadership — only a [`Leadership`](crate::Leadership) is.
    ///
    /// # Errors
    ///
    /// Backend errors if the watch or the first read failed within the RPC
    /// timeout.
    pub fn observe(&self) -> Result<LeaderObserver> {
        let (client, prefix) = (self.client().clone(), self.key_prefix().to_owned());
        let (tx, rx) = crossbeam_channel::unbounded();
        let (stop, stopped) = oneshot::channel();
        let handle = client.runtime().handle().clone();
        self.client().call("observe the election", async move {
            let session = client.live_session().await?;
            let etcd = session.etcd()?;
            let timeout = session.rpc_timeout();
            drop(session);
            let watch = PrefixWatch::changes(&etcd, &prefix, timeout).await?;
            let mut last = None;
            publish(&etcd, &prefix, timeout, &tx, &mut last).await?;
            handle.spawn(async move {
                tokio::select! {
                    _ = stopped => {}
                    _ = follow(etcd, prefix, timeout, watch, tx, last) => {}
                }
            });
            Ok(())
        })?;
        Ok(LeaderObserver::new(rx, stop))
    }
}

/// A candidate key as read from etcd.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub(crate) info: LeaderInfo,
    pub(crate) create_revision: i64,
}

fn candidate(kv: &etcd_client::KeyValue) -> Candidate {
    Candidate {
        info: LeaderInfo {
            holder: String::from_utf8_lossy(kv.key()).into_owned(),
            value: kv.value().to_vec(),
        },
        create_revision: kv.create_revision(),
    }
}

/// The candidates under `prefix` (keys exactly one level below it), oldest
/// first: the first one leads. One linearizable read.
pub(crate) async fn read_candidates(
    etcd: &etcd_client::Client,
    timeout: Duration,
    prefix: &str,
) -> Result<Vec<Candidate>> {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let resp = retrying(&format!("read {prefix}"), timeout, || {
        let (mut etcd, options) = (etcd.clone(), options.clone());
        async move { etcd.get(prefix, Some(options)).await }
    })
    .await?;
    Ok(resp
        .kvs()
        .iter()
        .filter(|kv| is_contender(prefix, kv.key()))
        .map(candidate)
        .collect())
}

/// The leader under `prefix`: the oldest candidate key. Pages past nested
/// elections' keys, which do not count.
pub(crate) async fn read_leader(
    etcd: &etcd_client::Client,
    timeout: Duration,
    prefix: &str,
) -> Result<Option<Candidate>> {
    let mut from = 0;
    loop {
        let options = GetOptions::new()
            .with_prefix()
            .with_min_create_revision(from)
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(PAGE);
        let resp = retrying(&format!("read {prefix}"), timeout, || {
            let (mut etcd, options) = (etcd.clone(), options.clone());
            async move { etcd.get(prefix, Some(options)).await }
        })
        .await?;
        if let Some(kv) = resp.kvs().iter().find(|kv| is_contender(prefix, kv.key())) {
            return Ok(Some(candidate(kv)));
        }
        match resp.kvs().last() {
            // A key created before `from` while we paged would have a newer
            // revision: nothing is missed.
            Some(last) if resp.more() => from = last.create_revision() + 1,
            _ => return Ok(None),
        }
    }
}

/// What an observer last reported: the leader's key, term and value.
type Reported = Option<(String, i64, Vec<u8>)>;

/// Read the leader; send it if it differs from what was last reported.
async fn publish(
    etcd: &etcd_client::Client,
    prefix: &str,
    timeout: Duration,
    tx: &Sender<LeaderInfo>,
    last: &mut Reported,
) -> Result<()> {
    let Some(leader) = read_leader(etcd, timeout, prefix).await? else {
        return Ok(());
    };
    let now = (
        leader.info.holder.clone(),
        leader.create_revision,
        leader.info.value.clone(),
    );
    if last.as_ref() != Some(&now) {
        *last = Some(now);
        // The receiver lives in the observer, which stops this task when
        // dropped.
        let _ = tx.send(leader.info);
    }
    Ok(())
}

/// Follow the prefix: after each batch of changes to candidate keys, read
/// the leader again. A broken stream is opened again (then read).
async fn follow(
    etcd: etcd_client::Client,
    prefix: String,
    timeout: Duration,
    watch: PrefixWatch,
    tx: Sender<LeaderInfo>,
    mut last: Reported,
) {
    let mut watch = Some(watch);
    let mut backoff = Backoff::RETRY;
    loop {
        let mut w = match watch.take() {
            Some(w) => w,
            None => {
                let opened = match PrefixWatch::changes(&etcd, &prefix, timeout).await {
                    Ok(w) => publish(&etcd, &prefix, timeout, &tx, &mut last)
                        .await
                        .map(|()| w),
                    Err(e) => Err(e),
                };
                match opened {
                    Ok(w) => {
                        backoff.reset();
                        w
                    }
                    Err(e) => {
                        log::debug!("[prefix={prefix}] observer failed: {e}");
                        backoff.pause().await;
                        continue;
                    }
                }
            }
        };
        loop {
            let reply = match w.next().await {
                Ok(reply) => reply,
                Err(e) => {
                    log::debug!("[prefix={prefix}] observer watch broke: {e}");
                    break;
                }
            };
            let relevant = reply.events().iter().any(|ev| {
                matches!(ev.event_type(), EventType::Put | EventType::Delete)
                    && ev.kv().is_some_and(|kv| is_contender(&prefix, kv.key()))
            });
            if relevant {
                if let Err(e) = publish(&etcd, &prefix, timeout, &tx, &mut last).await {
                    log::debug!("[prefix={prefix}] observer read failed: {e}");
                    break;
                }
            }
        }
    }
}
