//! The leader election glued to any store once, as the queue locks are
//! (`queue_lock.rs`): a store supplies its election
//! verbs ([`ElectionStore`]: check a name and pick its layout, campaign
//! with a value, list the candidates, follow the leader) and
//! [`QueueElection`] is the [`ElectionBackend`] of every store, so of
//! [`Election`](crate::Election), [`LeaderLatch`](crate::LeaderLatch) and
//! [`LeaderSelector`](crate::LeaderSelector). A campaign is a place in the
//! name's queue held by the first candidate (a latch's rule, one holder:
//! [`Rule::Latch`](crate::engine::Rule::Latch), or the mutex's where a
//! mutex and an election share one queue); what waits, backs off and
//! cleans up is the engine, nothing in a store's verbs decides or loops.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use crate::backend::{ElectionBackend, FencedLease, LeaderInfo, LeadershipLease};
use crate::election::LeaderObserver;
use crate::engine::until_stopped;
use crate::error::Result;
use crate::loss::LossSignal;
use crate::queue_lock::LockStore;
use crate::runtime::Runtime;

/// A store's verbs for the leader election: what a backend implements,
/// once, for the election, the latch and the selector. A won campaign
/// holds the store's lock lease ([`LockStore::Lease`]), a leadership.
pub trait ElectionStore: LockStore<Lease: LeadershipLease> {
    /// An election's checked name, with its layout and whatever the store
    /// keeps per handle (a handle's turn queue). Clones are one handle.
    type Candidacy: Clone + Send + Sync + fmt::Debug + 'static;

    /// Check `name` as an election's before anything is written, and pick
    /// its layout. `selector`: for a
    /// [`LeaderSelector`](crate::LeaderSelector), which Curator queues
    /// under its mutex's node names on ZooKeeper; elsewhere the same.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) saying
    /// what to change.
    fn candidacy(&self, name: &str, selector: bool) -> Result<Self::Candidacy>;

    /// Take a place in the election's queue with `value` (the leader's
    /// published value) and hold it once first, waiting until `deadline`
    /// (`None`: as long as it takes); `Ok(None)` when the deadline passed
    /// first. A future for the runtime; everything it created is removed
    /// on every way out but a win, its being dropped included.
    fn campaign(
        &self,
        candidacy: &Self::Candidacy,
        value: Vec<u8>,
        deadline: Option<tokio::time::Instant>,
    ) -> impl Future<Output = Result<Option<Self::Lease>>> + Send + 'static;

    /// Every candidate of the election, first in line first, with its
    /// value (a blocking snapshot).
    ///
    /// # Errors
    ///
    /// Backend errors.
    fn candidates(&self, candidacy: &Self::Candidacy) -> Result<Vec<LeaderInfo>>;

    /// How long a latch's `close` may wait for its term to end (see
    /// [`ElectionBackend::close_timeout`]).
    fn election_close_timeout(&self) -> Duration;

    /// The current leader: the first of the
    /// [`candidates`](ElectionStore::candidates) unless the store reads
    /// it more cheaply.
    ///
    /// # Errors
    ///
    /// Backend errors.
    fn leader(&self, candidacy: &Self::Candidacy) -> Result<Option<LeaderInfo>> {
        Ok(self.candidates(candidacy)?.into_iter().next())
    }

    /// Follow the election's leader (see [`ElectionBackend::observe`]).
    ///
    /// # Errors
    ///
    /// Backend errors if the watch or the first read failed.
    fn observe(&self, candidacy: &Self::Candidacy) -> Result<LeaderObserver>;
}

/// A named election of a store: the [`ElectionBackend`] of
/// [`Election`](crate::Election), [`LeaderLatch`](crate::LeaderLatch) and
/// [`LeaderSelector`](crate::LeaderSelector) on every store.
#[derive(Debug, Clone)]
pub struct QueueElection<S: ElectionStore> {
    store: S,
    name: String,
    candidacy: S::Candidacy,
}

impl<S: ElectionStore> QueueElection<S> {
    /// The election `name` on `store`, its name checked; `selector` as for
    /// [`ElectionStore::candidacy`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a
    /// name the store refuses.
    pub fn new(store: &S, name: &str, selector: bool) -> Result<QueueElection<S>> {
        Ok(QueueElection {
            candidacy: store.candidacy(name, selector)?,
            store: store.clone(),
            name: name.to_owned(),
        })
    }
}

impl<S: ElectionStore> ElectionBackend for QueueElection<S> {
    type Leadership = S::Lease;

    fn name(&self) -> &str {
        &self.name
    }

    fn runtime(&self) -> &Runtime {
        self.store.runtime()
    }

    /// The store's campaign on the heap: the latch awaits this inside its
    /// task, and with the store's future inline the task's layout nested
    /// past the compiler's query depth (128). One allocation a term. The
    /// engine in it sees `stop` ([`until_stopped`]).
    fn campaign_async(
        &self,
        value: Vec<u8>,
        deadline: Option<tokio::time::Instant>,
        stop: Option<LossSignal>,
    ) -> impl Future<Output = Result<Option<S::Lease>>> + Send + 'static {
        let campaign = self.store.campaign(&self.candidacy, value, deadline);
        let campaign = Box::pin(until_stopped(stop, campaign));
        let name = self.name.clone();
        async move {
            let won = campaign.await?;
            log_won(&name, won.as_ref());
            Ok(won)
        }
    }

    /// Boxed once, for the runtime's call (see
    /// [`Runtime::call_boxed`]); the win is logged on the caller's thread.
    fn campaign(
        &self,
        value: &[u8],
        deadline: Option<std::time::Instant>,
    ) -> Result<Option<S::Lease>> {
        let deadline = deadline.map(tokio::time::Instant::from_std);
        let campaign = Box::pin(
            self.store
                .campaign(&self.candidacy, value.to_vec(), deadline),
        );
        let won = self.runtime().call_boxed("campaign", None, campaign)?;
        log_won(&self.name, won.as_ref());
        Ok(won)
    }

    fn candidates(&self) -> Result<Vec<LeaderInfo>> {
        self.store.candidates(&self.candidacy)
    }

    fn close_timeout(&self) -> Duration {
        self.store.election_close_timeout()
    }

    fn leader(&self) -> Result<Option<LeaderInfo>> {
        self.store.leader(&self.candidacy)
    }

    fn observe(&self) -> Result<LeaderObserver> {
        self.store.observe(&self.candidacy)
    }
}

/// Log a won term of the election `name`: where its entry is, its fence.
fn log_won(name: &str, won: Option<&impl FencedLease>) {
    if let Some(lead) = won {
        log::info!("[{name}] {} leads (fence {})", lead.holder(), lead.token());
    }
}
