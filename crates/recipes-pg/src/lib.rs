//! # recipes-pg
//!
//! The PostgreSQL backend of `recipes`, in two modes behind the same
//! client surface ([`PgMode`], chosen on the builder):
//!
//! - *lease mode* (the default): every lock is a row of the schema
//!   `recipes` whose session expires in database time, so it works
//!   through a transaction-mode pooler (pgbouncer) as well as directly;
//! - *session mode* ([`PgClientBuilder::session_mode`]): a mutex or a
//!   semaphore's permit is an advisory lock held on a connection of its
//!   own, whose session is the lease (see "Session mode" below).
//!
//! The API and its guarantees are core's ([`recipes_core`]); this crate
//! documents the layout, the sessions and what a database needs.
//!
//! ```no_run
//! # fn main() -> Result<(), recipes_pg::Error> {
//! use std::time::Duration;
//! use recipes_pg::{Client, FencedTransaction};
//! use recipes_pg::tokio_postgres::types::Type;
//! let client = recipes_pg::PgClient::builder("postgres://app:secret@db:5432/app")
//!     .ttl(Duration::from_secs(10))
//!     .connect()?;
//! let mutex = client.mutex("/locks/nightly-report")?;
//! if let Some(guard) = mutex.try_lock_for(Duration::from_secs(5))? {
//!     // The application's own tables, written only while the lock is ours:
//!     guard.transaction(|tx| {
//!         let fence = guard.token().get() as i64;
//!         tx.execute(
//!             "UPDATE reports SET state = 'started', fence = $1 WHERE id = 1",
//!             &[(&fence, Type::INT8)],
//!         )
//!     })?;
//!     guard.release()?;
//! }
//! client.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! ## Layout
//!
//! The schema `recipes` (its tables are described in the `schema` module)
//! is created by the first client that connects, or refused when it
//! exists in a layout version this crate does not know. A contender is a
//! row of `recipes.queue`; its `seq` comes from the name's row of
//! `recipes.names`, locked until the insert commits, so queue order is
//! commit order. The first live rows (whose session has not expired in
//! database time) hold; the fence is the name's counter, bumped by the
//! holder's confirm (floored by the database clock, see "What is
//! guaranteed"). Holders are shown as `<name>/<entry uuid>`.
//!
//! A read-write lock ([`RwLock`], `client.rw_lock(name)`) is the same
//! queue under a name of kind `rwlock`, each row with its `role` (`read`
//! or `write`), one `seq` for both. The confirming statement decides who
//! holds — a reader when no live writer is ahead of it, a writer when no
//! live entry is — and bumps the name's fence in the same write, so
//! readers' and writers' tokens come from one counter in the order they
//! came to hold: a writer's token is above every earlier reader's and
//! writer's, a reader's above every earlier writer's. A reader waits on
//! the nearest live writer ahead of it, a writer on the live entry just
//! ahead (no herd). A downgrade sets its row's role to `read` where it
//! stands (same `seq`, same token), and the readers waiting on it look
//! again; a writer queued behind it stays there. A read holder's fenced
//! writes check that its row is live and the name's fence is at or above
//! its own (later readers move it), under the same share lock as a
//! mutex's, so no writer's confirm runs before they commit.
//!
//! ## Session mode
//!
//! A mutex takes `pg_advisory_lock(namespace, hashtext(name))` (the
//! two-int form: `pg_locks` shows `classid` = the namespace,
//! [`DEFAULT_NAMESPACE`] unless [`PgClientBuilder::advisory_namespace`]
//! says otherwise, `objid` = the hash, `objsubid` = 2, so an
//! application's one-argument locks never meet ours); a semaphore of N
//! permits takes one of the N keys `<name>/leases/<i>`. Each acquisition
//! has a connection of its own (advisory locks are re-entrant per
//! session; up to 16 idle ones are kept for the next acquisitions, until
//! the server ends them), with `idle_session_timeout` = the TTL so the
//! server ends a stopped holder's session, and heartbeats every TTL/3 that ask
//! `pg_locks` whether this backend still holds our keys, and the name's
//! row in `recipes.names` whether it still admits the holder's fenced
//! writes (a mutex's or a writer's fence still its own, a reader's not
//! passed by a writer's, a permit's semaphore's row there), and stamp the
//! keys in `recipes.advisory` (database time; a lost stamp is made
//! again). The fence is the name's counter in
//! `recipes.names`, bumped on the lock's connection right after the grant
//! (a mutex's or a permit's try takes the key, bumps the fence and stamps
//! the key in one statement: an uncontended lock and release is a round
//! trip each);
//! a holder granted a key whose previous holder ended without releasing it
//! (crashed, terminated: the server frees the key at once) first waits
//! until that holder's last stamp + its TTL, so the old holder's loss has
//! fired before the new one holds; a permit's fence is minted under its
//! key's gate (a transaction-scoped advisory lock that its holder's
//! fenced writes and transactions take shared), so it also waits for
//! every one of them to end. The holder shows as
//! `<key>/backend-<pid>`. Two
//! names whose hashes collide exclude each other (never the reverse).
//! Waits for a key are slices of at most a second at the server
//! (`lock_timeout`): not fair. A fence's mint waits, unsliced, for the
//! fenced transactions its previous holder began while it held (the
//! name's row lock, a permit's key's gate). Elections, latches and selectors are rows in both modes.
//!
//! A read-write lock takes the name's key with `pg_advisory_lock_shared`
//! (a reader) or `pg_advisory_lock` (a writer), under a name of kind
//! `advisory-rw`, and is fair the way PostgreSQL's lock manager is: a new
//! shared request queues behind an exclusive one that waits at the server,
//! and the server grants in queue order. So its waits are not sliced: one
//! statement waits until the deadline (an hour at most), since a wait cut
//! short leaves the server's queue, and the readers queued behind a
//! waiting writer would be granted at that moment. Meanwhile the lock
//! connection's heartbeats ask about its backend (by PID and start) over
//! the client's statement connection; an acquisition that gives up
//! cancels its wait (`pg_cancel_backend`). Each holder mints its fence on
//! the name's row after the grant (a writer's stays the name's while it
//! holds; readers move it). Each reader stamps its own heartbeat row (the
//! key's name, U+001F, `reader-<pid>-<backend start, µs>`: no name
//! holds a control character; a later backend given a dead reader's PID
//! has a row of its own): a writer granted the key waits out every reader
//! that ended without releasing, a reader only a writer that did. A
//! downgrade takes the shared lock in the same session (granted at once:
//! a backend's own locks do not conflict) and releases the exclusive one,
//! in one statement: readers waiting at the server then enter, but those
//! queued behind another waiting writer stay behind it (the server's
//! order). `contenders` lists the holders and the backends waiting, with
//! their role, from `pg_locks` (waiters in the order they began to wait).
//! [`PgClient::with_xact_lock`] takes the same key for one transaction
//! (`pg_advisory_xact_lock`). A transaction-mode pooler is refused at
//! connect; needs PostgreSQL 14 or later.
//!
//! ## Barriers
//!
//! Barrier and double barrier ([`Barrier`], [`DoubleBarrier`]: `client.barrier(name)`,
//! `client.double_barrier(name, count)`) are rows of the schema `recipes`
//! in both modes, with no layout change:
//!
//! - **Barrier**: the name's row of `recipes.names`, of kind `barrier`.
//!   The barrier is up while that row exists and either its `fence` is 1
//!   (set plainly: it stays when the setter dies) or a row of
//!   `recipes.queue` under the name is live (set
//!   [tied to the session](recipes_core::Barrier::tied_to_session): the
//!   setter's session owns that row, which goes with it). A removal
//!   deletes the name's row and its queue rows in one statement; a tied
//!   barrier whose setter died is down, its name's row left until the
//!   next set or removal.
//! - **Double barrier**: the name's row, of kind `double-barrier`, counts
//!   the members' places (`next_seq`) and holds the flag `ready` in
//!   `fence` (0: none; else the place it was set at, above every member
//!   who entered before it). A member is a row of `recipes.queue` under
//!   the name, owned by its client's session: it goes with the session
//!   (a revoke deletes it at once; a crashed member's row stops counting
//!   when its session expires, in database time). The last member out
//!   deletes the name's row.
//!
//! Waiting: the queue's trigger notifies the name's channel on every
//! change of a member or tied row (a session's end included); the
//! barrier's removal and the flag's setting notify it too
//! (`pg_notify`). A waiter listens on the client's listening connection
//! (`LISTEN`, subscribed before each read, so no change after a read is
//! missed). A session that expires (its client crashed or stopped) sends
//! nothing: a waiter reads again when the earliest session it depends on
//! would expire, and every poll interval
//! ([`PgClientBuilder::poll_interval`](crate::PgClientBuilder::poll_interval))
//! in case a notification was lost or the listener is not reachable
//! (behind a transaction-mode pooler without a listen URL).
//!
//! A name's row has one kind: a barrier or double barrier on a lock's,
//! semaphore's, counter's or the other barrier's name is refused with
//! [`Error::InvalidArgument`] naming what the name holds, and so is a
//! lock or an election on a barrier's name.
//!
//! ## Group membership
//!
//! A group ([`Group`]: `client.group(name)`) is rows of the schema
//! `recipes` in both modes, with no layout change: the name's row of
//! `recipes.names`, of kind `group`, holds the version (`next_seq`) and the
//! number of members (`permits`); a member is a row of `recipes.queue`
//! under the name, owned by its client's session, whose `entry` is
//! `md5(<name> || '/' || <id>)` (so a second live member of an id is
//! refused by the unique `entry`; a row whose session expired is taken
//! over) and whose `value` is the id, a zero byte and the member's data.
//! Every join and leave sets the version to `greatest(version + 1, the
//! database clock in µs)` in the statement that writes the member, and so
//! does a read that finds a member whose session expired (it deletes the
//! row in that statement) or fewer rows than `permits` (a session's end
//! deleted them). The last member out deletes the name's row, and an empty
//! group's view carries the database clock as its version, so versions
//! only rise. A watch waits as a barrier's waiter does (above): the queue
//! trigger's notification, and a read again at the earliest member
//! session's expiry and every poll interval.
//!
//! ## Privileges
//!
//! - To create the schema (first use): `CREATE` on the database (or an
//!   existing, empty schema `recipes` the role owns).
//! - To use it: `USAGE` on the schema `recipes`; `SELECT, INSERT, UPDATE,
//!   DELETE` on its tables; `USAGE` on the sequence of `recipes.sessions`:
//!   `GRANT USAGE ON SCHEMA recipes TO app; GRANT SELECT, INSERT, UPDATE,
//!   DELETE ON ALL TABLES IN SCHEMA recipes TO app; GRANT USAGE ON ALL
//!   SEQUENCES IN SCHEMA recipes TO app;`
//!
//! A role without them gets [`Error::PermissionDenied`] at connect; a
//! refused password [`Error::Unauthenticated`].
//!
//! ## Connections
//!
//! A client keeps two connections of its own to the URL, each shared
//! (pipelined) by its tasks: the *statement connection* — enters, looks,
//! releases, fenced checks, a session's revoke, the sweep of expired
//! sessions, session mode's heartbeats — and the *lease connection* — the
//! session's grant and renewals and the poll of the rows the client
//! holds, statements that never wait for another transaction's lock. A
//! statement that waits at the server (an enter of a name whose row a
//! fenced transaction holds in share mode, until that commits) holds up
//! only the statements behind it on its own connection, never the
//! renewals, so it cannot make the client lose its locks. (The two were
//! one connection before: count one more per client against
//! `max_connections` and a pooler's pool size.) Besides these: the
//! listening connection (to [`PgClientBuilder::listen_url`] when given),
//! opened at the first wait that listens; one connection per open
//! transaction (a fenced one, [`PgClient::with_xact_lock`]'s), up to four
//! kept idle for the next; in session mode one connection per held lock,
//! up to four kept idle.
//!
//! ## Poolers
//!
//! Every statement is unnamed (`query_typed`: parse, bind and execute in
//! one round trip) and stands alone or inside an explicit transaction, so
//! pgbouncer's `pool_mode = transaction` runs it on any backend. `LISTEN`
//! cannot work through such a pooler: give a direct URL for it
//! ([`PgClientBuilder::listen_url`]), or waits poll
//! ([`PgClientBuilder::poll_interval`]). Session mode, the read-write
//! lock's included, is refused at connect behind such a pooler (its locks
//! belong to a backend the pooler hands to others): use lease mode there,
//! or a session-mode pool.
//!
//! ## What is guaranteed
//!
//! Core's guarantees, with the database's clock as the server's: a session
//! row expires `ttl` after its last renewal in `clock_timestamp()` time,
//! so the database's clock must not step backwards (a step back revives
//! expired sessions; NTP slewing is fine). A dropped connection costs no
//! lock under the default [`LossPolicy::Deadline`](recipes_core::LossPolicy)
//! (the client reconnects and renews before the deadline);
//! [`PgClientBuilder::loss_policy`]`(LossPolicy::OnDisconnect)` makes it
//! the loss of every guard of the session it carried.
//!
//! Fences strictly increase per name, in both modes, even when the
//! database loses the name's row: each is minted as
//! `greatest(last fence + 1, the database clock in µs since the Unix
//! epoch)` (about 1.7e15 today: strictly increasing, not dense), so it is
//! never above the clock when minted, and after the schema `recipes` is
//! dropped, its tables truncated, or an older backup restored, the next
//! fence is the clock, above every fence issued before. A holder whose
//! rows were lost — or whose name's fence is no longer its own, the name's
//! row gone back with an older backup — loses its lock at its next
//! renewal or poll of its rows (a missing table counts as its row gone),
//! and its fenced writes are refused at once; a client whose schema vanished creates it again
//! (logging a warning) before its next acquisition. What this cannot
//! cover: the database clock stepping back past the last fence *and* the
//! data lost before the clock catches up again. A read-write lock's
//! tokens are the next of the sequence `recipes.rw_order` instead, which
//! a draw sets to the database clock in µs when it lags by more than
//! 10 ms: after an older backup restored its next tokens are above every
//! earlier one too, unless the restore came within 10 ms of its dump.
//! Session ids are given at the clock too, so a session opened after a
//! restore never takes the id of one opened since the dump, whose client
//! would renew it as its own and miss the loss of its locks. Nothing here is
//! replicated by us: after a failover to a replica that missed the newest
//! commits (or whose clock is behind the old primary's), a lock may be
//! held twice and a fence repeated — synchronous replication narrows it;
//! fence in the same database (fenced writes, [`FencedTransaction`]) to
//! stay safe.

#![warn(missing_docs)]
#![deny(missing_debug_implementations)]

#[macro_use]
mod advisory;
mod advisory_lock;
mod barrier;
mod builder;
mod client;
mod contend;
mod counter;
mod db;
mod double_barrier;
mod election;
mod entry;
mod group;
mod held;
mod listen;
mod locks;
mod mint;
mod mutex;
mod names;
mod pooler;
mod prepared;
mod rw_lock;
mod schema;
mod semaphore;
mod server_info;
mod session;
mod slots;
mod sql;
mod surface;
mod transaction;
mod xact;

pub use advisory::DEFAULT_NAMESPACE;
pub use advisory_lock::AdvisoryLock;
pub use barrier::{Barrier, DoubleBarrier, PgWaits};
pub use builder::{PgClientBuilder, PgMode, DEFAULT_POLL_INTERVAL};
pub use client::PgClient;
pub use counter::PgCounter;
pub use election::{Election, LeaderLatch, LeaderSelector, Leadership, PgElection};
pub use entry::{PgEntry, RowWatch};
pub use group::Group;
pub use held::{PgHeld, PgLock};
pub use mutex::{Mutex, PgMutex};
pub use names::entry_of;
pub use recipes_core;
/// What users of this crate touch from `recipes-core`, so that one
/// dependency line is enough; the whole core crate is [`recipes_core`].
pub use recipes_core::{
    Access, BootInstant, Client, Contender, Error, FenceGate, FencedWrites, FencingToken,
    LatchEvent, LeaderInfo, LeaderObserver, LockKind, LossReason, LossSignal, MultiLock,
    MultiLockGuard, Participant, Result, Tls, TlsProblem, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_RPC_TIMEOUT, DEFAULT_TTL, MAX_DURATION, MAX_MULTI_LOCK_NAMES, MIN_TTL,
};
pub use rw_lock::{PgRwLock, RwLock};
pub use semaphore::{PgSemaphore, Semaphore, SemaphorePermit};
/// The PostgreSQL client crate, for the parameter types and rows of
/// [`Transaction`].
pub use tokio_postgres;
pub use transaction::{FencedTransaction, Transaction};

/// A held [`Mutex`]; see [`recipes_core::MutexGuard`].
pub type MutexGuard = recipes_core::MutexGuard<PgLock>;
/// A held read side of a [`RwLock`]; see [`recipes_core::RwLockReadGuard`].
pub type RwLockReadGuard = recipes_core::RwLockReadGuard<PgRwLock>;
/// A held write side of a [`RwLock`]; see [`recipes_core::RwLockWriteGuard`].
pub type RwLockWriteGuard = recipes_core::RwLockWriteGuard<PgRwLock>;
