//! # recipes-zk
//!
//! The ZooKeeper backend of the `recipes` coordination library: mutex,
//! semaphore, leader latch and leader selector over a blocking client whose
//! session runs on its own runtime thread. Nodes use Apache Curator's names,
//! so Java services (Curator 5.x) and Rust daemons share one lock.
//!
//! ```no_run
//! # fn main() -> Result<(), recipes_core::Error> {
//! use std::time::Duration;
//! use recipes_zk::Client;
//! let client = recipes_zk::ZkClient::builder("127.0.0.1:2181")
//!     .session_timeout(Duration::from_secs(10))
//!     .connect()?;
//! let mutex = client.mutex("/locks/nightly-report")?;
//! if let Some(guard) = mutex.try_lock_for(Duration::from_secs(5))? {
//!     // Fence every write with the token; stop when the lease is lost.
//!     guard.put("/reports/last-run", guard.token().to_string().as_bytes())?;
//!     guard.check()?;
//!     guard.release()?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## Recipes and layouts
//!
//! | recipe | nodes |
//! |---|---|
//! | [`InterProcessMutex`] | `<path>/_c_<uuid>-lock-<seq10>` |
//! | [`InterProcessSemaphore`] | `<path>/locks/_c_<uuid>-lock-<seq10>`, `<path>/leases/_c_<uuid>-lease-<seq10>`, N in `<path>`'s data |
//! | [`LeaderLatch`] | `<path>/_c_<uuid>-latch-<seq10>`, data = id |
//! | [`LeaderSelector`] | `<path>/_c_<uuid>-lock-<seq10>`, data = id |
//! | [`InterProcessReadWriteLock`] | `<path>/_c_<uuid>-__READ__<seq10>`, `<path>/_c_<uuid>-__WRIT__<seq10>`: one sequence, one queue |
//!
//! All are ephemeral-sequential under container parents, with a fresh uuid
//! per acquisition (but for a downgraded reader, below). Contenders are ordered by the trailing sequence of any
//! child name (kazoo's `…__lock__<seq>` too), with serial-number arithmetic
//! across the wrap of the parent's counter.
//!
//! **Read-write lock.** Curator 5.4's `InterProcessReadWriteLock` layout, so
//! Curator's readers and writers and ours exclude each other both ways. A
//! reader holds when no writer is ahead of it and watches the nearest
//! writer ahead; a writer holds when first and watches the node just
//! ahead. Every guard's fence is its node's czxid. A **downgrade** is one
//! `multi` that creates the ephemeral, non-sequential reader
//! `<path>/_c_<fresh uuid>-__READ__<seq10>` — the name carries the
//! writer's own sequence number — and deletes the writer's node: the
//! reader sorts exactly where the writer was (Curator sorts by the number
//! after the marker), so a writer queued behind, Curator's included, stays
//! behind, and readers queued behind enter. The downgraded read guard keeps
//! the write token.
//!
//! ## What is guaranteed under pause and partition
//!
//! - **Mutual exclusion while the loss signal is quiet.** A guard's loss
//!   signal fires when the local lease deadline — the send time of the last
//!   acknowledged request plus the negotiated session timeout, less a margin
//!   — passes, when the session expires, when our node is deleted, and (with
//!   [`LossPolicy::OnDisconnect`]) on any disconnect. The server cannot
//!   expire the session before that deadline, so while
//!   [`is_lost`](recipes_core::MutexGuard::is_lost) is false no other holder
//!   exists — given clock rates within 500 ppm.
//! - **Not guaranteed: that a holder stops in time.** A process paused
//!   between checking and writing writes late. That is what the fence is
//!   for: the token is the lock node's czxid, strictly increasing across
//!   holders; writes through [`ZkNodeLease`] run as
//!   `multi(check(our node), op)` and land only while our node exists.
//! - **Partitions.** Under [`LossPolicy::Deadline`] (the default) a
//!   disconnect shorter than the deadline keeps the lock: a ZooKeeper leader
//!   election disconnects every client for a fraction of a second. A
//!   follower cut off from its leader may acknowledge our heartbeats for a
//!   short while (it touches sessions locally); keep the session timeout
//!   well above `syncLimit × tickTime`.
//! - **After any loss** the recipe never regains the lease on the old node:
//!   a lost guard stays lost, its node is deleted once the session answers
//!   again, and latches and selectors start over with new nodes (a new
//!   session after expiry).
//! - **Restores rewind fences.** Restoring ZooKeeper from an older snapshot
//!   or wiping its data restarts zxids: fencing tokens restart too.
//!
//! ## Mixing with other clients
//!
//! Safe, and tested against the real peers: Curator's `InterProcessMutex`,
//! `InterProcessReadWriteLock` (both sides, and our downgrade with a
//! Curator writer queued behind), `LeaderSelector` and `LeaderLatch` on the
//! same paths as ours; kazoo's
//! `Lock` made with `extra_lock_patterns=["-lock-"]`. Same layout, not tested
//! here: Curator's `InterProcessSemaphoreV2` with the same number of leases. Unsafe: a default kazoo `Lock`
//! (it ignores Curator-layout nodes, ours included) and kazoo with Curator
//! (Curator mis-sorts kazoo's names). A recipe opened on a path that holds
//! another recipe's nodes (a latch's under a selector, a mutex under a
//! semaphore, a mutex under a read-write lock and the reverse) is refused
//! with `InvalidArgument`.

#![warn(missing_docs)]
#![deny(missing_debug_implementations)]

mod barrier;
mod client;
mod contenders;
mod counter;
mod create;
mod drill;
mod driver;
mod election;
mod error;
mod group;
mod locks;
mod mutex;
mod names;
mod node_lease;
mod observe;
mod rw_lock;
mod semaphore;
mod server_info;
mod session;
mod surface;

pub use barrier::{DistributedBarrier, DistributedDoubleBarrier, ZkWaits};
pub use client::{ZkClient, ZkClientBuilder};
pub use counter::ZkCounter;
pub use election::{Election, LeaderLatch, LeaderSelector, Leadership, ZkElection};
pub use group::GroupMember;
pub use mutex::{InterProcessMutex, ZkMutex};
pub use node_lease::{ZkNode, ZkNodeLease};
pub use recipes_core;
/// What users of this crate touch from `recipes-core`, so that one
/// dependency line is enough; the whole core crate is [`recipes_core`].
pub use recipes_core::{
    Access, BootInstant, Client, Contender, Error, FenceGate, FencedWrites, FencingToken,
    LatchEvent, LeaderInfo, LeaderObserver, LockKind, LossPolicy, LossReason, LossSignal,
    MultiLock, MultiLockGuard, Participant, Result, Tls, TlsProblem, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_RPC_TIMEOUT, DEFAULT_TTL, MAX_DURATION, MAX_MULTI_LOCK_NAMES, MIN_TTL,
};
pub use rw_lock::{InterProcessReadWriteLock, ZkRwLock};
pub use semaphore::{InterProcessSemaphore, ZkSemaphore};
pub use server_info::ZkClockNode;
pub use session::SessionState;

/// A held [`InterProcessMutex`].
pub type MutexGuard = recipes_core::MutexGuard<ZkNodeLease>;

/// The same names on every backend: [`InterProcessMutex`] (Curator's
/// name) is also `Mutex`.
pub type Mutex = InterProcessMutex;

/// [`InterProcessSemaphore`] (Curator's name) is also `Semaphore`.
pub type Semaphore = InterProcessSemaphore;

/// A held permit of a [`Semaphore`].
pub type SemaphorePermit = recipes_core::SemaphorePermit<ZkNodeLease>;

/// [`InterProcessReadWriteLock`] (Curator's name) is also `RwLock`.
pub type RwLock = InterProcessReadWriteLock;

/// A held read side of an [`RwLock`].
pub type RwLockReadGuard = recipes_core::RwLockReadGuard<ZkRwLock>;

/// A held write side of an [`RwLock`].
pub type RwLockWriteGuard = recipes_core::RwLockWriteGuard<ZkRwLock>;
