//! [`PgLock`]: what every PostgreSQL guard holds, in either mode — a queue
//! row (lease mode, [`PgEntry`]) or an advisory lock on a connection of
//! its own (session mode, [`AdvisoryLock`]) — as core's
//! [`HeldEntry`](recipes_core::store::HeldEntry).

use std::time::Duration;

use recipes_core::store::{FencedWrite, HeldEntry, Runtime, StoreEntry};
use recipes_core::{Error, Result};

use crate::advisory_lock::AdvisoryLock;
use crate::client::PgClient;
use crate::entry::{FenceCheck, PgEntry};

/// A held lock, permit or leadership: the lease behind a
/// [`MutexGuard`](crate::MutexGuard), a
/// [`SemaphorePermit`](crate::SemaphorePermit) and a
/// [`Leadership`](crate::Leadership). Its fenced writes (and
/// [`transaction`](crate::FencedTransaction::transaction)s) first lock the
/// name's row in share mode and check that its fence is still ours and
/// the holding still live; a proclaim updates our row's value.
pub type PgLock = HeldEntry<PgHeld>;

/// The PostgreSQL side of a [`PgLock`], by mode.
#[derive(Debug, Clone)]
pub enum PgHeld {
    /// Lease mode: our row of `recipes.queue`.
    Row(PgEntry),
    /// Session mode: an advisory lock on a connection of its own.
    Advisory(AdvisoryLock),
}

macro_rules! either {
    ($self:expr, $e:ident => $body:expr) => {
        match $self {
            PgHeld::Row($e) => $body,
            PgHeld::Advisory($e) => $body,
        }
    };
}

impl PgHeld {
    /// The client it was acquired with.
    pub(crate) fn client(&self) -> &PgClient {
        either!(self, e => &e.client)
    }

    /// What a fenced write or transaction checks first.
    pub(crate) fn check(&self) -> Result<FenceCheck> {
        either!(self, e => e.check())
    }

    /// The refusal of a write once the holding is gone.
    pub(crate) fn rejected(&self, what: &str) -> Error {
        either!(self, e => e.rejected(what))
    }

    /// The TTL of the holding's session.
    pub(crate) fn ttl(&self) -> Duration {
        either!(self, e => e.session.ttl())
    }
}

impl StoreEntry for PgHeld {
    fn runtime(&self) -> &Runtime {
        self.client().runtime()
    }

    fn rpc_timeout(&self) -> Duration {
        self.client().rpc_timeout()
    }

    fn holder(&self) -> &str {
        either!(self, e => e.holder())
    }

    fn session_id(&self) -> i64 {
        either!(self, e => e.session_id())
    }

    fn label(&self) -> &str {
        either!(self, e => e.label())
    }

    fn inside_layout(&self, key: &str) -> Option<&str> {
        either!(self, e => e.inside_layout(key))
    }

    async fn delete(self) -> Result<()> {
        either!(self, e => e.delete().await)
    }

    async fn delete_until_done(self) {
        either!(self, e => e.delete_until_done().await)
    }

    async fn write(self, what: &'static str, write: FencedWrite) -> Result<()> {
        either!(self, e => e.write(what, write).await)
    }
}
