//! The multi-lock: mutexes and read-write locks' sides, all or nothing,
//! composed once from their guards on any store.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex as PlMutex;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::guard::{deadline_after, unbounded_wait_ended};
use crate::loss::LossSignal;
use crate::mutex::Mutex;
use crate::queue_lock::QueueLock;
use crate::rw_lock::{Access, RwLock};

mod held;

use held::{give_back, release_all, Held};

/// The most names one multi-lock takes. Each name is a lock of its own,
/// taken one after the other: a list longer than this is almost surely a
/// mistake (a lock per row, say), and would hold a caller for a round trip
/// per name on every acquisition.
pub const MAX_MULTI_LOCK_NAMES: usize = 64;

/// What a multi-lock takes on one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// The name's mutex.
    Mutex,
    /// The read side of the name's read-write lock.
    Read,
    /// The write side of the name's read-write lock.
    Write,
}

enum PartLock<C: Client> {
    Mutex(Mutex<QueueLock<C>>),
    Rw(RwLock<QueueLock<C>>, Access),
}

/// Several locks taken all or nothing: mutexes, and the read or write
/// side of read-write locks, on one store.
///
/// They are always taken in one canonical order (by name; by the store's
/// lock key where two names can share one, as PostgreSQL session mode's
/// hashed advisory keys can), so two multi-locks over the same names,
/// listed in any order, never deadlock each other. An acquisition that
/// fails or whose deadline passes gives back everything it took before it
/// returns; one whose earlier lease is lost while it waits for a later
/// name gives everything back and starts over, so no guard is handed out
/// with a part already lost. The guard
/// holds one fencing token per name; its loss signal fires when any one of
/// the leases may be gone, and says which.
///
/// Made by [`Client::multi_lock`] or
/// [`multi_lock_of`](Client::multi_lock_of).
pub struct MultiLock<C: Client> {
    parts: Vec<(String, PartLock<C>)>,
}

impl<C: Client> MultiLock<C> {
    /// A multi-lock over `parts` of `client`'s store.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] before anything is written: an empty
    /// list, more than [`MAX_MULTI_LOCK_NAMES`], a name twice (its read
    /// and write sides included), names that nest (`/a` and `/a/b`: one
    /// lock's entries would sit inside the other's), a name the store
    /// refuses, or two names the store locks under one key.
    pub fn new(client: &C, parts: &[(&str, LockKind)]) -> Result<MultiLock<C>> {
        let mut sorted = by_name(parts);
        check_names(&sorted)?;
        let names: Vec<&str> = sorted.iter().map(|(name, _)| *name).collect();
        if let Some(keys) = client.lock_keys(&names)? {
            sorted = by_keys(sorted, &keys)?;
        }
        let mut built = Vec::with_capacity(sorted.len());
        for (name, kind) in sorted {
            let lock = match kind {
                LockKind::Mutex => PartLock::Mutex(client.mutex(name)?),
                LockKind::Read => PartLock::Rw(client.rw_lock(name)?, Access::Read),
                LockKind::Write => PartLock::Rw(client.rw_lock(name)?, Access::Write),
            };
            built.push((name.to_owned(), lock));
        }
        Ok(MultiLock { parts: built })
    }

    /// The names, in the order they are taken.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().map(|(name, _)| name.as_str())
    }

    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<MultiLockGuard<C>>> {
        // A write part this thread reads would wait for itself: refused
        // before any name is waited for, not when its turn comes.
        for (_, lock) in &self.parts {
            if let PartLock::Rw(rw, Access::Write) = lock {
                rw.refuse_waiting_for_itself(deadline)?;
            }
        }
        loop {
            match self.take_all(deadline)? {
                Taken::All(guard) => return Ok(Some(guard)),
                Taken::TimedOut => return Ok(None),
                Taken::Lost(_) if deadline.is_some_and(|d| Instant::now() >= d) => return Ok(None),
                Taken::Lost(name) => {
                    log::info!("multi-lock: {name} was lost while the rest was taken; again")
                }
            }
        }
    }

    /// One pass over the names; on every way out but a win, everything
    /// taken is given back (a lease taken earlier may be lost while a later
    /// name is waited for).
    fn take_all(&self, deadline: Option<Instant>) -> Result<Taken<C>> {
        let mut held: Vec<(String, Held<C>)> = Vec::with_capacity(self.parts.len());
        for (name, lock) in &self.parts {
            let got = match lock {
                PartLock::Mutex(m) => take(m.acquire(deadline), Held::Mutex),
                PartLock::Rw(rw, Access::Read) => take(rw.acquire_read(deadline), Held::Read),
                PartLock::Rw(rw, Access::Write) => take(rw.acquire_write(deadline), Held::Write),
            };
            let ended = match got {
                Ok(Some(h)) => {
                    held.push((name.clone(), h));
                    match held.iter().find(|(_, h)| h.lost().is_lost()) {
                        Some((lost, _)) => Ok(Taken::Lost(lost.clone())),
                        None => continue,
                    }
                }
                Ok(None) => Ok(Taken::TimedOut),
                Err(e) => Err(e),
            };
            give_back(held);
            return ended;
        }
        Ok(Taken::All(MultiLockGuard::over(held)))
    }

    /// Take every lock, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// The first error of any one lock; everything taken before it is
    /// given back first.
    pub fn lock(&self) -> Result<MultiLockGuard<C>> {
        self.acquire(None)?
            .ok_or_else(|| unbounded_wait_ended("multi-lock"))
    }

    /// Take every lock only if each is free now.
    ///
    /// # Errors
    ///
    /// As for [`lock`](MultiLock::lock); `Ok(None)` when one is held.
    pub fn try_lock(&self) -> Result<Option<MultiLockGuard<C>>> {
        self.acquire(Some(Instant::now()))
    }

    /// Take every lock, waiting at most `timeout` in all.
    ///
    /// # Errors
    ///
    /// As for [`lock`](MultiLock::lock); `Ok(None)` when `timeout` passed
    /// first (everything taken is given back).
    pub fn try_lock_for(&self, timeout: Duration) -> Result<Option<MultiLockGuard<C>>> {
        self.acquire(deadline_after(timeout))
    }

    /// Take every lock, waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// As for [`try_lock_for`](MultiLock::try_lock_for).
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<MultiLockGuard<C>>> {
        self.acquire(Some(deadline))
    }
}

impl<C: Client> fmt::Debug for MultiLock<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &self.names().collect::<Vec<_>>())
            .finish()
    }
}

/// How one pass over the names ended.
enum Taken<C: Client> {
    All(MultiLockGuard<C>),
    TimedOut,
    /// This name's lease was lost before the last name was taken.
    Lost(String),
}

fn take<G, H>(got: Result<Option<G>>, wrap: impl FnOnce(G) -> H) -> Result<Option<H>> {
    got.map(|g| g.map(wrap))
}

/// Check a multi-lock's `parts` as [`MultiLock::new`] does before it asks
/// the store anything (the list's length, a name twice, names that nest):
/// for a caller that refuses bad input before it connects, as the command
/// line does.
///
/// # Errors
///
/// [`Error::InvalidArgument`] saying what to change.
pub fn check_multi_lock(parts: &[(&str, LockKind)]) -> Result<()> {
    check_names(&by_name(parts))
}

/// `parts` in the order of their names' bytes.
fn by_name<'a>(parts: &[(&'a str, LockKind)]) -> Vec<(&'a str, LockKind)> {
    let mut sorted = parts.to_vec();
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    sorted
}

/// The names sorted: none twice, none inside another, within the limit.
fn check_names(sorted: &[(&str, LockKind)]) -> Result<()> {
    if sorted.is_empty() {
        return Err(Error::invalid(
            "a multi-lock needs at least one name; give the names to lock",
        ));
    }
    if sorted.len() > MAX_MULTI_LOCK_NAMES {
        return Err(Error::invalid(format!(
            "a multi-lock of {} names is over the limit of {MAX_MULTI_LOCK_NAMES}: lock fewer \
             names (a lock over the group, say)",
            sorted.len()
        )));
    }
    for pair in sorted.windows(2) {
        let (a, b) = (pair[0].0, pair[1].0);
        if a == b {
            return Err(Error::invalid(format!(
                "the multi-lock names {a:?} twice: list each name once (its read and write \
                 sides are one name: take the write side)"
            )));
        }
    }
    for (i, (a, _)) in sorted.iter().enumerate() {
        let inner = sorted[i + 1..].iter().find(|(b, _)| nests(a, b));
        if let Some((b, _)) = inner {
            return Err(Error::invalid(format!(
                "the multi-lock names {a:?} and {b:?}, which nest: the lock {b:?} would live \
                 inside {a:?}'s entries; lock names that do not contain one another"
            )));
        }
    }
    Ok(())
}

/// `sorted` (by name) in the order of the store's lock keys (`keys`, one
/// a name, in that order; see [`LockStore::lock_keys`]): two names of one
/// key are refused, since the multi-lock would wait for itself.
///
/// [`LockStore::lock_keys`]: crate::store::LockStore::lock_keys
fn by_keys<'a>(sorted: Vec<(&'a str, LockKind)>, keys: &[i64]) -> Result<Vec<(&'a str, LockKind)>> {
    if keys.len() != sorted.len() {
        return Err(Error::Backend {
            message: format!(
                "the store gave {} lock keys for {} names",
                keys.len(),
                sorted.len()
            ),
            retryable: false,
            source: None,
        });
    }
    let mut keyed: Vec<(i64, (&str, LockKind))> = keys.iter().copied().zip(sorted).collect();
    // Stable: the names' order is kept within a key (only to name them).
    keyed.sort_by_key(|(key, _)| *key);
    if let Some(pair) = keyed.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        let (a, b) = (pair[0].1 .0, pair[1].1 .0);
        return Err(Error::invalid(format!(
            "the multi-lock names {a:?} and {b:?}, which this store locks under one key \
             (their keys collide): the multi-lock would wait for itself; rename one, or \
             lock one name that stands for both"
        )));
    }
    Ok(keyed.into_iter().map(|(_, part)| part).collect())
}

/// Whether `inner` lies under `outer` (`/a` and `/a/b`), as store paths
/// and key prefixes do.
fn nests(outer: &str, inner: &str) -> bool {
    let outer = outer.trim_end_matches('/');
    inner.len() > outer.len() && inner.starts_with(outer) && inner[outer.len()..].starts_with('/')
}

/// Every lock of a [`MultiLock`], held.
///
/// Dropping it releases every lock in the background (never blocking);
/// [`release`](MultiLockGuard::release) releases them all and reports.
#[must_use = "the locks are released when the guard is dropped"]
#[clippy::has_significant_drop]
pub struct MultiLockGuard<C: Client> {
    held: Vec<(String, Held<C>)>,
    lost: LossSignal,
    lost_name: Arc<PlMutex<Option<String>>>,
}

impl<C: Client> MultiLockGuard<C> {
    fn over(held: Vec<(String, Held<C>)>) -> MultiLockGuard<C> {
        let lost_name = Arc::new(PlMutex::new(None));
        for (name, h) in &held {
            let (lost_name, name) = (lost_name.clone(), name.clone());
            h.lost().on_fire(move |_| {
                lost_name.lock().get_or_insert(name);
            });
        }
        let signals: Vec<LossSignal> = held.iter().map(|(_, h)| h.lost().clone()).collect();
        MultiLockGuard {
            held,
            lost: LossSignal::any_of(&signals),
            lost_name,
        }
    }

    fn part(&self, name: &str) -> Option<&Held<C>> {
        self.held.iter().find(|(n, _)| n == name).map(|(_, h)| h)
    }

    /// The fencing token of `name`'s lock; `None` for a name this guard
    /// does not hold.
    pub fn token(&self, name: &str) -> Option<FencingToken> {
        self.part(name).map(Held::token)
    }

    /// Where `name`'s lock lives in the store (node path or key); `None`
    /// for a name this guard does not hold.
    pub fn holder(&self, name: &str) -> Option<&str> {
        self.part(name).map(Held::holder)
    }

    /// Every name with its fencing token, in the order they were taken.
    pub fn tokens(&self) -> Vec<(&str, FencingToken)> {
        self.held
            .iter()
            .map(|(n, h)| (n.as_str(), h.token()))
            .collect()
    }

    /// Fires when any one of the locks may be gone; see
    /// [`lost_name`](MultiLockGuard::lost_name) for which.
    pub fn lost(&self) -> &LossSignal {
        &self.lost
    }

    /// Whether any one of the locks may be gone (reads the clocks).
    pub fn is_lost(&self) -> bool {
        self.lost.is_lost()
    }

    /// The name whose lock was lost first, once one was; `None` while all
    /// hold. A lease whose deadline passed before its signal fired is
    /// named too.
    pub fn lost_name(&self) -> Option<String> {
        let parts = self.held.iter().map(|(n, h)| (n.as_str(), h.lost()));
        first_lost(&self.lost_name, parts)
    }

    /// [`lost_name`](MultiLockGuard::lost_name) as a function that needs
    /// no borrow of the guard (for a supervisor that releases the guard
    /// elsewhere), reading the same signals.
    pub fn lost_name_reader(&self) -> impl Fn() -> Option<String> + Send + Sync + 'static {
        let first = self.lost_name.clone();
        let parts: Vec<(String, LossSignal)> = (self.held.iter())
            .map(|(n, h)| (n.clone(), h.lost().clone()))
            .collect();
        move || first_lost(&first, parts.iter().map(|(n, l)| (n.as_str(), l)))
    }

    /// `Ok(())` while every lock holds.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] with the first lost lock's reason.
    pub fn check(&self) -> Result<()> {
        let lost = self.held.iter().find_map(|(_, h)| h.lost().reason());
        match lost {
            Some(reason) => Err(Error::LeaseLost { reason }),
            None => Ok(()),
        }
    }

    /// A write of `value` at `key`, fenced in the store by `name`'s
    /// holding (see [`FencedWrites::put`](crate::FencedWrites::put)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name this guard does not hold;
    /// [`Error::FenceRejected`] once that holding is gone; backend errors.
    pub fn put(&self, name: &str, key: &str, value: &[u8]) -> Result<()> {
        self.named(name)?.put(key, value)
    }

    /// A delete of `key`, fenced in the store by `name`'s holding.
    ///
    /// # Errors
    ///
    /// As for [`put`](MultiLockGuard::put).
    pub fn delete(&self, name: &str, key: &str) -> Result<()> {
        self.named(name)?.delete(key)
    }

    fn named(&self, name: &str) -> Result<&Held<C>> {
        self.part(name).ok_or_else(|| {
            Error::invalid(format!(
                "this multi-lock does not hold {name:?}; it holds {:?}",
                self.held.iter().map(|(n, _)| n).collect::<Vec<_>>()
            ))
        })
    }

    /// Release every lock, all at once, waiting until the store confirmed
    /// each (one round trip in all; at most one RPC timeout when the store
    /// does not answer).
    ///
    /// # Errors
    ///
    /// The first error of any one release (every release is tried): as for
    /// [`MutexGuard::release`](crate::MutexGuard::release).
    pub fn release(self) -> Result<()> {
        let mut released = release_all(self.held).into_iter().map(|(_, r)| r);
        released.find(Result::is_err).unwrap_or(Ok(()))
    }
}

impl<C: Client> fmt::Debug for MultiLockGuard<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("tokens", &self.tokens())
            .field("lost", &self.lost_name())
            .finish()
    }
}

#[cfg(test)]
#[path = "multi_lock_tests.rs"]
mod tests;

/// The name whose lock was lost first (`first`, set as its signal fired),
/// else the first of `parts` whose lease lapsed before its signal fired.
fn first_lost<'a>(
    first: &PlMutex<Option<String>>,
    mut parts: impl Iterator<Item = (&'a str, &'a LossSignal)>,
) -> Option<String> {
    if let Some(name) = first.lock().clone() {
        return Some(name);
    }
    parts
        .find(|(_, lost)| lost.is_lost())
        .map(|(name, _)| name.to_owned())
}
