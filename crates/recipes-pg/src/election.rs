//! The PostgreSQL election — and the latch and the selector, which
//! campaign in it with their id as the value: the mutex's queue, with the
//! candidate's value in its row. The win's fence is the confirm's bump of
//! the name's counter (after every write of the previous term, which held
//! the row in share mode); a proclaim updates our row's value, fenced like
//! any write.

use std::future::Future;
use std::time::Duration;

use recipes_core::store::{ElectionStore, LeaderWatch, QueueElection};
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

/// The PostgreSQL election backend: core's election over this client's
/// verbs (below); use it through [`Election`], [`LeaderLatch`] or
/// [`LeaderSelector`].
pub type PgElection = QueueElection<PgClient>;

/// An election's name, checked, as [`ElectionStore::Candidacy`].
#[derive(Debug, Clone)]
pub struct PgCandidacy(NameHandle);

impl ElectionStore for PgClient {
    type Candidacy = PgCandidacy;

    fn candidacy(&self, name: &str, _selector: bool) -> Result<PgCandidacy> {
        NameHandle::new(self.clone(), "election", name).map(PgCandidacy)
    }

    fn campaign(
        &self,
        candidacy: &PgCandidacy,
        value: Vec<u8>,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Option<PgLock>>> + Send + 'static {
        let this = candidacy.0.clone();
        async move {
            let won = this.contend(&value, deadline).await?;
            Ok(won.map(|a| PgEntry::held(this.client.clone(), &this.name, a, false)))
        }
    }

    fn candidates(&self, candidacy: &PgCandidacy) -> Result<Vec<LeaderInfo>> {
        let (client, name) = (self.clone(), candidacy.0.name.clone());
        self.call("list candidates", async move {
            let all = read_contenders(&client, &name).await?;
            Ok(all.into_iter().map(LeaderInfo::from).collect())
        })
    }

    /// A resign retries for a session's TTL at most; one RPC timeout more
    /// covers the one in flight, another the latch's last step.
    fn election_close_timeout(&self) -> Duration {
        self.leases().lease_span() + 2 * self.rpc_timeout()
    }

    /// The name's channel, and a look every poll interval (a leader whose
    /// session expired sends nothing).
    fn observe(&self, candidacy: &PgCandidacy) -> Result<LeaderObserver> {
        let watch = Watch {
            handle: candidacy.0.clone(),
            heard: None,
        };
        recipes_core::store::follow_leader(self.runtime(), self.rpc_timeout(), watch)
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
