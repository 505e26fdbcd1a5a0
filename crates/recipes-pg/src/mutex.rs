//! The PostgreSQL mutex. Session mode: one advisory key (`slots.rs`).
//! Lease mode: the queue rows of `contend.rs` with one holder.
//! The holder is the live entry with the lowest `seq`; its fence is the
//! name's counter, bumped by the confirm that found none ahead, so fences
//! strictly increase in holding order across every client of the database.

use recipes_core::store::engine::{self, Role, Rule};
use recipes_core::Result;
use tokio::time::Instant;

use crate::client::PgClient;
use crate::contend::{Acquired, RowContender};
use crate::names::{enclosing_semaphore, validate_name};

/// A handle of a lock or election name: its client and its queue.
#[derive(Debug, Clone)]
pub(crate) struct NameHandle {
    pub(crate) client: PgClient,
    pub(crate) name: String,
}

impl NameHandle {
    /// A handle of `name`, checked as the name of a `what`.
    pub(crate) fn new(client: PgClient, what: &str, name: &str) -> Result<NameHandle> {
        validate_name(what, name)?;
        Ok(NameHandle {
            client,
            name: name.to_owned(),
        })
    }

    /// Contend with `value` in the entry until ours or `deadline`.
    pub(crate) async fn contend(
        &self,
        value: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired>> {
        self.contend_as(Queue::LOCK, value, deadline).await
    }

    /// Contend in the queue of `queue`'s kind and rule, as its role.
    pub(crate) async fn contend_as(
        &self,
        queue: Queue,
        value: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired>> {
        let driver = RowContender {
            client: &self.client,
            name: &self.name,
            kind: queue.kind,
            rule: queue.rule,
            role: queue.role,
            value,
            outside: enclosing_semaphore(&self.name),
        };
        engine::contend(&driver, deadline).await
    }
}

/// What a name's queue is: the kind of its row, its rule, our entry's role.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Queue {
    pub(crate) kind: &'static str,
    pub(crate) rule: Rule,
    pub(crate) role: Role,
}

impl Queue {
    /// A mutex's or an election's queue.
    pub(crate) const LOCK: Queue = Queue {
        kind: "lock",
        rule: Rule::Mutex,
        role: Role::Mutex,
    };
}

/// A mutex in PostgreSQL (rows of `recipes.queue` under the name, or an
/// advisory lock in session mode); see
/// [`recipes_core::Mutex`] for the API and what holds under pause and
/// partition. Made by [`Client::mutex`](crate::Client::mutex). Threads of
/// one process contend in the database like any other client.
pub type Mutex = recipes_core::Mutex<PgMutex>;

/// The PostgreSQL mutex backend: core's queue lock over this client's
/// verbs (`locks.rs`); use it through [`Mutex`].
pub type PgMutex = recipes_core::store::QueueLock<PgClient>;
