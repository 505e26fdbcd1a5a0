//! # recipes-core
//!
//! What every backend of the `recipes` coordination library shares: the
//! guards, fencing tokens, the lease deadline and loss signal, errors, the
//! backend traits and the runtime bridge that puts async client crates
//! behind a blocking API.
//!
//! ## A lock is a lease
//!
//! A distributed lock can expire while its holder still runs: a long pause
//! (garbage collection, swapping, a stopped VM), a partition, a stalled
//! keep-alive. Then a second holder runs. Nothing here pretends otherwise.
//! Every guard therefore offers:
//!
//! - a [`FencingToken`] that strictly increases across holders, for the
//!   protected resource to refuse stale writers ([`FenceGate`] is the
//!   in-memory check; backends add writes fenced inside the store);
//! - a [`LossSignal`] that fires the moment the lease **may** be gone,
//!   computed conservatively from the send time of the last acknowledged
//!   request ([`DeadlineTracker`](store::DeadlineTracker)) on a clock that counts while the host
//!   sleeps ([`BootInstant`]);
//! - [`valid_until`](MutexGuard::valid_until), the local estimate of the
//!   lease's end, always earlier than the server's.
//!
//! ## What is guaranteed
//!
//! - While the loss signal has not fired, the server has not given the lease
//!   away, provided the host's clock rate is within 500 ppm of the server's
//!   and no process pause happens between reading
//!   [`is_lost`](LossSignal::is_lost) and acting. A pause right after the
//!   check is exactly what fencing is for.
//! - Fencing tokens from one lock or election strictly increase in the order
//!   holders acquired it, as long as the store's data is not restored from
//!   an older snapshot or wiped.
//!
//! ## Implementation
//!
//! Each client owns a [`Runtime`](store::Runtime): one tokio runtime on one named thread
//! that keeps sessions, heartbeats and watches running at all times. Blocking
//! calls hand a future to that thread and wait on a crossbeam channel with a
//! deadline; one made while no other call is in progress, from a thread with
//! the stack for it, drives the runtime on its own thread instead. Drop of a guard never blocks: the release is handed to the
//! runtime. Loss is fired by the process's one deadline thread, which watches
//! every session's lease deadline, never by a runtime.
//!
//! ## Blocking calls and async code
//!
//! Every call that talks to the store blocks its thread (`lock`, `acquire`,
//! `campaign`, `release`, a fenced `put`, `connect`, `close`). Made inside
//! an async task — a tokio worker thread, or `block_on`'s — it would stall
//! every other task of that thread for as long as it waits, so it returns
//! [`Error::InvalidArgument`] at once instead, saying to call it from
//! `tokio::task::spawn_blocking` or a plain thread (reqwest's blocking
//! client panics there in debug builds; nothing here panics on input).
//! Calls from `spawn_blocking`, from a plain thread (one that entered a
//! runtime with `Handle::enter` included) and from the client's own
//! callbacks' threads work. A task run under
//! `tokio::task::coop::unconstrained` is not detected and blocks its
//! thread. Dropping a guard never blocks, anywhere.

#![warn(missing_docs)]
#![deny(missing_debug_implementations)]

mod backend;
mod backoff;
mod barrier;
mod client;
mod clock;
mod close;
mod connect;
mod count_down;
mod counter;
mod deadline;
mod election;
pub mod engine;
mod error;
mod fence;
mod group;
mod group_claims;
mod guard;
mod held;
mod held_watch;
mod leader;
mod lease;
mod lease_pool;
mod lease_session;
mod limits;
mod loss;
pub mod metrics;
mod multi_lock;
mod mutex;
mod names;
mod observe;
mod owned;
mod presence_poll;
mod queue_election;
mod queue_lock;
mod renewal;
mod retry;
mod runtime;
mod rw_lock;
mod semaphore;
mod sessions;
#[cfg(test)]
mod test_backend;
pub mod tls;

pub use backend::LeaderInfo;
pub use barrier::{Barrier, DoubleBarrier, DoubleBarrierMember, MAX_DOUBLE_BARRIER_COUNT};
pub use client::{Client, Contender, FencedWrites};
pub use clock::BootInstant;
pub use count_down::CountDownLatch;
pub use counter::{Added, Counter, CounterChange, CounterKind, CounterWatch, Versioned};
pub use election::{Election, LeaderObserver, Leadership};
pub use error::{BackendSource, Error, Result};
pub use fence::{FenceGate, FencingToken};
pub use group::{
    Group, GroupChange, GroupView, GroupWatch, Member, Membership, MAX_MEMBER_DATA_BYTES,
    MAX_MEMBER_ID_BYTES,
};
pub use leader::{LatchEvent, LeaderLatch, LeaderSelector, Participant};
pub use lease::LossPolicy;
pub use limits::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_RPC_TIMEOUT, DEFAULT_TTL, MAX_DURATION, MAX_NAME_BYTES,
    MAX_VALUE_BYTES, MIN_TTL,
};
pub use loss::{LossReason, LossSignal};
pub use multi_lock::{check_multi_lock, LockKind, MultiLock, MultiLockGuard, MAX_MULTI_LOCK_NAMES};
pub use mutex::{Mutex, MutexGuard};
pub use runtime::DEFAULT_SHUTDOWN_GRACE;
pub use rw_lock::{Access, RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::{Semaphore, SemaphorePermit};
pub use tls::{Tls, TlsFiles, TlsProblem};

/// What a backend author implements and uses: the backend traits, the
/// contend [`engine`], sessions, leases and their renewal,
/// held entries, limits and checks, the runtime bridge. An application
/// needs none of it: the recipes, their guards and the [`Client`] trait
/// are at the crate's root.
pub mod store {
    pub use crate::backend::{
        ElectionBackend, FencedLease, HeldLease, LeadershipLease, MutexBackend, Releasing,
        RwLockBackend, SemaphoreBackend,
    };
    pub use crate::backoff::Backoff;
    pub use crate::barrier::{check_count, OnRuntime};
    pub use crate::clock::{system_clock, Clock, ManualClock, SharedClock, SystemClock};
    pub use crate::close::end_sessions_within;
    pub use crate::connect::{is_host_port, no_server_answered};
    pub use crate::counter::{CounterBackend, SetIf};
    pub use crate::deadline::{
        check_lease, granted_ttl_hazard, margin, DeadlineTracker, CLOCK_DRIFT_PPM, DEFAULT_SLACK,
    };
    pub use crate::engine;
    pub use crate::engine::gather::{BarrierStore, DoubleBarrierStore, Flag, Gathering, Member};
    pub use crate::engine::group::GroupStore;
    pub use crate::engine::WaitStore;
    pub use crate::group::{check_member, id_taken};
    pub use crate::held::{fire_if_refused, refuse_if_lost, FencedWrite, HeldEntry, StoreEntry};
    pub use crate::held_watch::{watch_held, EntryWatcher};
    pub use crate::leader::validate_participant_id;
    pub use crate::lease::SessionLease;
    pub use crate::lease_pool::{LeaseEpoch, LeaseSessions};
    pub use crate::lease_session::{LeaseSession, LeaseStore, Opened};
    pub use crate::limits::{
        check_timeout, check_ttl, check_value, deadline_in, quote, whole_seconds_up, Settings,
    };
    pub use crate::loss::LossTrigger;
    pub use crate::names::{check_name, check_permits, check_stored_size, permits_name_taken};
    pub use crate::observe::{follow_leader, LeaderWatch};
    pub use crate::owned::{Owned, OwnedEntries, AUDIT_EVERY};
    pub use crate::presence_poll::{PresencePoll, PRESENCE_BATCH};
    pub use crate::queue_election::{ElectionStore, QueueElection};
    pub use crate::queue_lock::{LockStore, QueueLock, QueueSemaphore};
    pub use crate::renewal::{renew_on, Renewal, RenewalStream, StopFlag, StreamEnd};
    pub use crate::retry::{resend_within, until_done, within};
    pub use crate::runtime::Runtime;
    pub use crate::sessions::{HandleQueue, NamedTurns, PooledSession, Sessions, Turn, Turns};
    pub use crate::tls::CALL_MARGIN;
}
