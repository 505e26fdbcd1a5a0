//! # recipes-etcd
//!
//! The etcd backend of `recipes`: a blocking client whose keep-alives and
//! watches run on its own runtime thread, and recipes in the key layouts of
//! etcd's Go `concurrency` package (so `etcdctl lock` and `etcdctl elect`
//! contend with them) and its `recipe.RWMutex`. The API and its
//! guarantees are core's
//! ([`recipes_core`]); this crate documents layouts, sessions and interop.
//!
//! ```no_run
//! # fn main() -> Result<(), recipes_etcd::Error> {
//! use std::time::Duration;
//! use recipes_etcd::Client;
//! let client = recipes_etcd::EtcdClient::builder(["127.0.0.1:2379"])
//!     .ttl(Duration::from_secs(10))
//!     .connect()?;
//! println!("lease TTL granted: {:?}", client.granted_ttl());
//! let mutex = client.mutex("/locks/nightly-report")?;
//! if let Some(guard) = mutex.try_lock_for(Duration::from_secs(5))? {
//!     // Writes in etcd guarded by the lock itself:
//!     guard.put("/reports/nightly", b"started")?;
//!     // Writes elsewhere carry the fencing token:
//!     println!("fence {}", guard.token());
//!     guard.release()?;
//! }
//! client.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! A read-write lock ([`RwLock`], `client.rw_lock(name)`) uses the layout
//! of etcd's Go `client/v3/experimental/recipes` `RWMutex`
//! (`<name>/read/…` and `<name>/write/…` on the client's lease), so Go's
//! readers and writers and ours exclude each other; a downgrade adds a
//! marker read key and leaves the write key alone (see
//! `docs/etcd-rw-lock.md`).
//!
//! Sessions (one etcd lease per client, single-use leases for concurrent
//! acquisitions of one name) are described at [`EtcdClient`]. Each
//! request is timed on its own, and keep-alive and watch streams are
//! re-opened when their member dies; etcd-client's lock and campaign RPCs
//! are never used (without a lease they get a 60 s one nobody renews).

#![warn(missing_docs)]
#![deny(missing_debug_implementations)]

mod barrier;
mod builder;
mod client;
mod contend;
mod counter;
mod election;
mod group;
mod hub;
mod key;
mod listing;
mod lock;
mod locks;
mod mutex;
mod names;
mod observe;
mod permit;
mod rpc;
mod rw_lock;
mod rw_queue;
mod semaphore;
mod server_info;
mod session;
mod surface;
mod watch;

pub use barrier::{Barrier, DoubleBarrier, EtcdWaits};
pub use builder::EtcdClientBuilder;
pub use client::EtcdClient;
pub use counter::EtcdCounter;
pub use election::{Election, EtcdElection, LeaderLatch, LeaderSelector, Leadership};
/// The etcd client crate, for the transaction operations of
/// [`EtcdKey::txn`].
pub use etcd_client;
pub use group::Group;
pub use lock::{EtcdKey, EtcdLock};
pub use mutex::{EtcdMutex, Mutex};
pub use recipes_core;
/// What users of this crate touch from `recipes-core`, so that one
/// dependency line is enough; the whole core crate is [`recipes_core`].
pub use recipes_core::{
    Access, BootInstant, Client, Contender, Error, FenceGate, FencedWrites, FencingToken,
    LatchEvent, LeaderInfo, LeaderObserver, LockKind, LossPolicy, LossReason, LossSignal,
    MultiLock, MultiLockGuard, Participant, Result, Tls, TlsProblem, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_RPC_TIMEOUT, DEFAULT_TTL, MAX_DURATION, MAX_MULTI_LOCK_NAMES, MIN_TTL,
};
pub use rw_lock::{EtcdRwLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::{EtcdSemaphore, Semaphore, SemaphorePermit};
pub use server_info::{EtcdAccess, EtcdClockLease, EtcdServerInfo};

/// A held [`Mutex`]; see [`recipes_core::MutexGuard`].
pub type MutexGuard = recipes_core::MutexGuard<EtcdLock>;
