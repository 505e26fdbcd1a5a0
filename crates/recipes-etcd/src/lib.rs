//! # recipes-etcd
//!
//! The etcd backend of the `recipes` coordination library: a blocking
//! client whose lease keep-alives and watches run on its own runtime thread,
//! and recipes with the key layouts of etcd's Go `concurrency` package, so
//! `etcdctl lock` contends with them correctly.
//!
//! ```no_run
//! # fn main() -> Result<(), recipes_etcd::Error> {
//! use std::time::Duration;
//! let client = recipes_etcd::EtcdClient::builder(["127.0.0.1:2379"])
//!     .ttl(Duration::from_secs(10))
//!     .connect()?;
//! println!("lease TTL granted: {:?}", client.session_ttl());
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
//! ## Sessions
//!
//! Each client holds one etcd lease (its *session*), granted at connect and
//! kept alive every TTL/3 on the runtime thread, whether or not a caller is
//! blocked. Every lock of the client is a key bound to that lease. Replies
//! to keep-alives are matched to the send times of their requests, so the
//! local deadline (`valid_until`) is the send time of the newest
//! acknowledged keep-alive plus the granted TTL, less a margin for clock
//! drift and scheduling.
//!
//! ## Under pause and partition
//!
//! Guaranteed, with clocks running within 500 ppm of the server's:
//!
//! - a guard's loss signal fires no later than the server can expire the
//!   lease and give the lock to another contender — by the local deadline,
//!   when a keep-alive reply says the lease is gone, or when the key is
//!   deleted;
//! - a lost lease is never reused: the next acquisition grants a new one;
//! - fencing tokens of one lock strictly increase across holders, ours and
//!   those of `etcdctl lock` / Go's `concurrency.Mutex` alike, as long as
//!   the store is not restored from an older snapshot or wiped (revisions
//!   then restart);
//! - fenced writes in etcd ([`FencedWrites`], [`EtcdKey::txn`]) are refused once
//!   our key is gone.
//!
//! Not guaranteed: that a holder stops in time. A process paused right after
//! checking its signal resumes after another holder took over; only the
//! fence stops its writes. During a partition the local deadline passes and
//! the guard is lost even if the server still keeps the lease; a key whose
//! deletion could not be confirmed stays until the lease ends.
//!
//! ## Implementation
//!
//! One tokio runtime with one named thread per client, behind
//! [`recipes_core::Runtime`]; each blocking call hands a future to it and
//! waits with a deadline. etcd-client's own timeout option is never set (it
//! would also cut off watches); each request is timed on its own. The lease
//! keep-alive stream and watch streams are re-opened when their member dies
//! (etcd-client does not). etcd-client's lock and campaign RPCs are never
//! used: without a lease they get a 60 s server lease nobody renews.

#![warn(missing_docs)]
#![deny(missing_debug_implementations)]

mod builder;
mod client;
mod contend;
mod election;
mod key;
mod latch;
mod lock;
mod mutex;
mod names;
mod observe;
mod permit;
mod rpc;
mod selector;
mod semaphore;
mod session;
mod surface;
mod watch;

pub use builder::EtcdClientBuilder;
pub use client::EtcdClient;
pub use election::{Election, EtcdElection, Leadership};
/// The etcd client crate, for the transaction operations of
/// [`EtcdKey::txn`].
pub use etcd_client;
pub use latch::LeaderLatch;
pub use lock::{EtcdKey, EtcdLock};
pub use mutex::{EtcdMutex, Mutex};
pub use recipes_core;
/// What users of this crate touch from `recipes-core`, so that one
/// dependency line is enough; the whole core crate is [`recipes_core`].
pub use recipes_core::{
    BootInstant, Client, Contender, Error, FenceGate, FencedWrites, FencingToken, LatchEvent,
    LeaderInfo, LeaderObserver, LossReason, LossSignal, Participant, Result,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_RPC_TIMEOUT, DEFAULT_TTL, MAX_DURATION, MIN_TTL,
};
pub use selector::LeaderSelector;
pub use semaphore::{EtcdSemaphore, Semaphore, SemaphorePermit};

/// A held [`Mutex`]: its token, loss signal, and fenced writes through
/// [`lease`](recipes_core::MutexGuard::lease).
///
/// Under pause and partition its loss signal fires before etcd can give the
/// lock away (see [`Mutex`]); what it cannot do is stop a holder that is
/// paused right after checking it — pass the token with every write.
pub type MutexGuard = recipes_core::MutexGuard<EtcdLock>;
