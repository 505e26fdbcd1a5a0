//! Reading and following an election's leader: the candidates in create
//! order, the leader (the oldest candidate), and [`LeaderObserver`], which
//! follows a synced watch on the prefix and reads the leader after every
//! change.

use std::time::Duration;

use etcd_client::{EventType, GetOptions, SortOrder, SortTarget};
use recipes_core::{LeaderInfo, LeaderObserver, LeaderWatch, Result};

use crate::client::EtcdClient;
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
        let watch = Watch {
            client: self.client().clone(),
            prefix: self.key_prefix().to_owned(),
            watch: None,
        };
        let client = self.client();
        recipes_core::follow_leader(client.runtime(), client.rpc_timeout(), watch)
    }
}

/// A synced watch on the election's prefix, and the reads after it.
struct Watch {
    client: EtcdClient,
    prefix: String,
    watch: Option<(etcd_client::Client, std::time::Duration, PrefixWatch)>,
}

impl LeaderWatch for Watch {
    async fn look(&mut self) -> Result<Option<(LeaderInfo, i64)>> {
        let (etcd, timeout) = match &self.watch {
            Some((etcd, timeout, _)) => (etcd.clone(), *timeout),
            None => {
                let session = self.client.live_session().await?;
                let (etcd, timeout) = (session.etcd()?, session.rpc_timeout());
                let watch = PrefixWatch::changes(&etcd, &self.prefix, timeout).await?;
                self.watch = Some((etcd.clone(), timeout, watch));
                (etcd, timeout)
            }
        };
        let leader = read_leader(&etcd, timeout, &self.prefix).await?;
        // A key is one lease's: its create revision tells its terms apart.
        Ok(leader.map(|c| (c.info, c.create_revision)))
    }

    async fn changed(&mut self) -> Result<()> {
        let Some((_, _, w)) = self.watch.as_mut() else {
            return Ok(());
        };
        loop {
            let reply = match w.next().await {
                Ok(reply) => reply,
                Err(e) => {
                    self.watch = None;
                    return Err(e);
                }
            };
            let relevant = reply.events().iter().any(|ev| {
                matches!(ev.event_type(), EventType::Put | EventType::Delete)
                    && ev
                        .kv()
                        .is_some_and(|kv| is_contender(&self.prefix, kv.key()))
            });
            if relevant {
                return Ok(());
            }
        }
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
