//! The one client surface every backend implements: make recipes by name,
//! list a name's contenders, read a key, write fenced, close. Tools (the
//! `recipes` command, the test worker, the examples) are written once
//! against it.

use std::fmt;
use std::time::Duration;

use crate::backend::{FencedLease, HeldLease, LeaderInfo, RwLockBackend};
use crate::barrier::{Barrier, DoubleBarrier, OnRuntime};
use crate::clock::BootInstant;
use crate::count_down::CountDownLatch;
use crate::counter::{Counter, CounterBackend, CounterKind};
use crate::election::{Election, Leadership};
use crate::engine::gather::{BarrierStore, DoubleBarrierStore};
use crate::engine::Role;
use crate::error::Result;
use crate::leader::{LeaderLatch, LeaderSelector};
use crate::multi_lock::{LockKind, MultiLock};
use crate::mutex::{Mutex, MutexGuard};
use crate::queue_election::{ElectionStore, QueueElection};
use crate::queue_lock::{LockStore, QueueLock, QueueSemaphore};
use crate::rw_lock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use crate::semaphore::{Semaphore, SemaphorePermit};

/// Writes fenced in the store by a held lease: applied only while the
/// lease's own entry (node or key) still exists — that is, while no other
/// holder can exist. The same signature on every backend.
pub trait FencedWrites {
    /// Set `key` (a ZooKeeper node path, an etcd key) to `value`, creating
    /// it if missing.
    ///
    /// # Errors
    ///
    /// [`Error::FenceRejected`](crate::Error::FenceRejected) once our entry
    /// is gone; [`Error::Indeterminate`](crate::Error::Indeterminate) when no
    /// reply came; backend errors.
    fn put(&self, key: &str, value: &[u8]) -> Result<()>;

    /// Delete `key` (no error if it does not exist).
    ///
    /// # Errors
    ///
    /// As for [`put`](FencedWrites::put).
    fn delete(&self, key: &str) -> Result<()>;
}

/// One contender of a name, as the store shows it at the moment of the
/// read — under partition or pause, possibly no longer so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    /// Where it lives in the store: its node path or its key.
    pub holder: String,
    /// When the store created it: the node's czxid (on ZooKeeper also the
    /// holder's fencing token), or the key's create revision (on etcd a
    /// lock's fence is the later revision of the read that confirmed it).
    pub created: i64,
    /// Its data: a latch, selector or election candidate's value.
    pub value: Vec<u8>,
    /// What it is, where the store's layout says: a read-write lock's
    /// readers and writers always, a mutex's or a latch's where their
    /// layouts differ (ZooKeeper's `lock-` and `latch-`).
    pub role: Option<Role>,
}

impl From<Contender> for LeaderInfo {
    fn from(c: Contender) -> LeaderInfo {
        LeaderInfo {
            holder: c.holder,
            value: c.value,
        }
    }
}

/// A connected client of one store, through which every recipe is made.
///
/// Cheap to clone; clones share the session. Dropping the last handle
/// closes it on a best-effort basis; [`close`](Client::close) reports the
/// outcome.
///
/// A client is the [`LockStore`] of its mutexes and read-write locks
/// (their leases write fenced): [`mutex`](Client::mutex) and
/// [`rw_lock`](Client::rw_lock) are [`QueueLock`]s over it, the same on
/// every store, and so is [`semaphore`](Client::semaphore) a
/// [`QueueSemaphore`]; it is the [`ElectionStore`] of its elections,
/// latches and selectors, [`QueueElection`]s over it.
pub trait Client: LockStore<Lease: FencedWrites, Permit: FencedWrites> + ElectionStore {
    /// The barrier and double barrier backend.
    type Barrier: BarrierStore + DoubleBarrierStore + OnRuntime + fmt::Debug;

    /// A barrier named `name` (see [`Barrier`]).
    ///
    /// # Errors
    ///
    /// As for [`mutex`](Client::mutex).
    fn barrier(&self, name: &str) -> Result<Barrier<Self::Barrier>>;

    /// A double barrier named `name` gathering `count` members (see
    /// [`DoubleBarrier`]).
    ///
    /// # Errors
    ///
    /// As for [`mutex`](Client::mutex); a count of 0 or above
    /// [`MAX_DOUBLE_BARRIER_COUNT`](crate::MAX_DOUBLE_BARRIER_COUNT).
    fn double_barrier(&self, name: &str, count: u32) -> Result<DoubleBarrier<Self::Barrier>>;

    /// The store's short name, the `store` label of the metrics: `zk`, `etcd`,
    /// `pg` or `redis`.
    fn store(&self) -> &'static str;

    /// A mutex named `name`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a name
    /// the store refuses, saying what to change. A store that reads the
    /// name's layout to refuse it (PostgreSQL session mode, for a name
    /// under a semaphore's) may also fail with its connection errors.
    fn mutex(&self, name: &str) -> Result<Mutex<QueueLock<Self>>> {
        QueueLock::new(self, name, LockKind::Mutex).map(Mutex::from_backend)
    }

    /// A semaphore of `permits` permits named `name`.
    ///
    /// # Errors
    ///
    /// As for [`mutex`](Client::mutex); zero permits.
    fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore<QueueSemaphore<Self>>> {
        QueueSemaphore::new(self, name, permits).map(Semaphore::from_backend)
    }

    /// An election named `name`.
    ///
    /// # Errors
    ///
    /// As for [`mutex`](Client::mutex).
    fn election(&self, name: &str) -> Result<Election<QueueElection<Self>>> {
        QueueElection::new(self, name, false).map(Election::from_backend)
    }

    /// A read-write lock named `name`.
    ///
    /// # Errors
    ///
    /// As for [`mutex`](Client::mutex).
    fn rw_lock(&self, name: &str) -> Result<RwLock<QueueLock<Self>>> {
        QueueLock::new(self, name, LockKind::Write).map(RwLock::from_backend)
    }

    /// The mutexes `names`, taken all or nothing (see [`MultiLock`]).
    ///
    /// # Errors
    ///
    /// As for [`MultiLock::new`].
    fn multi_lock(&self, names: &[&str]) -> Result<MultiLock<Self>> {
        let parts: Vec<_> = names.iter().map(|n| (*n, LockKind::Mutex)).collect();
        MultiLock::new(self, &parts)
    }

    /// Mutexes and read-write locks' sides, taken all or nothing: each
    /// name with what to take on it (see [`MultiLock`]).
    ///
    /// # Errors
    ///
    /// As for [`MultiLock::new`].
    fn multi_lock_of(&self, parts: &[(&str, LockKind)]) -> Result<MultiLock<Self>> {
        MultiLock::new(self, parts)
    }

    /// A leader latch on `name` for participant `id`.
    ///
    /// # Errors
    ///
    /// As for [`mutex`](Client::mutex); an empty id.
    fn leader_latch(&self, name: &str, id: &str) -> Result<LeaderLatch<QueueElection<Self>>> {
        LeaderLatch::new(QueueElection::new(self, name, false)?, id)
    }

    /// A leader selector on `name` for participant `id`.
    ///
    /// # Errors
    ///
    /// As for [`leader_latch`](Client::leader_latch).
    fn leader_selector(&self, name: &str, id: &str) -> Result<LeaderSelector<QueueElection<Self>>> {
        LeaderSelector::new(QueueElection::new(self, name, true)?, id)
    }

    /// The contenders of the mutex, election, latch or selector `name`, in
    /// the order the recipe itself uses: the first holds or leads.
    ///
    /// # Errors
    ///
    /// As for [`mutex`](Client::mutex); connection and read errors.
    fn contenders(&self, name: &str) -> Result<Vec<Contender>>;

    /// The fence of the current holder or leader of the mutex, election,
    /// latch or selector `name` as the store keeps it, for `recipes
    /// status`; `None` where the store keeps none apart from its
    /// contenders (the default: ZooKeeper's is each node's czxid, which
    /// [`contenders`](Client::contenders) gives; an etcd mutex's is the
    /// revision of the read that confirmed it, which nothing stores).
    ///
    /// # Errors
    ///
    /// As for [`contenders`](Client::contenders).
    fn holder_fence(&self, name: &str) -> Result<Option<u64>> {
        let _ = name;
        Ok(None)
    }

    /// The semaphore `name`: its stored size (`None` if none is stored) and
    /// its permit entries in queue order, whose first N hold.
    ///
    /// # Errors
    ///
    /// As for [`contenders`](Client::contenders).
    fn permits(&self, name: &str) -> Result<(Option<u32>, Vec<Contender>)>;

    /// A plain (unfenced, linearizable) read of `key`; `None` when it does
    /// not exist.
    ///
    /// # Errors
    ///
    /// As for [`contenders`](Client::contenders).
    fn read(&self, key: &str) -> Result<Option<Vec<u8>>>;

    /// The id of the session the client's recipes live on now — the
    /// ZooKeeper session id, the etcd lease id; `None` while no session is
    /// open (on ZooKeeper: only once closed).
    fn session_id(&self) -> Option<i64>;

    /// The session timeout or lease TTL the server granted (it may differ
    /// from the one asked for).
    fn granted_ttl(&self) -> Duration;

    /// One round trip to the store, timed.
    ///
    /// # Errors
    ///
    /// Connection errors within the RPC timeout.
    fn ping(&self) -> Result<Duration>;

    /// The send time of the newest acknowledged request of the session (on
    /// the boot-time clock), from which its lease deadline is computed.
    fn last_acknowledged(&self) -> Option<BootInstant>;

    /// Until when the current session's lease may be assumed alive in the
    /// store: the send time of the newest acknowledged request plus the
    /// granted session timeout or TTL, less the safety margin — earlier
    /// than the server's own expiry while the clocks run within 500 ppm of
    /// each other. `None` once closed.
    fn valid_until(&self) -> Option<BootInstant>;

    /// Close the session — what it still holds goes at once — waiting at
    /// most `grace`. Every loss signal fires. Other clones stop working.
    ///
    /// # Errors
    ///
    /// When the store did not confirm within `grace`; the session's own
    /// timeout then removes what it held.
    fn close_within(&self, grace: Duration) -> Result<()>;

    /// [`close_within`](Client::close_within) the runtime's default grace.
    ///
    /// # Errors
    ///
    /// As for [`close_within`](Client::close_within).
    fn close(self) -> Result<()> {
        self.close_within(crate::runtime::DEFAULT_SHUTDOWN_GRACE)
    }

    /// The shared counter backend.
    type Counter: CounterBackend + fmt::Debug;

    /// A shared counter named `name` of `kind` (see [`Counter`]).
    ///
    /// # Errors
    ///
    /// As for [`mutex`](Client::mutex).
    fn counter_of(&self, name: &str, kind: CounterKind) -> Result<Counter<Self::Counter>>;

    /// A 32-bit shared counter named `name` (on ZooKeeper Curator's
    /// `SharedCount`).
    ///
    /// # Errors
    ///
    /// As for [`mutex`](Client::mutex).
    fn counter(&self, name: &str) -> Result<Counter<Self::Counter>> {
        self.counter_of(name, CounterKind::I32)
    }

    /// A 64-bit shared counter named `name`.
    ///
    /// # Errors
    ///
    /// As for [`mutex`](Client::mutex).
    fn counter64(&self, name: &str) -> Result<Counter<Self::Counter>> {
        self.counter_of(name, CounterKind::I64)
    }

    /// A count-down latch kept in the 64-bit counter `name`.
    ///
    /// # Errors
    ///
    /// As for [`mutex`](Client::mutex).
    fn count_down_latch(&self, name: &str) -> Result<CountDownLatch<Self::Counter>> {
        Ok(CountDownLatch::new(self.counter64(name)?))
    }

    /// The group membership backend.
    type Group: crate::store::GroupStore + OnRuntime + fmt::Debug;

    /// The group `name` (see [`Group`](crate::Group)).
    ///
    /// # Errors
    ///
    /// As for [`mutex`](Client::mutex).
    fn group(&self, name: &str) -> Result<crate::Group<Self::Group>>;
}

macro_rules! fenced_guard {
    ($guard:ident, $bound:path) => {
        impl<L: $bound + FencedWrites> $guard<L> {
            /// A write of `value` at `key`, fenced in the store by this
            /// holding (see [`FencedWrites::put`]).
            ///
            /// # Errors
            ///
            /// [`Error::FenceRejected`](crate::Error::FenceRejected) once it
            /// is gone; [`Error::Indeterminate`](crate::Error::Indeterminate)
            /// when no confirmation came (it may have landed); backend errors.
            pub fn put(&self, key: &str, value: &[u8]) -> Result<()> {
                self.lease().put(key, value)
            }

            /// A delete of `key`, fenced in the store by this holding.
            ///
            /// # Errors
            ///
            /// As for `put`.
            pub fn delete(&self, key: &str) -> Result<()> {
                self.lease().delete(key)
            }
        }
    };
}

fenced_guard!(MutexGuard, FencedLease);
fenced_guard!(SemaphorePermit, HeldLease);
fenced_guard!(Leadership, crate::backend::LeadershipLease);

macro_rules! fenced_rw_guard {
    ($guard:ident) => {
        impl<B: RwLockBackend> $guard<B>
        where
            B::Lease: FencedWrites,
        {
            /// A write of `value` at `key`, fenced in the store by this
            /// holding (see [`FencedWrites::put`]).
            ///
            /// # Errors
            ///
            /// [`Error::FenceRejected`](crate::Error::FenceRejected) once it
            /// is gone; [`Error::Indeterminate`](crate::Error::Indeterminate)
            /// when no confirmation came (it may have landed); backend errors.
            pub fn put(&self, key: &str, value: &[u8]) -> Result<()> {
                self.lease().put(key, value)
            }

            /// A delete of `key`, fenced in the store by this holding.
            ///
            /// # Errors
            ///
            /// As for `put`.
            pub fn delete(&self, key: &str) -> Result<()> {
                self.lease().delete(key)
            }
        }
    };
}

fenced_rw_guard!(RwLockReadGuard);
fenced_rw_guard!(RwLockWriteGuard);
