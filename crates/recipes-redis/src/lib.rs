//! # recipes-redis
//!
//! The Redis backend of `recipes`, for a **single Redis node**: a
//! blocking client whose session renewals run on its own runtime thread,
//! and the recipes of every backend — mutex, semaphore, election, leader
//! latch, leader selector — driven by core's one engine. The API and its
//! guarantees are core's ([`recipes_core`]); this crate documents the
//! layout and what Redis can and cannot promise.
//!
//! ```no_run
//! # fn main() -> Result<(), recipes_redis::Error> {
//! use std::time::Duration;
//! use recipes_redis::Client;
//! let client = recipes_redis::RedisClient::builder("redis://127.0.0.1:6379")
//!     .ttl(Duration::from_secs(10))
//!     .connect()?;
//! let mutex = client.mutex("/locks/nightly-report")?;
//! if let Some(guard) = mutex.try_lock_for(Duration::from_secs(5))? {
//!     // Writes in Redis guarded by the lock itself:
//!     guard.fenced_set("/reports/nightly", "started")?;
//!     // Writes elsewhere carry the fencing token:
//!     println!("fence {}", guard.token());
//!     guard.release()?;
//! }
//! client.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! ## How it works
//!
//! Every verb is one Lua script (atomic, one round trip). A session is a
//! key holding a random token, `PX` the TTL, renewed every TTL/3 by a
//! script that extends it — and the lock keys its entries hold — only
//! while it still holds our token: a late renewal never resurrects an
//! expired lock. Waiters queue fairly (a sorted set, places from a
//! counter taken in the same script); the first live one takes the lock
//! with `SET <lock> <member> NX PX <session's PTTL>` and, only on a new
//! acquisition, `INCR`s the name's fence counter in the same script: that
//! value is the fencing token (strictly increasing, never 0). A release
//! is compare-and-delete by script, which publishes the entry's going on
//! the channel the one waiter behind it listens to (one wake per
//! release); waiters also check every 500 ms, so a lost message costs at
//! most that. Fenced writes ([`RedisEntry::fenced_set`],
//! [`RedisEntry::fenced_del`], [`RedisEntry::fenced_script`], and
//! `guard.put`/`guard.delete` of [`FencedWrites`]) are scripts that write
//! only while the lock key still holds our member.
//!
//! ## What Redis promises, and what it does not
//!
//! - A **single node** with `appendonly yes` and `appendfsync always`
//!   keeps every acknowledged acquisition and fence across a crash and
//!   restart. With the default `appendfsync everysec` up to a second of
//!   writes can be lost; without persistence a restart loses every lock
//!   *and the fence counters*, so fences start over — holders see the
//!   loss (their renewal finds the session gone) but a resource that kept
//!   an old fence refuses the new holders until it is reset.
//! - **Replication is asynchronous.** A failover to a replica that had not
//!   received the lock or the fence counter gives the lock to a second
//!   holder with a fence that may repeat. With
//!   [`RedisClientBuilder::wait_for_replicas`] every acquisition and
//!   fenced write waits for `WAIT numreplicas timeout` and fails when too
//!   few acknowledged; then a promoted replica that acknowledged has them.
//!   `WAIT` does not make Redis strongly consistent: a failover can still
//!   pick a replica that did not acknowledge.
//! - `maxmemory-policy` must be `noeviction`: an eviction policy can evict
//!   lock keys. At `maxmemory` new acquisitions fail with nothing written;
//!   renewals and releases still run.
//! - No Redlock: see the guide, "Choosing a backend: Redis".
//! - TLS (`rediss://`) is not supported yet.

#![warn(missing_docs)]
#![deny(missing_debug_implementations)]

mod builder;
mod client;
mod contend;
mod election;
mod lock;
mod mutex;
mod names;
mod rpc;
mod scripts;
mod semaphore;
mod session;
mod surface;

pub use builder::RedisClientBuilder;
pub use client::RedisClient;
pub use election::{Election, LeaderLatch, LeaderSelector, Leadership, RedisElection};
pub use lock::{RedisEntry, RedisLock};
pub use mutex::{Mutex, RedisMutex};
pub use recipes_core;
/// What users of this crate touch from `recipes-core`, so that one
/// dependency line is enough; the whole core crate is [`recipes_core`].
pub use recipes_core::{
    BootInstant, Client, Contender, Error, FenceGate, FencedWrites, FencingToken, LatchEvent,
    LeaderInfo, LeaderObserver, LossReason, LossSignal, Participant, Result, Tls, TlsProblem,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_RPC_TIMEOUT, DEFAULT_TTL, MAX_DURATION, MIN_TTL,
};
/// The `redis` crate, for the values of [`RedisEntry::fenced_script`].
pub use redis;
pub use semaphore::{RedisSemaphore, Semaphore, SemaphorePermit};

/// A held [`Mutex`]; see [`recipes_core::MutexGuard`].
pub type MutexGuard = recipes_core::MutexGuard<RedisLock>;
