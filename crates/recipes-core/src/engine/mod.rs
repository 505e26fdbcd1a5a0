//! The contend engine every store shares, in the shape of Curator's
//! `LockInternals` and its driver.
//!
//! ```text
//!            recipes (core)                      drivers (one per store)
//!  Mutex ──────────┐
//!  RwLock ─────────┤
//!  Election ───────┼──► contend(driver, deadline) ──► epoch · ticket · enter
//!  LeaderLatch ────┤        │  Rule::decide()         list · wait · confirm
//!  LeaderSelector ─┘        │  Backoff · Undo         remove · won
//!  Semaphore ──► admit(semaphore driver)
//!                 = ensure_size, contend(internal mutex), contend(permits)
//! ```
//!
//! [`contend`] runs the loop once for every store: enter our entry, read the
//! queue, decide with the recipe's pure [`Rule`], wait for the one entry
//! that must go, confirm and mint the fence; remove our entry on every
//! other way out (error, timeout, lost epoch, a stop, a dropped future),
//! waiting for that on a stop ([`until_stopped`]); start over with a new
//! entry after an epoch loss; back off between retries. A store
//! is a [`ContendDriver`]: its few async verbs, no loop and no decision.
//! [`admit`] composes the semaphore (Curator's `InterProcessSemaphoreV2`
//! structure) from two drivers and a stored size.
//!
//! A store whose locks are slots to take rather than a queue to join
//! (PostgreSQL's advisory locks) is a [`SlotDriver`] of the second loop,
//! [`take`]: try every slot, wait a bounded slice at the server for one,
//! confirm and mint the fence, give back on every other way out. Both
//! loops share the epoch, restart and cut-off logic.
//!
//! The engine is deterministic given its driver and the tokio clock: it
//! starts no threads and sleeps only in [`Backoff`](crate::store::Backoff) and in
//! waits it races against the deadline, so the simulation in this module's
//! tests (an in-memory driver under tokio's paused clock, seeded faults)
//! replays every schedule from its seed.

mod contend;
mod decide;
mod driver;
pub mod gather;
pub mod group;
mod nudge;
mod semaphore;
#[cfg(test)]
mod semaphore_tests;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod sim_store;
mod stop;
mod take;
mod undo;
mod wait;
#[cfg(test)]
mod wait_sim;
#[cfg(test)]
mod wait_sim_store;

pub use contend::{contend, queue_reads};
pub use decide::{decide, Decision, Role, Rule, Verdict};
pub use driver::{ContendDriver, Entered, Listing};
pub use nudge::Nudge;
pub use semaphore::{admit, Admission, SemaphoreDriver, SizeCheck, Unlock};
pub use stop::until_stopped;
pub use take::{take, SlotDriver};
pub use wait::{once, wait_until, Check, Condition, WaitStore};
