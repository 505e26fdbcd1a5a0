//! Reading and following an election's candidates: in create order, the
//! leader (the oldest), and the watch behind core's
//! [`follow_leader`](recipes_core::store::follow_leader), which follows a synced
//! watch on the prefix and reads the leader after every change.

use std::time::Duration;

use etcd_client::{EventType, KeyValue};
use recipes_core::store::LeaderWatch;
use recipes_core::{Contender, LeaderInfo, Result};

use crate::client::EtcdClient;
use crate::names::is_contender;
use crate::rpc::retrying_get;
use crate::rw_queue::{everything, rw_contenders};
use crate::watch::Watch;

/// A synced watch on the election's prefix, and the reads after it.
pub(crate) struct Following {
    pub(crate) client: EtcdClient,
    pub(crate) prefix: String,
    pub(crate) watch: Option<Watch>,
}

impl LeaderWatch for Following {
    async fn look(&mut self) -> Result<Option<(LeaderInfo, i64)>> {
        let (etcd, timeout) = (self.client.leases().store()?, self.client.rpc_timeout());
        if self.watch.is_none() {
            let watch = Watch::prefix(&etcd, &self.prefix, timeout).await?;
            self.watch = Some(watch);
        }
        let leader = read_candidates(&etcd, timeout, &self.prefix)
            .await?
            .into_iter()
            .next();
        // A key is one lease's: its create revision tells its terms apart.
        Ok(leader.map(|c| (c.clone().into(), c.created)))
    }

    async fn changed(&mut self) -> Result<()> {
        let Some(w) = self.watch.as_mut() else {
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

fn contender(kv: &KeyValue) -> Contender {
    Contender {
        holder: String::from_utf8_lossy(kv.key()).into_owned(),
        created: kv.create_revision(),
        value: kv.value().to_vec(),
        role: None,
    }
}

/// The contenders under `prefix` (keys exactly one level below it), oldest
/// first: the first one holds or leads. One linearizable read.
pub(crate) async fn read_candidates(
    etcd: &etcd_client::Client,
    timeout: Duration,
    prefix: &str,
) -> Result<Vec<Contender>> {
    let kvs = read_all(etcd, timeout, prefix).await?;
    Ok(candidates(&kvs, prefix))
}

fn candidates(kvs: &[KeyValue], prefix: &str) -> Vec<Contender> {
    let kvs = kvs.iter().filter(|kv| is_contender(prefix, kv.key()));
    kvs.map(contender).collect()
}

/// Every key under `prefix`, oldest first. One linearizable read.
async fn read_all(
    etcd: &etcd_client::Client,
    timeout: Duration,
    prefix: &str,
) -> Result<Vec<KeyValue>> {
    let mut resp = retrying_get(etcd, timeout, prefix, Some(everything())).await?;
    Ok(resp.take_kvs())
}

/// The contenders under `prefix`: a read-write lock's readers and writers
/// when the name holds one (`rw_queue.rs`), else as [`read_candidates`].
pub(crate) async fn read_queue(
    etcd: &etcd_client::Client,
    timeout: Duration,
    prefix: &str,
) -> Result<Vec<Contender>> {
    let kvs = read_all(etcd, timeout, prefix).await?;
    Ok(rw_contenders(&kvs, prefix).unwrap_or_else(|| candidates(&kvs, prefix)))
}
