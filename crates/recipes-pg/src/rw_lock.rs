//! The PostgreSQL read-write lock, in both modes.
//!
//! - **Lease mode**: the queue rows of `contend.rs` under a name of kind
//!   `rwlock`, each with its `role` (`read`, `write`), one `seq` for both;
//!   the confirming statement decides core's `Rule::ReadWrite` (a reader
//!   holds with no live writer ahead, a writer with no live entry ahead).
//!   Enters and confirms pass the name's gate (an advisory transaction
//!   lock, shared for readers, exclusive for writers) instead of locking
//!   the name's row, so readers enter, confirm and release together; seqs
//!   and tokens come from one sequence drawn behind the gate, so a
//!   writer's token is above every earlier holder's and a reader's above
//!   every earlier writer's (see `contend.sql`). A reader
//!   waits on the nearest live writer ahead, a writer on the live entry
//!   just ahead. **Downgrade** sets our row's role to `read` in place (same
//!   `seq`, same token); the queue's trigger then tells the readers that
//!   wait on it to look again.
//! - **Session mode**: `pg_advisory_lock_shared` for a reader,
//!   `pg_advisory_lock` for a writer, on the name's key (`slots.rs`), under
//!   a name of kind `advisory-rw`; each holder mints its fence on the
//!   name's row right after the grant. **Downgrade** takes the shared lock
//!   on the same key in the same session (granted at once: a backend's own
//!   locks never conflict) and releases the exclusive one, in one
//!   statement.

use recipes_core::store::{HeldLease, LeadershipLease};
use recipes_core::{Access, Error, Result};
use tokio_postgres::types::Type;

use crate::client::PgClient;
use crate::entry::PgEntry;
use crate::held::{PgHeld, PgLock};

/// The kind of a lease-mode read-write lock's row in `recipes.names`.
pub(crate) const RWLOCK: &str = "rwlock";

/// A read-write lock in PostgreSQL (rows of `recipes.queue` with their
/// role, or an advisory lock taken shared or exclusive in session mode);
/// see [`recipes_core::RwLock`] for the API, its fairness and what its
/// fences mean. Made by
/// [`Client::rw_lock`](recipes_core::Client::rw_lock).
pub type RwLock = recipes_core::RwLock<PgRwLock>;

/// The PostgreSQL read-write lock backend: core's queue lock over this
/// client's verbs (`locks.rs`); use it through [`RwLock`].
pub type PgRwLock = recipes_core::store::QueueLock<PgClient>;

/// Lease mode: our row's role becomes `read` where it stands. Session
/// mode: the shared lock is taken and the exclusive one released in
/// one statement on the lock's connection. Either way the token stays
/// the writer's; on an error the write lease is released (in the
/// background if need be).
pub(crate) fn downgrade(client: &PgClient, write: PgLock) -> Result<PgLock> {
    let held = write.entry().clone();
    let trigger = write.trigger().clone();
    let token = recipes_core::store::FencedLease::token(&write);
    let done = client.call("downgrade", async move {
        match held {
            PgHeld::Row(e) => e.downgrade().await.map(PgHeld::Row),
            PgHeld::Advisory(a) => a.downgrade().await.map(PgHeld::Advisory),
        }
    });
    match done {
        Ok(read) => Ok(recipes_core::store::HeldEntry::new(read, trigger, token)),
        Err(e) => {
            write.release_in_background();
            Err(e)
        }
    }
}

impl PgEntry {
    /// Our write row becomes a read row in place.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when our row is gone (or expired); backend errors.
    async fn downgrade(self) -> Result<PgEntry> {
        let sql = "UPDATE recipes.queue q SET role = 'read' FROM recipes.sessions s \
                   WHERE q.entry = $1 AND q.role = 'write' AND s.id = q.session \
                     AND s.expires_at > clock_timestamp() RETURNING 1";
        let what = format!(
            "downgrade {}",
            recipes_core::store::StoreEntry::holder(&self)
        );
        let row = self
            .client
            .db()
            .query_opt(&what, sql, &[(&self.entry, Type::UUID)])
            .await?;
        if row.is_none() {
            return Err(Error::NotHeld {
                what: format!("{what}: the write entry is gone"),
            });
        }
        let mut read = self;
        read.rw = Some(Access::Read);
        Ok(read)
    }
}
