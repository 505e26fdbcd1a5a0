//! The PostgreSQL read-write lock, in both modes.
//!
//! - **Lease mode**: the queue rows of `contend.rs` under a name of kind
//!   `rwlock`, each with its `role` (`read`, `write`), one `seq` for both;
//!   the confirming statement decides core's `Rule::ReadWrite` (a reader
//!   holds with no live writer ahead, a writer with no live entry ahead)
//!   and bumps the name's fence in the same write, so readers' and
//!   writers' tokens come from one counter in holding order. A reader
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

use std::time::Instant as StdInstant;

use recipes_core::store::engine::{self, Role, Rule};
use recipes_core::store::{HeldLease, LeadershipLease, RwLockBackend};
use recipes_core::{Access, Error, Result};
use tokio::time::Instant;
use tokio_postgres::types::Type;

use crate::advisory_lock::AdvisoryLock;
use crate::builder::PgMode;
use crate::client::PgClient;
use crate::entry::PgEntry;
use crate::held::{PgHeld, PgLock};
use crate::mutex::{NameHandle, Queue};
use crate::slots::{AdvisorySlots, ADVISORY_RW};

/// The kind of a lease-mode read-write lock's row in `recipes.names`.
pub(crate) const RWLOCK: &str = "rwlock";

/// A read-write lock in PostgreSQL (rows of `recipes.queue` with their
/// role, or an advisory lock taken shared or exclusive in session mode);
/// see [`recipes_core::RwLock`] for the API, its fairness and what its
/// fences mean. Made by
/// [`Client::rw_lock`](recipes_core::Client::rw_lock).
pub type RwLock = recipes_core::RwLock<PgRwLock>;

/// The PostgreSQL read-write lock backend; use it through [`RwLock`].
#[derive(Debug, Clone)]
pub struct PgRwLock(NameHandle);

impl PgRwLock {
    pub(crate) fn new(client: PgClient, name: &str) -> Result<PgRwLock> {
        NameHandle::new(client, "read-write lock", name).map(PgRwLock)
    }
}

/// The queue of a read-write lock's name, entered as `access`.
fn queue(access: Access) -> Queue {
    Queue {
        kind: RWLOCK,
        rule: Rule::ReadWrite,
        role: match access {
            Access::Read => Role::Reader,
            Access::Write => Role::Writer,
        },
    }
}

impl RwLockBackend for PgRwLock {
    type Lease = PgLock;

    fn name(&self) -> &str {
        &self.0.name
    }

    fn runtime(&self) -> &recipes_core::store::Runtime {
        self.0.client.runtime()
    }

    fn acquire(&self, access: Access, deadline: Option<StdInstant>) -> Result<Option<PgLock>> {
        let this = self.0.clone();
        let deadline = deadline.map(Instant::from_std);
        let what = match access {
            Access::Read => "read lock",
            Access::Write => "write lock",
        };
        self.0.client.runtime().call_until(what, None, async move {
            let client = this.client.clone();
            let name = &this.name;
            if client.mode() == PgMode::Session {
                let slots = AdvisorySlots {
                    client: &client,
                    name,
                    kind: ADVISORY_RW,
                    slots: 1,
                    shared: access == Access::Read,
                };
                let won = engine::take(&slots, deadline).await?;
                return Ok(won.map(|w| AdvisoryLock::held(client.clone(), name, name, w, false)));
            }
            let won = this.contend_as(queue(access), &[], deadline).await?;
            let reading = access == Access::Read;
            Ok(won.map(|a| PgEntry::held_rw(client.clone(), name, a, reading)))
        })
    }

    /// Lease mode: our row's role becomes `read` where it stands. Session
    /// mode: the shared lock is taken and the exclusive one released in
    /// one statement on the lock's connection. Either way the token stays
    /// the writer's; on an error the write lease is released (in the
    /// background if need be).
    fn downgrade(&self, write: PgLock) -> Result<PgLock> {
        let held = write.entry().clone();
        let trigger = write.trigger().clone();
        let token = recipes_core::store::FencedLease::token(&write);
        let client = self.0.client.clone();
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
        read.reading = true;
        Ok(read)
    }
}
