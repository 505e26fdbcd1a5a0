//! The traits a backend implements: one per recipe, free of any store's
//! vocabulary, so ZooKeeper, etcd and future stores (PostgreSQL advisory
//! locks, a single Redis node) plug into the same front end.
//!
//! The contract every backend keeps:
//!
//! - `acquire`/`campaign` with a deadline: `Ok(None)` when the deadline
//!   passed first, never an error for that; with no deadline they wait as
//!   long as it takes. An acquisition that times out, fails or is abandoned
//!   leaves nothing behind in the store.
//! - What they return is *held*: its loss signal fires the moment the lease
//!   may be gone.
//! - `release` blocks until the store confirmed; `release_in_background`
//!   never blocks (it is called from `Drop`) and retries on the backend's
//!   runtime.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use crate::election::LeaderObserver;
use crate::error::Result;
use crate::fence::FencingToken;
use crate::loss::{LossSignal, LossTrigger};
use crate::runtime::{Boxed, Runtime};

/// Something held under a lease: a lock, a permit, a leadership.
pub trait HeldLease: Send + 'static {
    /// Fires when the lease may be gone.
    fn loss_signal(&self) -> &LossSignal;

    /// Where it lives in the store: the lock node's path or the key.
    fn holder(&self) -> &str;

    /// Give it up and wait until the store confirmed.
    ///
    /// # Errors
    ///
    /// A backend error if the store could not be reached; the lease bounds
    /// how long the leftover blocks others.
    fn release(self) -> Result<()>
    where
        Self: Sized;

    /// Give it up without blocking: hand the release to the runtime, which
    /// retries it while the session lives.
    fn release_in_background(self)
    where
        Self: Sized;

    /// Give it up as a future for the client's runtime: what
    /// [`release`](HeldLease::release) waits for, for a caller that
    /// releases several leases of one client in one blocking call (a
    /// multi-lock's parts, all at once). The loss signal fires at once;
    /// the future ends within the RPC timeout, and an unconfirmed release
    /// goes on in the background as `release`'s does. `Err(self)`: this
    /// lease has no such future, and is to be released with `release`.
    ///
    /// # Errors
    ///
    /// `self`, untouched, as said.
    fn release_later(self) -> std::result::Result<Releasing, Self>
    where
        Self: Sized,
    {
        Err(self)
    }
}

/// A release handed over as a future ([`HeldLease::release_later`]).
pub struct Releasing {
    /// The client's runtime, where the future runs.
    pub runtime: Runtime,
    /// The release: `Ok` once the store confirmed it.
    pub future: Boxed<()>,
}

impl Releasing {
    /// The same release, with `kept` dropped only once it is done.
    pub(crate) fn keeping<K: Send + 'static>(self, kept: K) -> Releasing {
        let Releasing { runtime, future } = self;
        let future: Boxed<()> = Box::pin(async move {
            let done = future.await;
            drop(kept);
            done
        });
        Releasing { runtime, future }
    }
}

impl fmt::Debug for Releasing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Releasing").finish_non_exhaustive()
    }
}

/// A held lease that carries a fencing token ordered across holders.
pub trait FencedLease: HeldLease {
    /// The fencing token of this holding.
    fn token(&self) -> FencingToken;
}

/// A held leadership: fenced, and able to publish a value.
pub trait LeadershipLease: FencedLease {
    /// Publish a new value while leader (observers see it).
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) or
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) if leadership is gone.
    fn proclaim(&self, value: &[u8]) -> Result<()>;

    /// The trigger of this term's loss signal: firing it ends the term
    /// locally (a selector that closes tells its closure to stop).
    fn trigger(&self) -> &LossTrigger;

    /// Resign from a task on the client's runtime (where the blocking
    /// [`release`](HeldLease::release) must not be called): delete our
    /// entry, retrying until done or the session is lost.
    fn resign_async(self) -> impl Future<Output = ()> + Send
    where
        Self: Sized;
}

/// A distributed mutex.
pub trait MutexBackend: Send + Sync + 'static {
    /// What a successful acquisition holds.
    type Lease: FencedLease;

    /// The lock's name (path or key prefix).
    fn name(&self) -> &str;

    /// The client's runtime (its store names the metrics).
    fn runtime(&self) -> &Runtime;

    /// Acquire, waiting until `deadline` (`None`: as long as it takes).
    ///
    /// # Errors
    ///
    /// Backend errors; `Ok(None)` when the deadline passed first.
    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<Self::Lease>>;
}

/// A distributed read-write lock.
pub trait RwLockBackend: Send + Sync + 'static {
    /// What a successful acquisition of either side holds. Its
    /// [`token`](FencedLease::token): write tokens strictly increase across
    /// writers and are above every earlier reader's; a reader's is above
    /// every earlier writer's; a downgraded lease keeps its writer's.
    type Lease: FencedLease;

    /// The lock's name (path or key prefix).
    fn name(&self) -> &str;

    /// The client's runtime (its store names the metrics).
    fn runtime(&self) -> &Runtime;

    /// Acquire the `access` side, waiting until `deadline` (`None`: as long
    /// as it takes).
    ///
    /// # Errors
    ///
    /// Backend errors; `Ok(None)` when the deadline passed first.
    fn acquire(
        &self,
        access: crate::rw_lock::Access,
        deadline: Option<Instant>,
    ) -> Result<Option<Self::Lease>>;

    /// Turn a held write lease into a read lease that keeps the writer's
    /// place in the queue (no writer queued behind it gets in between) and
    /// its fencing token.
    ///
    /// # Errors
    ///
    /// Backend errors; then nothing is held: the write entry is removed
    /// (in the background if the store cannot be reached).
    fn downgrade(&self, write: Self::Lease) -> Result<Self::Lease>;
}

/// A distributed counting semaphore.
pub trait SemaphoreBackend: Send + Sync + 'static {
    /// What a successful acquisition holds.
    type Permit: HeldLease;

    /// The semaphore's name (path or key prefix).
    fn name(&self) -> &str;

    /// The client's runtime (its store names the metrics).
    fn runtime(&self) -> &Runtime;

    /// How many permits exist.
    fn permits(&self) -> u32;

    /// Acquire one permit, waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// Backend errors; `Ok(None)` when the deadline passed first.
    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<Self::Permit>>;
}

/// The current leader as observers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderInfo {
    /// Where the leader's entry lives (node path or key).
    pub holder: String,
    /// The value the leader published (its participant id by default).
    pub value: Vec<u8>,
}

/// A leader election: what the [`Election`](crate::Election) front end,
/// [`LeaderLatch`](crate::LeaderLatch) and
/// [`LeaderSelector`](crate::LeaderSelector) are built on, once for every
/// store.
pub trait ElectionBackend: Send + Sync + 'static {
    /// What a won campaign holds.
    type Leadership: LeadershipLease;

    /// The election's name (path or key prefix).
    fn name(&self) -> &str;

    /// The client's runtime, where campaigns run.
    fn runtime(&self) -> &Runtime;

    /// Campaign with `value` until leader, `deadline` or `stop`, as a
    /// future for the client's runtime. When `stop` fires (a latch or a
    /// selector closing), the campaign removes its entry and answers
    /// `Ok(None)` once the store confirmed it (or the session ended), so
    /// that no one lists it after; a term won at that moment is returned.
    /// Dropping the future abandons the campaign; its entry is then removed
    /// in the background.
    fn campaign_async(
        &self,
        value: Vec<u8>,
        deadline: Option<tokio::time::Instant>,
        stop: Option<LossSignal>,
    ) -> impl Future<Output = Result<Option<Self::Leadership>>> + Send + 'static;

    /// Campaign with `value` until leader or `deadline`, blocking.
    ///
    /// # Errors
    ///
    /// Backend errors; `Ok(None)` when the deadline passed first.
    fn campaign(
        &self,
        value: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Option<Self::Leadership>> {
        let deadline = deadline.map(tokio::time::Instant::from_std);
        let campaign = Box::pin(self.campaign_async(value.to_vec(), deadline, None));
        self.runtime().call_boxed("campaign", None, campaign)
    }

    /// Every candidate, first in line first (the first leads), with its
    /// value: a snapshot.
    ///
    /// # Errors
    ///
    /// Backend errors.
    fn candidates(&self) -> Result<Vec<LeaderInfo>>;

    /// How long a latch's `close` may wait for its term to end.
    fn close_timeout(&self) -> Duration;

    /// The current leader, if any: the first of the
    /// [`candidates`](ElectionBackend::candidates) unless the store reads it
    /// more cheaply.
    ///
    /// # Errors
    ///
    /// Backend errors.
    fn leader(&self) -> Result<Option<LeaderInfo>> {
        Ok(self.candidates()?.into_iter().next())
    }

    /// Follow the leader: first the current one (if any), then every change
    /// — a new leader, or a new value it proclaimed. When this returns, the
    /// watch is in place: no change after it is missed (changes may be
    /// coalesced into the newest). A moment without a leader is not
    /// reported.
    ///
    /// # Errors
    ///
    /// Backend errors if the watch or the first read failed.
    fn observe(&self) -> Result<LeaderObserver>;
}
