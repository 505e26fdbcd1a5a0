//! The mutex, the read-write lock and the semaphore, glued to any store
//! once: a store supplies its queue verbs ([`LockStore`]: check a name,
//! take a place in its queue, downgrade a writer in place, admit to a
//! semaphore) and [`QueueLock`] is the [`MutexBackend`] and the
//! [`RwLockBackend`] of every store, [`QueueSemaphore`] its
//! [`SemaphoreBackend`]. What decides
//! who holds is the recipe's queue rule ([`Rule`](crate::engine::Rule),
//! given by [`LockKind::rule`]); what waits, backs off and cleans up is
//! the engine. A store's `take` picks the engine's shape
//! ([`contend`](crate::engine::contend) over its entries, or
//! [`take`](crate::engine::take) over its native locks) and its layout;
//! nothing in it decides or loops. The election is glued the same way
//! (`queue_election.rs`).

use std::fmt;
use std::future::Future;
use std::time::Instant;

use crate::backend::{FencedLease, HeldLease, MutexBackend, RwLockBackend, SemaphoreBackend};
use crate::engine::{Role, Rule};
use crate::error::Result;
use crate::multi_lock::LockKind;
use crate::runtime::Runtime;
use crate::rw_lock::Access;

impl LockKind {
    /// The queue rule of the recipe this place belongs to.
    pub fn rule(self) -> Rule {
        match self {
            LockKind::Mutex => Rule::Mutex,
            LockKind::Read | LockKind::Write => Rule::ReadWrite,
        }
    }

    /// The role of an entry that takes this place.
    pub fn role(self) -> Role {
        match self {
            LockKind::Mutex => Role::Mutex,
            LockKind::Read => Role::Reader,
            LockKind::Write => Role::Writer,
        }
    }

    /// What an acquisition of this place is called in messages and
    /// metrics: `lock`, `read lock`, `write lock`.
    pub fn what(self) -> &'static str {
        match self {
            LockKind::Mutex => "lock",
            LockKind::Read => "read lock",
            LockKind::Write => "write lock",
        }
    }

    /// What a name of this place's recipe is called in messages: `lock`
    /// or `read-write lock`.
    pub fn recipe(self) -> &'static str {
        match self {
            LockKind::Mutex => "lock",
            LockKind::Read | LockKind::Write => "read-write lock",
        }
    }
}

impl From<Access> for LockKind {
    fn from(access: Access) -> LockKind {
        match access {
            Access::Read => LockKind::Read,
            Access::Write => LockKind::Write,
        }
    }
}

/// A store's verbs for the queue locks (the mutex and the read-write
/// lock): what a backend implements, once, for both. The store is the
/// client itself: every [`Client`](crate::Client) is one, and its
/// `mutex` and `rw_lock` are [`QueueLock`]s over it.
pub trait LockStore: Clone + Send + Sync + fmt::Debug + 'static {
    /// A checked name, with whatever the store keeps per lock handle
    /// (a handle's turn queue, its layout's paths). Clones are one handle.
    type Queue: Clone + Send + Sync + fmt::Debug + 'static;

    /// What a taken place holds.
    type Lease: FencedLease;

    /// The client's runtime, where takes run.
    fn runtime(&self) -> &Runtime;

    /// Check `name` as the name of `kind`'s recipe (a mutex's, or a
    /// read-write lock's for [`LockKind::Read`] and [`LockKind::Write`],
    /// which share one queue) before anything is written.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) saying
    /// what to change.
    fn queue(&self, name: &str, kind: LockKind) -> Result<Self::Queue>;

    /// The keys the store locks `names` under, one a name in their order,
    /// when two names can be one lock (PostgreSQL session mode's advisory
    /// key is a 32-bit hash of the name); `None`, the default: each name
    /// is a lock of its own. A multi-lock takes its names in the order of
    /// these keys, the same in every process, and refuses two names of one
    /// key (it would wait for itself). May read the store.
    ///
    /// # Errors
    ///
    /// Backend errors.
    fn lock_keys(&self, names: &[&str]) -> Result<Option<Vec<i64>>> {
        let _ = names;
        Ok(None)
    }

    /// Take the `kind` place in `queue` and hold it, waiting until
    /// `deadline` (`None`: as long as it takes); `Ok(None)` when the
    /// deadline passed first. A future for the runtime; everything it
    /// created is removed on every way out but a win, its being dropped
    /// included.
    fn take(
        &self,
        queue: &Self::Queue,
        kind: LockKind,
        deadline: Option<tokio::time::Instant>,
    ) -> impl Future<Output = Result<Option<Self::Lease>>> + Send + 'static;

    /// Turn a held write lease of `queue` into a read lease in the
    /// writer's place (see [`RwLockBackend::downgrade`]).
    ///
    /// # Errors
    ///
    /// Backend errors; then nothing is held.
    fn downgrade(&self, queue: &Self::Queue, write: Self::Lease) -> Result<Self::Lease>;

    /// A semaphore's checked name and size, with its layout.
    type Semaphore: Clone + Send + Sync + fmt::Debug + 'static;

    /// What an admitted permit holds.
    type Permit: HeldLease;

    /// Check `name` as a semaphore's of `permits` permits, and the stored
    /// size where the store checks it when the handle is made (a blocking
    /// call).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) saying
    /// what to change; backend errors.
    fn semaphore_queue(&self, name: &str, permits: u32) -> Result<Self::Semaphore>;

    /// Admit one permit of `semaphore` (core's
    /// [`admit`](crate::engine::admit), or the store's native slots),
    /// waiting until `deadline`; as [`take`](LockStore::take).
    fn admit(
        &self,
        semaphore: &Self::Semaphore,
        deadline: Option<tokio::time::Instant>,
    ) -> impl Future<Output = Result<Option<Self::Permit>>> + Send + 'static;
}

/// A named queue lock of a store: the [`MutexBackend`] of
/// [`Mutex`](crate::Mutex) and the [`RwLockBackend`] of
/// [`RwLock`](crate::RwLock) on every store.
#[derive(Debug, Clone)]
pub struct QueueLock<S: LockStore> {
    store: S,
    name: String,
    queue: S::Queue,
}

impl<S: LockStore> QueueLock<S> {
    /// The lock `name` of `kind`'s recipe on `store`, its name checked.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a
    /// name the store refuses.
    pub fn new(store: &S, name: &str, kind: LockKind) -> Result<QueueLock<S>> {
        Ok(QueueLock {
            queue: store.queue(name, kind)?,
            store: store.clone(),
            name: name.to_owned(),
        })
    }

    fn take_blocking(&self, kind: LockKind, deadline: Option<Instant>) -> Result<Option<S::Lease>> {
        let deadline = deadline.map(tokio::time::Instant::from_std);
        // Built on the heap: it is large (see `Runtime::call_until`).
        let take = Box::pin(self.store.take(&self.queue, kind, deadline));
        self.store.runtime().call_boxed(kind.what(), None, take)
    }
}

impl<S: LockStore> MutexBackend for QueueLock<S> {
    type Lease = S::Lease;

    fn name(&self) -> &str {
        &self.name
    }

    fn runtime(&self) -> &Runtime {
        self.store.runtime()
    }

    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<S::Lease>> {
        self.take_blocking(LockKind::Mutex, deadline)
    }
}

impl<S: LockStore> RwLockBackend for QueueLock<S> {
    type Lease = S::Lease;

    fn name(&self) -> &str {
        &self.name
    }

    fn runtime(&self) -> &Runtime {
        self.store.runtime()
    }

    fn acquire(&self, access: Access, deadline: Option<Instant>) -> Result<Option<S::Lease>> {
        self.take_blocking(access.into(), deadline)
    }

    fn downgrade(&self, write: S::Lease) -> Result<S::Lease> {
        self.store.downgrade(&self.queue, write)
    }
}

/// A named semaphore of a store: the [`SemaphoreBackend`] of
/// [`Semaphore`](crate::Semaphore) on every store.
#[derive(Debug, Clone)]
pub struct QueueSemaphore<S: LockStore> {
    store: S,
    name: String,
    permits: u32,
    semaphore: S::Semaphore,
}

impl<S: LockStore> QueueSemaphore<S> {
    /// The semaphore `name` of `permits` permits on `store`, checked.
    ///
    /// # Errors
    ///
    /// As [`LockStore::semaphore_queue`].
    pub fn new(store: &S, name: &str, permits: u32) -> Result<QueueSemaphore<S>> {
        Ok(QueueSemaphore {
            semaphore: store.semaphore_queue(name, permits)?,
            store: store.clone(),
            name: name.to_owned(),
            permits,
        })
    }
}

impl<S: LockStore> SemaphoreBackend for QueueSemaphore<S> {
    type Permit = S::Permit;

    fn name(&self) -> &str {
        &self.name
    }

    fn runtime(&self) -> &Runtime {
        self.store.runtime()
    }

    fn permits(&self) -> u32 {
        self.permits
    }

    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<S::Permit>> {
        let deadline = deadline.map(tokio::time::Instant::from_std);
        let admit = Box::pin(self.store.admit(&self.semaphore, deadline));
        self.store
            .runtime()
            .call_boxed("acquire a permit", None, admit)
    }
}
