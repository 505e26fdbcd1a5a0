//! # recipes-redis
//!
//! The Redis backend of `recipes`, for a **single Redis node**: a
//! blocking client whose session renewals run on its own runtime thread,
//! and the recipes of every backend — mutex, semaphore, election, leader
//! latch, leader selector, read-write lock — driven by core's one engine. The API and its
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
//! script that extends it only while it still holds our token: a late
//! renewal never resurrects an expired lock. A hold names its session
//! (the member is `<session id>-<uuid>`) and is live while that session
//! key exists: one renewal keeps every lock of the client, whatever their
//! number, and a taker treats a hold whose session key expired as free,
//! in the taking script. Waiters queue fairly (a sorted set, each place
//! one above the last member's, taken in the same script); the first live
//! one takes the lock with `SET <lock> <member>` and, only on a new
//! acquisition, mints the name's next fence in the same script: the
//! larger of the last fence + 1 and the server's clock (`TIME`) in
//! microseconds since the Unix epoch. That value is the fencing token:
//! strictly increasing, not dense, about 1.8 × 10¹⁵ today (a `u64`, a
//! `bigint`, a safe integer in JSON). A release
//! is compare-and-delete by script, which publishes the entry's going on
//! the channel the one waiter behind it listens to (one wake per
//! release); waiters also check every 500 ms, so a lost message costs at
//! most that. Fenced writes ([`RedisEntry::fenced_set`],
//! [`RedisEntry::fenced_del`], [`RedisEntry::fenced_script`], and
//! `guard.put`/`guard.delete` of [`FencedWrites`]) are scripts that write
//! only while the lock key still holds our member and our session key
//! exists. Uncontended, a lock + release is two scripts: the entering one
//! finds the queue empty and takes the lock and the fence there.
//!
//! No key of a session has a TTL but its session key: each is listed in
//! the session's index, and each live session's deadline in a sorted set.
//! Every renewal (and every grant) sweeps a bounded number of sessions
//! whose key expired, removing what they held and publishing it as a
//! release would. So a crashed holder's lock is free within its TTL for
//! any taker, and its keys are removed by the next renewal of any live
//! client within TTL/3 after that, or at the next connect.
//!
//! ## The read-write lock
//!
//! [`Client::rw_lock`] (`client.rw_lock(name)`) queues readers and
//! writers in the mutex's queue of the name, in arrival order, each
//! member's role (`read` or `write`) in a hash beside it
//! (`{recipes}:r:<name>`). Several readers hold at once, so each holder
//! has its own hold key, `{recipes}:rw:<name>:<member>`, live while its
//! session is (as a semaphore's permits are), holding the member and the
//! fence minted for it (what a resent acquisition answers); fenced
//! writes and the loss poll check that key. The confirming script decides
//! core's [`Rule::ReadWrite`](recipes_core::store::engine::Rule::ReadWrite)
//! itself over the live members (the mutex's liveness): a reader holds
//! when no writer is ahead of it, a writer when no one is; and it mints
//! the fence from the name's one counter in the same script, so readers'
//! and writers' fences are one increasing sequence — a writer's above
//! every earlier reader's, a reader's above every earlier writer's, and
//! after a data loss above everything before (the clock, as for the
//! mutex). A reader waits on the nearest writer ahead, a writer on the
//! member just ahead: a release wakes only those it lets in. A
//! [downgrade](recipes_core::RwLockWriteGuard::downgrade) is one script
//! that turns the writer's role into `read` where it stands (same member,
//! place, hold key and fence) and wakes the readers queued behind it; a
//! writer queued behind stays out. A name's queue is one recipe's: a
//! mutex, an election or a semaphore on a read-write lock's name is
//! refused with [`Error::InvalidArgument`], and the reverse.
//!
//! ```no_run
//! # fn main() -> Result<(), recipes_redis::Error> {
//! use recipes_redis::Client;
//! let client = recipes_redis::RedisClient::connect("redis://127.0.0.1:6379")?;
//! let cache = client.rw_lock("/cache/prices")?;
//! let rebuild = cache.write()?;
//! rebuild.put("/cache/prices/data", b"rebuilt")?;
//! let reading = rebuild.downgrade()?; // no writer in between
//! println!("read under fence {}", reading.token());
//! reading.release()?;
//! # Ok(())
//! # }
//! ```
//!
//! ## What Redis promises, and what it does not
//!
//! - **A fence never repeats, even when Redis loses its data.** Each fence
//!   is at most the server's clock when it was minted, so after a
//!   `FLUSHALL` or `FLUSHDB`, a restart without persistence (or with
//!   `appendfsync everysec` losing its last second), an older snapshot
//!   restored, or a key deleted by hand, the next fence — the clock then —
//!   is above every fence handed out before, and a resource that admits
//!   fences ≥ the highest it saw refuses the old holder once the new one
//!   wrote. The old holder learns it lost as soon as the client can know:
//!   its next renewal (every TTL/3) finds its session gone, and the poll
//!   of held entries (every 500 ms) finds its lock key gone or another's;
//!   its loss signal fires and its fenced writes are refused.
//! - **What the fence cannot cover**: the server's clock stepping back
//!   past the last fence issued *and* the data lost before the clock
//!   catches up (two faults at once); a failover to a replica that missed
//!   the last fence and whose clock is behind the old primary's. With the
//!   data intact a clock that steps back changes nothing: the fence then
//!   grows by one.
//! - **Locks do not survive data loss.** Without persistence a restart
//!   loses every lock; with `appendonly yes` and `appendfsync always` a
//!   single node keeps every acknowledged acquisition across a crash and
//!   restart. Between the loss and the old holder's next renewal or poll,
//!   a new holder can take the lock: the fence is what keeps the old
//!   holder's late writes out.
//! - **Replication is asynchronous.** A failover to a replica that had not
//!   received the lock gives the lock to a second holder while the first
//!   still believes it holds (its fence is still below the new one, but
//!   for the clock caveat above). With
//!   [`RedisClientBuilder::wait_for_replicas`] every acquisition and
//!   fenced write waits for `WAIT numreplicas timeout` and fails when too
//!   few acknowledged; then a promoted replica that acknowledged has them.
//!   `WAIT` does not make Redis strongly consistent: a failover can still
//!   pick a replica that did not acknowledge.
//! - **`maxmemory-policy` must be `noeviction`**, and the client checks:
//!   before it grants a session (at connect, and again after a session
//!   was lost, as when a restarted server lost every key) it reads the
//!   policy (`INFO memory`, else `CONFIG GET maxmemory-policy`) and refuses
//!   any other with [`Error::InvalidArgument`], writing nothing: an
//!   `allkeys-*` policy evicts any key, a `volatile-*` one keys with a TTL,
//!   as every lock and session key has. When neither read is allowed it
//!   logs a warning and goes on, assuming `noeviction`. At `maxmemory`
//!   new acquisitions fail with nothing written; renewals and releases
//!   still run.
//! - **An ACL user** needs the keys and channels `{recipes}:*` and the
//!   commands the client runs; a refusal is [`Error::PermissionDenied`]
//!   naming them (`ACL SETUSER <user> ~{recipes}:* &{recipes}:* +@read
//!   +@write +@scripting +@pubsub +@connection -@dangerous +time +info`).
//! - TLS: a `rediss://` URL with [`RedisClientBuilder::tls`] (the CA
//!   bundle, and a client certificate for mutual TLS).
//! - **Disconnects.** Under [`LossPolicy::Deadline`] (the default) a
//!   guard rides out a lost connection until its local deadline; under
//!   [`LossPolicy::OnDisconnect`]
//!   ([`RedisClientBuilder::loss_policy`]) the first request that finds the
//!   connection lost fires the loss of every guard of the client.
//! - No Redlock: see the guide, "Choosing a backend: Redis".

#![warn(missing_docs)]
#![deny(missing_debug_implementations)]

mod barrier;
mod barrier_scripts;
mod builder;
mod client;
mod contend;
mod counter;
mod ears;
mod election;
mod group;
mod lock;
mod locks;
mod mutex;
mod names;
mod policy;
mod queue_scripts;
mod replication;
mod rpc;
mod rw_lock;
mod scripts;
mod semaphore;
mod server_info;
mod session;
mod surface;

pub use barrier::{Barrier, DoubleBarrier, RedisWaits};
pub use builder::RedisClientBuilder;
pub use client::RedisClient;
pub use counter::RedisCounter;
pub use election::{Election, LeaderLatch, LeaderSelector, Leadership, RedisElection};
pub use group::Group;
pub use lock::{RedisEntry, RedisLock};
pub use mutex::{Mutex, RedisMutex};
pub use policy::{cluster_hazard, eviction_hazard};
pub use recipes_core;
/// What users of this crate touch from `recipes-core`, so that one
/// dependency line is enough; the whole core crate is [`recipes_core`].
pub use recipes_core::{
    Access, BootInstant, Client, Contender, Error, FenceGate, FencedWrites, FencingToken,
    LatchEvent, LeaderInfo, LeaderObserver, LockKind, LossPolicy, LossReason, LossSignal,
    MultiLock, MultiLockGuard, Participant, Result, Tls, TlsProblem, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_RPC_TIMEOUT, DEFAULT_TTL, MAX_DURATION, MAX_MULTI_LOCK_NAMES, MIN_TTL,
};
/// The `redis` crate, for the values of [`RedisEntry::fenced_script`].
pub use redis;
pub use rw_lock::{RedisRwLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::{RedisSemaphore, Semaphore, SemaphorePermit};

/// A held [`Mutex`]; see [`recipes_core::MutexGuard`].
pub type MutexGuard = recipes_core::MutexGuard<RedisLock>;
