//! The store's verbs for core's queue locks ([`LockStore`]). Lease mode:
//! the queue rows of `contend.rs` under a name of kind `lock` or
//! `rwlock`, through core's contend engine. Session mode: an advisory
//! lock on the name's key (`slots.rs`), exclusive or shared, through
//! core's take engine. `mutex.rs` and `rw_lock.rs` have the layouts.

use recipes_core::store::engine::{self, Rule};
use recipes_core::store::{LockStore, Runtime};
use recipes_core::{Access, LockKind, Result};
use tokio::time::Instant;
use tokio_postgres::types::Type;

use crate::advisory_lock::AdvisoryLock;
use crate::builder::PgMode;
use crate::client::PgClient;
use crate::entry::PgEntry;
use crate::held::PgLock;
use crate::mutex::{NameHandle, Queue};
use crate::rw_lock::RWLOCK;
use crate::semaphore::SemaphoreRows;
use crate::slots::{AdvisorySlots, ADVISORY, ADVISORY_RW};

/// A lock's name, checked, as [`LockStore::Queue`].
#[derive(Debug, Clone)]
pub struct PgLockQueue(NameHandle);

impl LockStore for PgClient {
    type Queue = PgLockQueue;
    type Lease = PgLock;

    fn runtime(&self) -> &Runtime {
        PgClient::runtime(self)
    }

    fn queue(&self, name: &str, kind: LockKind) -> Result<PgLockQueue> {
        let handle = NameHandle::new(self.clone(), kind.recipe(), name)?;
        // Only a name under a semaphore's is read (no hop to the runtime
        // for any other).
        let under_semaphore = crate::names::semaphore_of(name).is_some();
        if self.mode() == PgMode::Session && under_semaphore {
            let (client, name) = (self.clone(), handle.name.clone());
            self.call("check the name's layout", async move {
                crate::mint::refuse_inside_semaphore(&client, &name).await
            })?;
        }
        Ok(PgLockQueue(handle))
    }

    /// Session mode's advisory key of each name, `hashtext(name)` in one
    /// statement: a mutex and a read-write lock take their name's key in
    /// the client's namespace, so two names of one hash are one lock.
    fn lock_keys(&self, names: &[&str]) -> Result<Option<Vec<i64>>> {
        if self.mode() != PgMode::Session {
            return Ok(None);
        }
        let (client, names) = (self.clone(), names.iter().map(|n| n.to_string()).collect());
        self.call("read the names' advisory keys", async move {
            advisory_keys(&client, names).await.map(Some)
        })
    }

    fn take(
        &self,
        queue: &PgLockQueue,
        kind: LockKind,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Option<PgLock>>> + Send + 'static {
        let handle = queue.0.clone();
        let rw = kind.rule() == Rule::ReadWrite;
        async move {
            let (client, name) = (&handle.client, handle.name.as_str());
            if client.mode() == PgMode::Session {
                let slots = AdvisorySlots {
                    client,
                    name,
                    kind: if rw { ADVISORY_RW } else { ADVISORY },
                    slots: 1,
                    shared: kind == LockKind::Read,
                };
                let won = engine::take(&slots, deadline).await?;
                return Ok(won.map(|w| AdvisoryLock::held(client.clone(), name, name, w, false)));
            }
            let queue = Queue {
                kind: if rw { RWLOCK } else { "lock" },
                rule: kind.rule(),
                role: kind.role(),
            };
            let won = handle.contend_as(queue, &[], deadline).await?;
            // A mutex's holding is not a read-write lock's: its fenced
            // checks lock the name's row, not the gate.
            let side = match kind {
                LockKind::Read => Some(Access::Read),
                LockKind::Write => Some(Access::Write),
                _ => None,
            };
            Ok(won.map(|a| match side {
                Some(side) => PgEntry::held_rw(client.clone(), name, a, side),
                None => PgEntry::held(client.clone(), name, a, false),
            }))
        }
    }

    fn downgrade(&self, _queue: &PgLockQueue, write: PgLock) -> Result<PgLock> {
        crate::rw_lock::downgrade(self, write)
    }

    type Semaphore = SemaphoreRows;
    type Permit = PgLock;

    /// The size is stored in the name's row by the first client and
    /// checked here; a name that holds a lock or election is refused.
    fn semaphore_queue(&self, name: &str, permits: u32) -> Result<SemaphoreRows> {
        let rows = SemaphoreRows::new(self.clone(), name, permits)?;
        let this = rows.clone();
        self.call("check the semaphore size", async move {
            this.ensure_size().await
        })?;
        Ok(rows)
    }

    fn admit(
        &self,
        semaphore: &SemaphoreRows,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Option<PgLock>>> + Send + 'static {
        semaphore.admit(deadline)
    }
}

/// The `hashtext` of each of `names`, in their order.
async fn advisory_keys(client: &PgClient, names: Vec<String>) -> Result<Vec<i64>> {
    let sql = "SELECT hashtext(t.n)::int8 FROM unnest($1::text[]) WITH ORDINALITY AS t(n, i) \
               ORDER BY t.i";
    let rows = (client.db())
        .query(
            "read the names' advisory keys",
            sql,
            &[(&names, Type::TEXT_ARRAY)],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
