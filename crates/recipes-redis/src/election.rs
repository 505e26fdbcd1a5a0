//! The Redis election — and the latch and the selector, which campaign in
//! it with their id as the value: the mutex's queue with values. The win
//! is the mutex's (the lock key `SET NX`, the fence minted in the same
//! script), so a term's fence follows every write of the previous term;
//! a proclaim is a fenced write of our value.

use std::future::Future;
use std::time::Duration;

use recipes_core::store::{ElectionStore, LeaderWatch, QueueElection};
use recipes_core::{Client, LeaderInfo, LeaderObserver, Result};
use tokio::time::Instant;

use crate::client::RedisClient;
use crate::contend::message_or;
use crate::lock::{RedisEntry, RedisLock};
use crate::mutex::NameHandle;
use crate::surface::read_contenders;

/// An election in Redis; see [`recipes_core::Election`] for the API and
/// what holds under pause and partition. A mutex and an election on one
/// name are one queue. Made by
/// [`Client::election`](crate::Client::election).
pub type Election = recipes_core::Election<RedisElection>;

/// A won Redis election; see [`recipes_core::Leadership`].
pub type Leadership = recipes_core::Leadership<RedisLock>;

/// A leader latch on a Redis election (the id as the value); see
/// [`recipes_core::LeaderLatch`]. Made by
/// [`Client::leader_latch`](crate::Client::leader_latch).
pub type LeaderLatch = recipes_core::LeaderLatch<RedisElection>;

/// Runs a closure while this participant leads a Redis election (the id
/// as the value); see [`recipes_core::LeaderSelector`]. Made by
/// [`Client::leader_selector`](crate::Client::leader_selector).
pub type LeaderSelector = recipes_core::LeaderSelector<RedisElection>;

/// The Redis election backend: core's election over this client's verbs
/// (below); use it through [`Election`], [`LeaderLatch`] or
/// [`LeaderSelector`].
pub type RedisElection = QueueElection<RedisClient>;

/// An election's queue keys, its name checked, as
/// [`ElectionStore::Candidacy`].
#[derive(Debug, Clone)]
pub struct RedisCandidacy(NameHandle);

impl ElectionStore for RedisClient {
    type Candidacy = RedisCandidacy;

    fn candidacy(&self, name: &str, _selector: bool) -> Result<RedisCandidacy> {
        NameHandle::new(self.clone(), "election", name).map(RedisCandidacy)
    }

    fn campaign(
        &self,
        candidacy: &RedisCandidacy,
        value: Vec<u8>,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Option<RedisLock>>> + Send + 'static {
        let this = candidacy.0.clone();
        async move {
            let Some(a) = this.contend(&value, deadline).await? else {
                return Ok(None);
            };
            RedisEntry::held(this.client.clone(), a, "leadership")
                .await
                .map(Some)
        }
    }

    fn candidates(&self, candidacy: &RedisCandidacy) -> Result<Vec<LeaderInfo>> {
        let queue = self.contenders(&candidacy.0.name)?;
        Ok(queue.into_iter().map(LeaderInfo::from).collect())
    }

    /// Resigning retries until the entry is removed or the session is
    /// lost, which its deadline bounds by a TTL; one more RPC timeout for
    /// the removal in flight and one for the latch's last step.
    fn election_close_timeout(&self) -> Duration {
        self.leases().lease_span() + 2 * self.rpc_timeout()
    }

    /// A subscription to the queue's going entries, re-read on each
    /// message and every poll.
    fn observe(&self, candidacy: &RedisCandidacy) -> Result<LeaderObserver> {
        let watch = Following {
            handle: candidacy.0.clone(),
            stream: None,
        };
        recipes_core::store::follow_leader(self.runtime(), self.rpc_timeout(), watch)
    }
}

/// The observer's side: the subscription and the read.
struct Following {
    handle: NameHandle,
    stream: Option<redis::aio::PubSubStream>,
}

impl LeaderWatch for Following {
    async fn look(&mut self) -> Result<Option<(LeaderInfo, i64)>> {
        let (client, queue) = (&self.handle.client, &self.handle.queue);
        let (redis, timeout) = (client.redis()?, client.rpc_timeout());
        if self.stream.is_none() {
            let channel = queue.wake_channel();
            self.stream = Some(crate::contend::subscribe(&redis, &channel, timeout).await?);
        }
        let first = read_contenders(&redis, queue, timeout)
            .await?
            .into_iter()
            .next();
        Ok(first.map(|c| (LeaderInfo::from(c), 0)))
    }

    /// A message, or the next poll: a leader whose session expired has no
    /// one to publish its going.
    async fn changed(&mut self) -> Result<()> {
        let Some(stream) = self.stream.as_mut() else {
            return Ok(());
        };
        let changed = message_or(stream, || async { Ok(true) }).await;
        if changed.is_err() {
            self.stream = None;
        }
        changed
    }
}
