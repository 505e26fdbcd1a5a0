//! A held entry — a ZooKeeper node, an etcd key — as the lease behind every
//! guard, written once: its loss signal, its release (blocking, or handed
//! to the runtime), `proclaim`, and writes fenced by the entry. A store
//! supplies a [`StoreEntry`]: where the entry lives, how to delete it, how
//! to run one fenced write.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::time::Duration;

use crate::backend::{FencedLease, HeldLease, LeadershipLease, Releasing};
use crate::client::FencedWrites;
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::limits::quote;
use crate::loss::{LossReason, LossSignal, LossTrigger};
use crate::retry::within;
use crate::runtime::{Boxed, Runtime};

/// One write fenced by a held entry: applied only while the entry exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FencedWrite {
    /// Set `key` to `value`, creating it if missing.
    Put {
        /// The node path or key.
        key: String,
        /// Its new value.
        value: Vec<u8>,
    },
    /// Delete `key`; no error if it does not exist.
    Delete {
        /// The node path or key.
        key: String,
    },
    /// Set the held entry's own value (a leader's proclaim).
    Proclaim {
        /// Its new value.
        value: Vec<u8>,
    },
}

/// A store's side of a held entry, cheap to clone (the futures it makes run
/// on the client's runtime and own a clone).
pub trait StoreEntry: Clone + fmt::Debug + Send + Sync + 'static {
    /// The client's runtime.
    fn runtime(&self) -> &Runtime;

    /// The deadline of one request.
    fn rpc_timeout(&self) -> Duration;

    /// Where the entry lives: its node path or key.
    fn holder(&self) -> &str;

    /// The session the entry lives on (a ZooKeeper session, an etcd lease).
    fn session_id(&self) -> i64;

    /// The prefix of this entry's log lines (`session=0x…`, `lease=…`).
    fn label(&self) -> &str;

    /// When `key` lies among the recipe's own entries — where a write would
    /// delete ours, forge a contender or change a semaphore's size — the
    /// root of them, for the message; `None` when it lies outside.
    fn inside_layout(&self, key: &str) -> Option<&str>;

    /// Delete the entry once; done too when the session is already gone.
    fn delete(self) -> impl Future<Output = Result<()>> + Send + 'static;

    /// Delete the entry, retrying until done or the session is gone, then
    /// give back what the holding kept in the process.
    fn delete_until_done(self) -> impl Future<Output = ()> + Send + 'static;

    /// After a confirmed [`delete`](StoreEntry::delete): give back what the
    /// holding kept in the process.
    fn released(&self) {}

    /// Run one write fenced by the entry.
    ///
    /// # Errors
    ///
    /// [`Error::FenceRejected`] once the entry is gone;
    /// [`Error::Indeterminate`] when no reply came; backend errors.
    fn write(
        self,
        what: &'static str,
        write: FencedWrite,
    ) -> impl Future<Output = Result<()>> + Send + 'static;
}

/// A held entry: the lease behind a mutex guard, a permit, a leadership.
///
/// Its loss signal fires when the session's lease may be gone, when the
/// entry is deleted by anyone (the store's watch fires
/// [`trigger`](LeadershipLease::trigger)), at release, and when the client
/// closes. Writes through it ([`FencedWrites`]) are applied by the store
/// only while the entry exists — while no other holder can exist — and
/// never among the recipe's own entries. It dereferences to the store's
/// part, for what only that store has.
pub struct HeldEntry<E: StoreEntry> {
    entry: E,
    token: FencingToken,
    trigger: LossTrigger,
    signal: LossSignal,
}

impl<E: StoreEntry> HeldEntry<E> {
    /// Hold `entry`, whose loss is `trigger` (a child of its session's
    /// epoch, fired by the store's watch too) and whose fence is `token`.
    pub fn new(entry: E, trigger: LossTrigger, token: FencingToken) -> HeldEntry<E> {
        log::debug!(
            "[{}] holds {} (fence {token})",
            entry.label(),
            entry.holder()
        );
        let signal = trigger.signal();
        HeldEntry {
            entry,
            token,
            trigger,
            signal,
        }
    }

    /// The store's part.
    pub fn entry(&self) -> &E {
        &self.entry
    }

    /// The session the entry lives on: the ZooKeeper session id, the etcd
    /// lease id.
    pub fn session_id(&self) -> i64 {
        self.entry.session_id()
    }

    /// One fenced write: refused once the loss signal fired (or the lease
    /// deadline passed), its value checked against the stores' limit
    /// before anything is sent, and a write that got no confirmation is
    /// [`Error::Indeterminate`] (it may have landed). A write the store
    /// refused says our entry is gone: the loss signal fires at once, not
    /// when the store's watch or poll tells.
    fn call(&self, what: &'static str, write: FencedWrite) -> Result<()> {
        refuse_if_lost(&self.signal, what, self.entry.holder())?;
        if let FencedWrite::Put { value, .. } | FencedWrite::Proclaim { value } = &write {
            crate::limits::check_value(&format!("{what}'s value"), value)?;
        }
        let e = &self.entry;
        let done = within_rpc(e, what, Box::pin(e.clone().write(what, write)));
        self.seen(done).map_err(Error::unconfirmed)
    }

    /// A fenced write's outcome, as this holding sees it: a write the store
    /// refused says our entry is gone, so the loss signal fires at once, not
    /// when the store's watch or poll tells. For a backend's own fenced
    /// writes (a transaction, a script) beside [`FencedWrites`]'.
    pub fn seen<T>(&self, done: Result<T>) -> Result<T> {
        fire_if_refused(&self.trigger, done)
    }

    fn outside_layout(&self, key: &str) -> Result<String> {
        match self.entry.inside_layout(key) {
            None => Ok(key.to_owned()),
            Some(root) => Err(Error::invalid(format!(
                "a fenced write to {} would land among the recipe's own entries ({root}), \
                 which would break it; write to a key outside {root}",
                quote(key)
            ))),
        }
    }
}

/// Refuse a fenced write (`what`) of the holding `holder` whose loss
/// `signal` fired,
/// or whose lease deadline passed, before anything is sent: the store's
/// own check is not enough, since a store that lost its data and had it
/// restored (an older backup, a replica) may show the holding again — and
/// with it, a write landing after the next holder's.
///
/// # Errors
///
/// [`Error::FenceRejected`], naming why the holding was lost.
pub fn refuse_if_lost(signal: &LossSignal, what: &str, holder: &str) -> Result<()> {
    match signal.reason() {
        None => Ok(()),
        Some(reason) => Err(Error::FenceRejected {
            what: format!(
                "{what}: {holder} was lost before it ({}): nothing was sent",
                reason.label()
            ),
        }),
    }
}

/// A fenced write's outcome `done`, seen by the holding whose loss is
/// `trigger`: a write the store refused says the holding's entry is gone,
/// so its loss fires at once.
pub fn fire_if_refused<T>(trigger: &LossTrigger, done: Result<T>) -> Result<T> {
    if let Err(Error::FenceRejected { .. }) = &done {
        trigger.fire(LossReason::Deleted);
    }
    done
}

impl<E: StoreEntry> Deref for HeldEntry<E> {
    type Target = E;

    fn deref(&self) -> &E {
        &self.entry
    }
}

impl<E: StoreEntry> HeldLease for HeldEntry<E> {
    fn loss_signal(&self) -> &LossSignal {
        &self.signal
    }

    fn holder(&self) -> &str {
        self.entry.holder()
    }

    fn release(self) -> Result<()> {
        self.trigger.fire(LossReason::Released);
        let e = &self.entry;
        match within_rpc(e, "release", Box::pin(e.clone().delete())) {
            Ok(()) => {
                e.released();
                Ok(())
            }
            Err(err) => {
                // Keep trying in the background; the session bounds it.
                self.release_in_background();
                Err(err)
            }
        }
    }

    fn release_in_background(self) {
        self.trigger.fire(LossReason::Released);
        delete_in_background(&self.entry);
    }

    /// The delete of [`release`](HeldLease::release), bounded by the RPC
    /// timeout inside the future.
    fn release_later(self) -> std::result::Result<Releasing, Self> {
        self.trigger.fire(LossReason::Released);
        let e = self.entry;
        let runtime = e.runtime().clone();
        let future: Boxed<()> = Box::pin(async move {
            let err = match within("release", e.rpc_timeout(), e.clone().delete()).await {
                Ok(()) => {
                    e.released();
                    return Ok(());
                }
                Err(err) => err,
            };
            // Counted as the blocking release's call counts it.
            crate::metrics::error(e.runtime().store(), &err);
            // Keep trying in the background; the session bounds it.
            delete_in_background(&e);
            Err(err)
        });
        Ok(Releasing { runtime, future })
    }
}

/// Hand the delete of `e` to its runtime, retried while its session lives.
fn delete_in_background<E: StoreEntry>(e: &E) {
    if !e.runtime().spawn(e.clone().delete_until_done()) {
        log::warn!(
            "[{}] client closed: {} stays until its session ends",
            e.label(),
            e.holder()
        );
    }
}

impl<E: StoreEntry> FencedLease for HeldEntry<E> {
    fn token(&self) -> FencingToken {
        self.token
    }
}

impl<E: StoreEntry> LeadershipLease for HeldEntry<E> {
    /// Set our entry's value, only while it exists. Observers see the new
    /// value; the fence does not change.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when our entry or its session is gone (the loss
    /// signal fires too); [`Error::Indeterminate`] when no reply came.
    fn proclaim(&self, value: &[u8]) -> Result<()> {
        let value = value.to_vec();
        match self.call("proclaim", FencedWrite::Proclaim { value }) {
            Err(Error::FenceRejected { what }) => Err(Error::NotHeld {
                what: format!("leadership of {}: {what}", self.entry.holder()),
            }),
            other => other,
        }
    }

    fn trigger(&self) -> &LossTrigger {
        &self.trigger
    }

    fn resign_async(self) -> impl Future<Output = ()> + Send {
        self.trigger.fire(LossReason::Released);
        self.entry.delete_until_done()
    }
}

impl<E: StoreEntry> FencedWrites for HeldEntry<E> {
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        let (key, value) = (self.outside_layout(key)?, value.to_vec());
        self.call("fenced put", FencedWrite::Put { key, value })
    }

    fn delete(&self, key: &str) -> Result<()> {
        let key = self.outside_layout(key)?;
        self.call("fenced delete", FencedWrite::Delete { key })
    }
}

impl<E: StoreEntry> fmt::Debug for HeldEntry<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldEntry")
            .field("entry", &self.entry)
            .field("token", &self.token)
            .field("lost", &self.signal.reason())
            .finish()
    }
}

/// Run `fut`, built on the heap (it is large: see
/// [`Runtime::call_boxed`](crate::runtime::Runtime::call_boxed)), within
/// the entry's RPC timeout.
fn within_rpc<E: StoreEntry>(e: &E, what: &str, fut: crate::runtime::Boxed<()>) -> Result<()> {
    let deadline = std::time::Instant::now().checked_add(e.rpc_timeout());
    e.runtime().call_boxed(what, deadline, fut)
}
