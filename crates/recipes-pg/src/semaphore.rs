//! The PostgreSQL semaphore: the structure of Curator's
//! `InterProcessSemaphoreV2` over the queue rows — an internal mutex
//! (`<name>/locks`), one row per permit (`<name>/leases`, whose first N
//! live rows hold), and the size N in the name's own row of
//! `recipes.names` (kind `semaphore`), stored by the first client and
//! checked by every later one. Core's [`admit`](recipes_core::store::engine::admit)
//! drives both queues. In session mode the permits are N advisory keys
//! (`<name>/leases/<i>`) taken by core's [`take`](recipes_core::store::engine::take),
//! the size stored the same way.

use recipes_core::store::engine::{self, Admission, Role, Rule, Unlock};
use recipes_core::store::{check_stored_size, permits_name_taken};
use recipes_core::Result;
use tokio::time::Instant;
use tokio_postgres::types::Type;

use crate::advisory_lock::AdvisoryLock;
use crate::builder::PgMode;
use crate::client::PgClient;
use crate::contend::{Acquired, RowContender};
use crate::entry::PgEntry;
use crate::held::PgLock;
use crate::names::{kind_shown, other_layout, validate_name};
use crate::slots::{AdvisorySlots, ADVISORY_PERMITS};

/// A counting semaphore in PostgreSQL (the layout above); see
/// [`recipes_core::Semaphore`] for the API and what holds under pause and
/// partition. Made by [`Client::semaphore`](crate::Client::semaphore).
pub type Semaphore = recipes_core::Semaphore<PgSemaphore>;

/// A held permit of a [`Semaphore`]; see [`recipes_core::SemaphorePermit`].
pub type SemaphorePermit = recipes_core::SemaphorePermit<PgLock>;

/// The PostgreSQL semaphore backend: core's semaphore over this client's
/// verbs (`locks.rs`); use it through [`Semaphore`].
pub type PgSemaphore = recipes_core::store::QueueSemaphore<PgClient>;

/// A semaphore's queues and size, as core's
/// [`LockStore::Semaphore`](recipes_core::store::LockStore::Semaphore).
#[derive(Debug, Clone)]
pub struct SemaphoreRows {
    client: PgClient,
    name: String,
    permits: u32,
    lock_name: String,
    lease_name: String,
}

impl SemaphoreRows {
    pub(crate) fn new(client: PgClient, name: &str, permits: u32) -> Result<SemaphoreRows> {
        validate_name("semaphore", name)?;
        recipes_core::store::check_permits(&format!("the PostgreSQL semaphore {name}"), permits)?;
        Ok(SemaphoreRows {
            client,
            name: name.to_owned(),
            permits,
            lock_name: format!("{name}/locks"),
            lease_name: permits_name(name),
        })
    }

    /// Store our size unless one is stored; check the stored one. A name
    /// that holds a lock or election is refused while it has entries; one
    /// with none (used and released) becomes the semaphore's, its fence
    /// and counter kept.
    pub(crate) async fn ensure_size(&self) -> Result<()> {
        let what = format!("store the size of {}", self.name);
        let n = i64::from(self.permits);
        let (db, name, leases) = (self.client.db(), &self.name, &self.lease_name);
        // The name's row and its permits' row in one read: a semaphore
        // stored already is checked with no write. A lock's or another
        // recipe's row at the permits' name would count its entries as
        // permits (and refuse the permits at their first acquisition):
        // refused before the size is stored.
        let read = "SELECT name, kind, permits FROM recipes.names WHERE name IN ($1, $2)";
        let rows = db
            .query(&what, read, &[(name, Type::TEXT), (leases, Type::TEXT)])
            .await?;
        let row_of = |n: &str| rows.iter().find(|r| r.get::<_, &str>(0) == n);
        if let Some(row) = row_of(name).filter(|r| r.get::<_, &str>(1) == "semaphore") {
            return self.check(row.get(1), row.get(2));
        }
        let theirs = row_of(leases).map(|r| r.get::<_, String>(1));
        if let Some(kind) = theirs.filter(|k| k != "permits" && k != ADVISORY_PERMITS) {
            return Err(permits_name_taken("PostgreSQL", name, kind_shown(&kind)));
        }
        let insert = TAKE_NAME;
        db.query(&what, insert, &[(name, Type::TEXT), (&n, Type::INT8)])
            .await?;
        let read = "SELECT kind, permits FROM recipes.names WHERE name = $1";
        let row = db
            .query_opt(&what, read, &[(name, Type::TEXT)])
            .await?
            .ok_or_else(|| crate::sql::unexpected("the name's row vanished"))?;
        self.check(row.get(0), row.get(1))
    }

    /// The name's row, of `kind` with `stored` permits, is our semaphore.
    fn check(&self, kind: String, stored: Option<i64>) -> Result<()> {
        let name = &self.name;
        if kind != "semaphore" {
            return Err(other_layout(name, "semaphore", &kind));
        }
        let stored = stored.map(|s| s.to_string()).unwrap_or_default();
        let what = format!("the PostgreSQL semaphore {name}");
        let config = format!("the permits column of {name}'s row in recipes.names");
        check_stored_size(&what, &config, stored.as_bytes(), self.permits)
    }
}

/// Store the size of the semaphore `$1` (`$2` permits) in its name's row:
/// a new row, or the row of a lease-mode lock or election that has no
/// entries (`kind` and `permits` set; `fence` and `next_seq` kept, so
/// fences never repeat). The row lock of the name orders this against a
/// mutex's enter, which bumps `next_seq` in the statement that adds its
/// entry and refuses a row of kind `semaphore`. Under READ COMMITTED the
/// `WHERE` sees the row as locked but the queue as of the statement's
/// start: `next_seq` unchanged since that start means no entry was added
/// in between, so the queue it read is the queue now; changed, the name
/// stays a lock and the semaphore is refused.
const TAKE_NAME: &str = "INSERT INTO recipes.names AS n (name, kind, permits) \
     VALUES ($1, 'semaphore', $2) \
     ON CONFLICT (name) DO UPDATE SET kind = 'semaphore', permits = $2 \
     WHERE n.kind = 'lock' \
       AND n.next_seq = (SELECT s.next_seq FROM recipes.names s WHERE s.name = $1) \
       AND NOT EXISTS (SELECT 1 FROM recipes.queue q WHERE q.name = $1)";

impl SemaphoreRows {
    /// Session mode: one of the N keys of the permits, with no internal
    /// mutex (the keys themselves admit at most N).
    async fn take_slot(&self, deadline: Option<Instant>) -> Result<Option<PgLock>> {
        let slots = AdvisorySlots {
            client: &self.client,
            name: &self.lease_name,
            kind: ADVISORY_PERMITS,
            slots: self.permits as usize,
            shared: false,
        };
        let won = engine::take(&slots, deadline).await?;
        let client = self.client.clone();
        Ok(won.map(|w| AdvisoryLock::held(client, &self.name, &self.lease_name, w, true)))
    }
}

/// The queue name of the permits of the semaphore `name`.
pub(crate) fn permits_name(name: &str) -> String {
    format!("{name}/leases")
}

impl SemaphoreRows {
    /// Admit one permit: core's semaphore over the two queues, or one of
    /// the N advisory keys in session mode.
    pub(crate) fn admit(
        &self,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Option<PgLock>>> + Send + 'static {
        let this = self.clone();
        async move {
            if this.client.mode() == PgMode::Session {
                return this.take_slot(deadline).await;
            }
            let contender = |name, kind, rule, role| RowContender {
                client: &this.client,
                name,
                kind,
                rule,
                role,
                value: &[],
                outside: None,
            };
            let admission = Admission {
                lock: contender(&this.lock_name, "lock", Rule::Mutex, Role::Mutex),
                permits: contender(
                    &this.lease_name,
                    "permits",
                    Rule::Leases(this.permits as usize),
                    Role::Permit,
                ),
                // No round trip: the size was checked when the handle was
                // made.
                size: (),
            };
            let won = engine::admit(&admission, deadline).await?;
            let client = this.client.clone();
            Ok(won.map(|a| PgEntry::held(client, &this.lease_name, a, true)))
        }
    }
}

/// A win of the internal mutex is given back by deleting its row:
/// awaited, so that a `try_acquire` right after finds the mutex free.
impl Unlock for Acquired {
    fn unlock(self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.ticket.remove()
    }
}
