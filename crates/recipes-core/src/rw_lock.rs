//! The read-write lock front end and its two guards.

use std::fmt;
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use crate::backend::{FencedLease, Releasing, RwLockBackend};
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::guard::{deadline_after, lease_accessors, unbounded_wait_ended, Hold};
use crate::metrics::Labels;

mod readers;
pub(crate) use readers::Reading;

/// Which side of a read-write lock an acquisition asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Shared with other readers.
    Read,
    /// Alone.
    Write,
}

/// A read-write lock shared by processes on many machines: many readers at
/// once, or one writer alone.
///
/// **Fair**: a reader waits only for the writers queued before it, a
/// writer for everyone before it, so a stream of readers cannot starve a
/// queued writer; a release wakes only those it lets in. Holding either
/// side is a **lease**, as for [`Mutex`](crate::Mutex): each guard has a
/// fencing token, a loss signal and fenced writes.
///
/// **Fences.** Write tokens strictly increase across writers and are above
/// every token of a reader that held before the writer; a reader's token
/// is above every earlier writer's. So a resource that remembers the
/// highest write token it applied may refuse a read-side action whose
/// token is below it: that reader read before the last write.
///
/// **Downgrade, no upgrade.** A write guard turns into a read guard with
/// [`downgrade`](RwLockWriteGuard::downgrade) without letting another
/// writer in between (the read entry keeps the writer's place in the
/// queue). A read guard cannot become a write guard: two readers upgrading
/// at once would each wait for the other forever (Curator's upgrade never
/// returns). [`RwLockReadGuard::upgrade`], and a `write` on a handle
/// through which the calling thread holds a read guard, are an
/// [`Error::InvalidArgument`] at once: release the read guard first. So
/// is an untimed `write` (or a multi-lock's untimed `lock` with the
/// name's write side) through another handle of the same client, which
/// would otherwise wait for itself forever; a timed one waits for the
/// read guard like for any other reader's (`Ok(None)` at its deadline).
/// The check follows the thread that took the read guard: a read guard
/// moved to another thread still counts for the thread that took it, and
/// a `write` from the thread it moved to waits for it like any other
/// reader's (a timed `try_write_for` then returns `Ok(None)`; an untimed
/// `write` waits until the guard goes); so does a `write` through
/// another client of the same process.
///
/// **Not reentrant.** A thread's second `read` of a name is a new entry:
/// with a writer queued between the two, it waits for that writer, which
/// waits for the first, held by the same thread: for ever, unless timed.
/// Likewise a `read` or `write` under the thread's own write guard. Take
/// each side once per thread, or pass the guard down.
///
/// Generic over an [`RwLockBackend`]; backends export it under their own
/// name with their layout on the store.
pub struct RwLock<B: RwLockBackend> {
    shared: Arc<Shared<B>>,
}

/// What a lock's handle and its guards share.
struct Shared<B: RwLockBackend> {
    backend: B,
    read_labels: Labels,
    write_labels: Labels,
}

impl<B: RwLockBackend> Shared<B> {
    /// The handle's identity ([`Reading`]): its address, stable while a
    /// guard of it lives.
    fn handle(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }

    fn read_guard(self: &Arc<Self>, lease: B::Lease) -> RwLockReadGuard<B> {
        let thread = std::thread::current().id();
        let reading = Reading {
            thread,
            handle: self.handle(),
        };
        readers::add(
            self.backend.runtime().readers(),
            self.backend.name(),
            reading,
        );
        let hold = Hold::counted(lease, &self.read_labels, false);
        RwLockReadGuard {
            token: hold.lease().token(),
            hold,
            reader: Reader {
                shared: self.clone(),
                thread,
            },
        }
    }
}

impl<B: RwLockBackend> RwLock<B> {
    /// A read-write lock over `backend`.
    pub fn from_backend(backend: B) -> RwLock<B> {
        let store = backend.runtime().store();
        let shared = Shared {
            read_labels: Labels::new(store, "read_lock", backend.name()),
            write_labels: Labels::new(store, "write_lock", backend.name()),
            backend,
        };
        RwLock {
            shared: Arc::new(shared),
        }
    }

    /// Label this lock's metrics with its name too (names are unbounded,
    /// so they are no label by default). Call it before taking guards.
    pub fn with_name_label(self) -> RwLock<B> {
        match Arc::try_unwrap(self.shared) {
            Ok(mut shared) => {
                shared.read_labels = shared.read_labels.with_name_label();
                shared.write_labels = shared.write_labels.with_name_label();
                RwLock {
                    shared: Arc::new(shared),
                }
            }
            Err(shared) => RwLock { shared },
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.shared.backend.name()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    pub(crate) fn acquire_read(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Option<RwLockReadGuard<B>>> {
        let shared = &self.shared;
        let got = shared
            .read_labels
            .timed(|| shared.backend.acquire(Access::Read, deadline))?;
        Ok(got.map(|lease| shared.read_guard(lease)))
    }

    /// `Err` when a write with `deadline` from this thread would wait for
    /// a read guard it holds: through this handle at all, through another
    /// only untimed (see [`RwLock`]); a multi-lock asks it first.
    pub(crate) fn refuse_waiting_for_itself(&self, deadline: Option<Instant>) -> Result<()> {
        let shared = &self.shared;
        let (me, handle) = (std::thread::current().id(), shared.handle());
        let untimed = deadline.is_none();
        let readers = shared.backend.runtime().readers();
        let waits_for_itself = readers::blocks(readers, self.name(), me, handle, untimed);
        if waits_for_itself {
            return Err(no_upgrade(self.name()));
        }
        Ok(())
    }

    pub(crate) fn acquire_write(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Option<RwLockWriteGuard<B>>> {
        let shared = &self.shared;
        self.refuse_waiting_for_itself(deadline)?;
        let got = shared
            .write_labels
            .timed(|| shared.backend.acquire(Access::Write, deadline))?;
        Ok(got.map(|lease| {
            let hold = Hold::counted(lease, &shared.write_labels, false);
            RwLockWriteGuard {
                token: hold.lease().token(),
                hold,
                shared: shared.clone(),
            }
        }))
    }

    /// Take the read side, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// Backend errors (connection, session expiry, closed client). Nothing
    /// is left in the store when it fails.
    pub fn read(&self) -> Result<RwLockReadGuard<B>> {
        self.acquire_read(None)?
            .ok_or_else(|| unbounded_wait_ended("read"))
    }

    /// Take the read side only if no writer holds it or waits for it now.
    ///
    /// # Errors
    ///
    /// As for [`read`](RwLock::read); `Ok(None)` when a writer is ahead.
    pub fn try_read(&self) -> Result<Option<RwLockReadGuard<B>>> {
        self.acquire_read(Some(Instant::now()))
    }

    /// Take the read side, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// As for [`read`](RwLock::read); `Ok(None)` when `timeout` passed
    /// first.
    pub fn try_read_for(&self, timeout: Duration) -> Result<Option<RwLockReadGuard<B>>> {
        self.acquire_read(deadline_after(timeout))
    }

    /// Take the read side, waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// As for [`read`](RwLock::read); `Ok(None)` when `deadline` passed
    /// first.
    pub fn try_read_until(&self, deadline: Instant) -> Result<Option<RwLockReadGuard<B>>> {
        self.acquire_read(Some(deadline))
    }

    /// Take the write side, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] at once when the calling thread holds a
    /// read guard of this handle (no upgrade: it would wait for itself);
    /// backend errors. Nothing is left in the store when it fails.
    pub fn write(&self) -> Result<RwLockWriteGuard<B>> {
        self.acquire_write(None)?
            .ok_or_else(|| unbounded_wait_ended("write"))
    }

    /// Take the write side only if nobody holds or waits for the lock now.
    ///
    /// # Errors
    ///
    /// As for [`write`](RwLock::write); `Ok(None)` when anyone is ahead.
    pub fn try_write(&self) -> Result<Option<RwLockWriteGuard<B>>> {
        self.acquire_write(Some(Instant::now()))
    }

    /// Take the write side, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// As for [`write`](RwLock::write); `Ok(None)` when `timeout` passed
    /// first.
    pub fn try_write_for(&self, timeout: Duration) -> Result<Option<RwLockWriteGuard<B>>> {
        self.acquire_write(deadline_after(timeout))
    }

    /// Take the write side, waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// As for [`write`](RwLock::write); `Ok(None)` when `deadline` passed
    /// first.
    pub fn try_write_until(&self, deadline: Instant) -> Result<Option<RwLockWriteGuard<B>>> {
        self.acquire_write(Some(deadline))
    }
}

impl<B: RwLockBackend> Clone for RwLock<B> {
    /// Another handle of the lock; it shares the bookkeeping that refuses
    /// an upgrade.
    fn clone(&self) -> Self {
        RwLock {
            shared: self.shared.clone(),
        }
    }
}

impl<B: RwLockBackend + fmt::Debug> fmt::Debug for RwLock<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("backend", &self.shared.backend)
            .finish()
    }
}

fn no_upgrade(name: &str) -> Error {
    Error::invalid(format!(
        "this thread holds a read lock of {name} and asked for its write lock: it would wait \
         for itself (and two readers upgrading at once would wait for each other forever). \
         Release the read guard first, or take the write lock from the start and downgrade it"
    ))
}

/// The read side of a [`RwLock`], held: a lease with a fencing token.
///
/// Dropping it releases the read lock in the background (never blocking);
/// [`release`](RwLockReadGuard::release) releases and reports the outcome.
#[must_use = "the read lock is released when the guard is dropped"]
#[clippy::has_significant_drop]
pub struct RwLockReadGuard<B: RwLockBackend> {
    hold: Hold<B::Lease>,
    token: FencingToken,
    reader: Reader<B>,
}

/// A read guard's place in its client's bookkeeping of reading threads,
/// given up when the guard goes (released or dropped).
struct Reader<B: RwLockBackend> {
    shared: Arc<Shared<B>>,
    thread: ThreadId,
}

impl<B: RwLockBackend> Drop for Reader<B> {
    fn drop(&mut self) {
        let ours = Reading {
            thread: self.thread,
            handle: self.shared.handle(),
        };
        let runtime = self.shared.backend.runtime();
        readers::remove(runtime.readers(), self.shared.backend.name(), &ours);
    }
}

impl<B: RwLockBackend> RwLockReadGuard<B> {
    lease_accessors!("the read lock");

    /// The fencing token: above every earlier writer's. A resource that
    /// remembers the highest write token it applied may refuse a read-side
    /// action whose token is below it (see [`RwLock`]).
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The backend's lease, for backend-specific operations such as fenced
    /// writes in the store.
    pub fn lease(&self) -> &B::Lease {
        self.hold.lease()
    }

    /// Always [`Error::InvalidArgument`], at once: a read lock is never
    /// upgraded (two readers upgrading at once would wait for each other
    /// forever). Release it and take the write lock, or take the write
    /// lock from the start and [`downgrade`](RwLockWriteGuard::downgrade)
    /// it. The read guard stays held.
    ///
    /// # Errors
    ///
    /// Always, as said.
    pub fn upgrade(&self) -> Result<RwLockWriteGuard<B>> {
        Err(no_upgrade(self.reader.shared.backend.name()))
    }

    /// Release the read lock and wait until the store confirmed.
    ///
    /// # Errors
    ///
    /// As for [`MutexGuard::release`](crate::MutexGuard::release).
    pub fn release(self) -> Result<()> {
        self.hold.release()
    }

    /// [`release`](RwLockReadGuard::release) as a future for the client's
    /// runtime, which keeps the guard's place among its client's readers
    /// until the release is done; `Err` (the guard untouched) when its
    /// lease has none.
    pub(crate) fn release_later(self) -> std::result::Result<Releasing, Self> {
        let RwLockReadGuard {
            hold,
            token,
            reader,
        } = self;
        hold.release_later_keeping(reader)
            .map_err(|(hold, reader)| RwLockReadGuard {
                hold,
                token,
                reader,
            })
    }
}

impl<B: RwLockBackend> fmt::Debug for RwLockReadGuard<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLockReadGuard")
            .field("holder", &self.holder())
            .field("token", &self.token)
            .field("lost", &self.lost().reason())
            .finish()
    }
}

/// The write side of a [`RwLock`], held: a lease with a fencing token.
///
/// Dropping it releases the write lock in the background (never
/// blocking); [`release`](RwLockWriteGuard::release) releases and reports
/// the outcome; [`downgrade`](RwLockWriteGuard::downgrade) keeps reading.
#[must_use = "the write lock is released when the guard is dropped"]
#[clippy::has_significant_drop]
pub struct RwLockWriteGuard<B: RwLockBackend> {
    hold: Hold<B::Lease>,
    token: FencingToken,
    shared: Arc<Shared<B>>,
}

impl<B: RwLockBackend> RwLockWriteGuard<B> {
    lease_accessors!("the write lock");

    /// The fencing token: above every earlier writer's and every earlier
    /// reader's.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The backend's lease, for backend-specific operations such as fenced
    /// writes in the store.
    pub fn lease(&self) -> &B::Lease {
        self.hold.lease()
    }

    /// Turn the write lock into a read lock without letting another writer
    /// in between: the read entry keeps the writer's place in the queue, so
    /// readers queued behind it may now enter and writers stay behind. The
    /// read guard keeps this guard's fencing token.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the write lease was already gone; backend
    /// errors. On any error nothing is held any more: the write entry is
    /// removed (in the background when the store cannot be reached).
    pub fn downgrade(self) -> Result<RwLockReadGuard<B>> {
        let RwLockWriteGuard { hold, shared, .. } = self;
        hold.check()?;
        let read = shared.backend.downgrade(hold.into_lease())?;
        Ok(shared.read_guard(read))
    }

    /// Release the write lock and wait until the store confirmed.
    ///
    /// # Errors
    ///
    /// As for [`MutexGuard::release`](crate::MutexGuard::release).
    pub fn release(self) -> Result<()> {
        self.hold.release()
    }

    /// [`release`](RwLockWriteGuard::release) as a future for the client's
    /// runtime; `Err` (the guard untouched) when its lease has none.
    pub(crate) fn release_later(self) -> std::result::Result<Releasing, Self> {
        let RwLockWriteGuard {
            hold,
            token,
            shared,
        } = self;
        hold.release_later_keeping(shared)
            .map_err(|(hold, shared)| RwLockWriteGuard {
                hold,
                token,
                shared,
            })
    }
}

impl<B: RwLockBackend> fmt::Debug for RwLockWriteGuard<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLockWriteGuard")
            .field("holder", &self.holder())
            .field("token", &self.token)
            .field("lost", &self.lost().reason())
            .finish()
    }
}

/// The backend's lease, so that what only that store has (its own fenced
/// writes, say) is a method of the guard too.
impl<B: RwLockBackend> std::ops::Deref for RwLockReadGuard<B> {
    type Target = B::Lease;

    fn deref(&self) -> &B::Lease {
        self.lease()
    }
}

impl<B: RwLockBackend> std::ops::Deref for RwLockWriteGuard<B> {
    type Target = B::Lease;

    fn deref(&self) -> &B::Lease {
        self.lease()
    }
}
