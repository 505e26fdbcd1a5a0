//! The PostgreSQL election — and the latch and the selector, which
//! campaign in it with their id as the value: the mutex's queue, with the
//! candidate's value in its row. The win's fence is the confirm's bump of
//! the name's counter (after every write of the previous term, which held
//! the row in share mode); a proclaim updates our row's value, fenced like
//! any write.

use std::future::Future;
use std::time::Duration;

use recipes_core::store::{ElectionBackend, LeaderWatch, Runtime};
use recipes_core::{LeaderInfo, LeaderObserver, Result};
use tokio::time::Instant;

use crate::client::PgClient;
use crate::entry::PgEntry;
use crate::held::PgLock;
use crate::listen::{next, Subscription};
use crate::mutex::NameHandle;
use crate::surface::read_contenders;

/// An election in PostgreSQL (candidates' rows under the name, holding
/// their values); see [`recipes_core::Election`] for the API and what
/// holds under pause and partition. Made by
/// [`Client::election`](crate::Client::election). A mutex and an election
/// on one name share one queue.
pub type Election = recipes_core::Election<PgElection>;

/// A won election; see [`recipes_core::Leadership`].
pub type Leadership = recipes_core::Leadership<PgLock>;

/// A leader latch on an election (the id as the value); see
/// [`recipes_core::LeaderLatch`].
pub type LeaderLatch = recipes_core::LeaderLatch<PgElection>;

/// Runs a closure while this participant leads an election (the id as the
/// value); see [`recipes_core::LeaderSelector`].
pub type LeaderSelector = recipes_core::LeaderSelector<PgElection>;

/// The PostgreSQL election backend; use it through [`Election`],
/// [`LeaderLatch`] or [`LeaderSelector`].
#[derive(Debug, Clone)]
pub struct PgElection(NameHandle);

impl PgElection {
    pub(crate) fn new(client: PgClient, name: &str) -> Result<PgElection> {
        NameHandle::new(client, "election", name).map(PgElection)
    }
}

impl ElectionBackend for PgElection {
    type Leadership = PgLock;

    fn name(&self) -> &str {
        &self.0.name
    }

    fn runtime(&self) -> &Runtime {
        self.0.client.runtime()
    }

    fn campaign_async(
        &self,
        value: Vec<u8>,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Option<PgLock>>> + Send + 'static {
        let this = self.0.clone();
        async move {
            let won = this.contend(&value, deadline).await?;
            Ok(won.map(|a| {
                log::info!(
                    "[{}] {} leads (fence {})",
                    a.ticket.session.label(),
                    this.name,
                    a.fence
                );
                PgEntry::held(this.client.clone(), &this.name, a, false)
            }))
        }
    }

    fn candidates(&self) -> Result<Vec<LeaderInfo>> {
        let (client, name) = (self.0.client.clone(), self.0.name.clone());
        self.0.client.call("list candidates", async move {
            let all = read_contenders(&client, &name).await?;
            Ok(all.into_iter().map(LeaderInfo::from).collect())
        })
    }

    /// A resign retries for a session's TTL at most; one RPC timeout more
    /// covers the one in flight, another the latch's last step.
    fn close_timeout(&self) -> Duration {
        self.0.client.leases().lease_span() + 2 * self.0.client.rpc_timeout()
    }

    /// The name's channel, and a look every poll interval (a leader whose
    /// session expired sends nothing).
    fn observe(&self) -> Result<LeaderObserver> {
        let watch = Watch {
            handle: self.0.clone(),
            heard: None,
        };
        let (rt, timeout) = (self.0.client.runtime(), self.0.client.rpc_timeout());
        recipes_core::store::follow_leader(rt, timeout, watch)
    }
}

/// What an observer follows.
struct Watch {
    handle: NameHandle,
    heard: Option<Subscription>,
}

impl LeaderWatch for Watch {
    async fn look(&mut self) -> Result<Option<(LeaderInfo, i64)>> {
        let (client, name) = (&self.handle.client, &self.handle.name);
        if self.heard.is_none() {
            match client.listener().subscribe(name).await {
                Ok(s) => self.heard = Some(s),
                Err(e) => log::debug!("[{name}] observer not listening ({e}); polling"),
            }
        }
        let first = read_contenders(client, name).await?.into_iter().next();
        Ok(first.map(|c| {
            let term = c.created;
            (LeaderInfo::from(c), term)
        }))
    }

    async fn changed(&mut self) -> Result<()> {
        let poll = self.handle.client.poll_interval();
        tokio::select! {
            () = tokio::time::sleep(poll) => {}
            _ = next(&mut self.heard) => {}
        }
        Ok(())
    }
}
