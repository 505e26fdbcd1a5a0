//! Who drives a client's runtime: its own thread between calls, and the
//! calling thread for the length of its call when no other call is in
//! progress.
//!
//! A tokio current-thread runtime has one core (its task queue, IO driver
//! and timers); whoever is in `Runtime::block_on` with the core drives every
//! task — keep-alives, watches, other callers' futures — not only its own
//! future. The runtime thread holds the core while the client is idle. A
//! blocking call with nobody else in a call takes the core on its own
//! thread (asking the runtime thread to hand it over if it holds it) and
//! runs its future there: the request and its reply need no wake-up of
//! another thread. When the call ends, the core is left free for
//! [`GRACE`], so a caller that calls again at once (a lock, then its
//! release) takes it straight back; after that the runtime thread takes it
//! again. The runtime thread learns that the core was left without a
//! wake-up per call: while calls come and go it looks every [`LOOK`]; a
//! leaving caller wakes it only after one call lasted a whole look (then
//! it sleeps until woken). A call made while another thread drives is
//! spawned onto the runtime and waited for on a channel, as before; the
//! driver runs it, and if the driver leaves first the runtime thread takes
//! the core at once.
//!
//! A caller drives only with at least as much stack left as the runtime
//! thread has in all: a store client's poll can be deep (etcd-client's
//! lease grant takes ~1.8 MB of stack in a debug build), and a caller's
//! thread may have been given a small stack; with less, the call takes the
//! channel path and the runtime thread's stack, as before. The runtime
//! thread is given a default thread's stack less [`CALLER_FRAMES`]
//! ([`runtime_stack_size`]), so that a caller on a thread of the default
//! size (`std::thread::spawn`'s) drives unless its own frames are deeper
//! than that: with equal stacks a caller, always a little deeper in its
//! own thread than the runtime thread is when it starts, never would.
//!
//! While the core is free nobody polls the IO driver or the timers: a
//! keep-alive or a watch event waits at most [`LOOK`] + [`GRACE`], a task
//! spawned from another thread at most [`LOOK`] + [`GRACE`] (tokio's timers are
//! themselves rounded up to the millisecond). The loss deadline never depends on it: it is fired by
//! the process's deadline thread (`lease.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};

use super::Control;
use crate::error::{Error, Result};

/// How long the core stays free after a call before the runtime thread
/// takes it back.
pub(super) const GRACE: Duration = Duration::from_micros(500);

/// While calls come and go, how often the runtime thread looks whether
/// the core was left: a leaving caller wakes it only when it sleeps
/// without a timeout (one call lasted a whole look), so that a tight loop
/// of calls costs the runtime thread a wake-up per look, not two per call.
/// Each look is a wake-up of its own thread: at 2 ms, eight clients whose
/// callers handed a lock on among them (`bench etcd M2`) spent 1.4–1.7×
/// the raw contenders' CPU a handoff, 3.4 of these wake-ups in it; at
/// 16 ms, 1.2–1.45×. What it delays is bounded as the module's notes
/// say (a background event by at most this + [`GRACE`] after a call
/// ends), and never a loss: the deadline thread fires that.
pub(super) const LOOK: Duration = Duration::from_millis(16);

/// Room a caller's own frames may take on a thread of the default stack
/// size and still drive (see the module's notes).
pub(super) const CALLER_FRAMES: usize = 64 << 10;

/// The runtime thread's stack: std's default for a new thread
/// (`RUST_MIN_STACK`, else 2 MiB) less [`CALLER_FRAMES`].
pub(super) fn runtime_stack_size() -> usize {
    let default = std::env::var("RUST_MIN_STACK")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(2 << 20);
    default.saturating_sub(CALLER_FRAMES).max(CALLER_FRAMES)
}

/// The runtime thread holds the core (or is about to take it).
const RUNTIME: u8 = 0;
/// Nobody holds the core: a call just ended.
const FREE: u8 = 1;
/// A caller drives the core during its call.
const CALLER: u8 = 2;

/// Who holds the core, shared by the runtime thread and callers.
pub(super) struct Baton {
    state: AtomicU8,
    epoch: Instant,
    /// When the last driving caller left, in nanoseconds since `epoch`.
    left_at: AtomicU64,
    /// When tokio's scheduler last had a turn (ran the queued tasks and
    /// polled the IO driver and timers), as far as we know: the runtime
    /// thread left `block_on`, or a driven call waited. A call whose
    /// future answers on its first poll gives it none (see
    /// [`Driving::run`]).
    turned_at: AtomicU64,
    /// Calls spawned onto the runtime and not yet answered: while any is,
    /// the core is never left free.
    hops: AtomicUsize,
    /// The runtime thread sleeps until a leaving caller wakes it (else it
    /// wakes by itself within [`LOOK`]).
    untimed: AtomicBool,
    /// A caller asks the runtime thread to give the core up.
    wanted: Notify,
    /// The runtime thread is gone: a driving caller stops with `Closed`.
    closed: AtomicBool,
    closed_notify: Notify,
    runtime_thread: OnceLock<Thread>,
    /// The runtime thread's stack left when it started: a caller needs as
    /// much to drive (`None`: unknown on this platform, callers never do).
    runtime_stack: OnceLock<Option<usize>>,
    /// The tokio runtime; the runtime thread empties the slot when it ends,
    /// so that only a caller still in `block_on` may hold it after.
    rt: Mutex<Option<Arc<tokio::runtime::Runtime>>>,
}

impl Baton {
    pub(super) fn new() -> Baton {
        Baton {
            state: AtomicU8::new(RUNTIME),
            epoch: Instant::now(),
            left_at: AtomicU64::new(0),
            turned_at: AtomicU64::new(0),
            hops: AtomicUsize::new(0),
            untimed: AtomicBool::new(false),
            wanted: Notify::new(),
            closed: AtomicBool::new(false),
            closed_notify: Notify::new(),
            runtime_thread: OnceLock::new(),
            runtime_stack: OnceLock::new(),
            rt: Mutex::new(None),
        }
    }

    /// Set by the runtime thread once its runtime is built, on a stack of
    /// `asked` bytes. What a caller needs is the stack the runtime thread
    /// was given, at most what it asked for: the C library may hand a new
    /// thread a larger stack than asked (glibc reuses an exited thread's
    /// cached stack of up to four times the size), and a default-sized
    /// caller would then never drive.
    pub(super) fn started(&self, rt: Arc<tokio::runtime::Runtime>, asked: usize) {
        let _ = self.runtime_thread.set(std::thread::current());
        let needed = stack_left().map(|left| left.min(asked));
        let _ = self.runtime_stack.set(needed);
        *self.rt.lock() = Some(rt);
    }

    /// Called as the runtime thread ends, however it ends: a driving caller
    /// stops with `Closed`, and the runtime is dropped here unless a caller
    /// is still in `block_on` (then when that caller leaves).
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.closed_notify.notify_waiters();
        let rt = self.rt.lock().take();
        drop(rt);
    }

    /// Wake the runtime thread while it waits for a driving caller (a
    /// control message was sent; while it drives, the message wakes it).
    pub(super) fn unpark_runtime_thread(&self) {
        if let Some(t) = self.runtime_thread.get() {
            t.unpark();
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Take the core for a call on this thread, or `None` if another caller
    /// drives (the call then goes through the runtime thread's queue).
    pub(super) fn try_drive(&self) -> Option<Driving<'_>> {
        let needed = (*self.runtime_stack.get()?)?;
        if stack_left()? < needed {
            return None;
        }
        let rt = self.rt.lock().clone()?;
        loop {
            match self.state.load(Ordering::SeqCst) {
                FREE => {
                    if self
                        .state
                        .compare_exchange(FREE, CALLER, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                    {
                        return Some(Driving { baton: self, rt });
                    }
                }
                RUNTIME => {
                    if self
                        .state
                        .compare_exchange(RUNTIME, CALLER, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                    {
                        // The runtime thread leaves `block_on`; tokio hands
                        // the core to our `block_on` as it does.
                        self.wanted.notify_one();
                        return Some(Driving { baton: self, rt });
                    }
                }
                _ => return None,
            }
        }
    }

    /// A call is about to be spawned onto the runtime: count it, and make
    /// sure someone drives the core to run it.
    pub(super) fn hop(&self) -> Hop<'_> {
        self.hops.fetch_add(1, Ordering::SeqCst);
        Hop { baton: self }
    }

    /// Whether a caller drives the core now.
    #[cfg(test)]
    pub(super) fn is_driven_by_a_caller(&self) -> bool {
        self.state.load(Ordering::SeqCst) == CALLER
    }

    /// Resolves when the runtime thread has ended.
    async fn closed(&self) {
        let notified = self.closed_notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        notified.await;
    }

    /// The runtime thread's loop: drive the core until a caller wants it,
    /// wait while callers drive, take it back after [`GRACE`]; return the
    /// control message that ends the thread.
    pub(super) fn run(
        &self,
        rt: &tokio::runtime::Runtime,
        control: &mut mpsc::UnboundedReceiver<Control>,
    ) -> Option<Control> {
        loop {
            let message = rt.block_on(async {
                tokio::select! {
                    biased;
                    c = control.recv() => Some(c),
                    () = self.wanted.notified() => None,
                }
            });
            self.turned_at.store(self.now_ns(), Ordering::SeqCst);
            if let Some(c) = message {
                return c;
            }
            // A caller has the core (or is taking it).
            let mut seen = self.left_at.load(Ordering::SeqCst);
            loop {
                match control.try_recv() {
                    Ok(c) => return Some(c),
                    Err(mpsc::error::TryRecvError::Disconnected) => return None,
                    Err(mpsc::error::TryRecvError::Empty) => {}
                }
                match self.state.load(Ordering::SeqCst) {
                    CALLER => {
                        let left = self.left_at.load(Ordering::SeqCst);
                        if left != seen {
                            // Calls come and go: look again in a while,
                            // not woken by each one that ends.
                            seen = left;
                            std::thread::park_timeout(LOOK);
                        } else {
                            // One call for a whole look: its end wakes us.
                            // Ordered against `Driving::drop` (state, then
                            // `untimed`): either we see its `FREE` here or
                            // it sees `untimed` and unparks.
                            self.untimed.store(true, Ordering::SeqCst);
                            if self.state.load(Ordering::SeqCst) == CALLER {
                                std::thread::park();
                            }
                            self.untimed.store(false, Ordering::SeqCst);
                        }
                    }
                    FREE => {
                        let left = self.left_at.load(Ordering::SeqCst);
                        let due = left.saturating_add(GRACE.as_nanos() as u64);
                        let now = self.now_ns();
                        if self.hops.load(Ordering::SeqCst) > 0 || now >= due {
                            if self
                                .state
                                .compare_exchange(FREE, RUNTIME, Ordering::SeqCst, Ordering::SeqCst)
                                .is_ok()
                            {
                                break;
                            }
                        } else {
                            std::thread::park_timeout(Duration::from_nanos(due - now));
                        }
                    }
                    _ => break,
                }
            }
        }
    }
}

/// A caller's hold of the core for one call.
pub(super) struct Driving<'a> {
    baton: &'a Baton,
    rt: Arc<tokio::runtime::Runtime>,
}

impl Driving<'_> {
    /// Run `fut` on this thread, driving the runtime, until it answers,
    /// `deadline` passes (`Err(None)`: the caller names the timeout) or the
    /// runtime thread ends (`Closed`).
    pub(super) fn run<T>(
        &self,
        deadline: Option<Instant>,
        fut: super::Boxed<T>,
    ) -> Option<Result<T>> {
        if self.baton.closed.load(Ordering::SeqCst) {
            return Some(Err(Error::Closed));
        }
        // A future that panics ends its call as a spawned one did (its
        // reply channel disconnected): `Closed`, not a panic in the caller.
        let driven = std::panic::AssertUnwindSafe(|| {
            self.rt.block_on(async {
                // tokio's `block_on` polls our future first and returns as
                // soon as it answers: a call that answers on its first poll
                // gives the scheduler no turn, and a tight loop of such
                // calls (gaps under the grace) would starve every timer and
                // task. So such a call yields when no turn came for a whole
                // look: at the first yield the scheduler runs the queued
                // tasks and polls the driver without blocking, at the
                // second it runs the tasks that poll woke (a timer's).
                let waited = std::cell::Cell::new(false);
                let mut fut = fut;
                let tracked = std::future::poll_fn(|cx| {
                    let poll = fut.as_mut().poll(cx);
                    waited.set(waited.get() || poll.is_pending());
                    poll
                });
                let answer = async {
                    match deadline {
                        Some(d) => tokio::time::timeout_at(d.into(), tracked).await.ok(),
                        None => Some(tracked.await),
                    }
                };
                let answer = tokio::select! {
                    biased;
                    () = self.baton.closed() => Some(Err(Error::Closed)),
                    a = answer => a,
                };
                let b = self.baton;
                let now = b.now_ns();
                let last = b.turned_at.load(Ordering::SeqCst);
                if waited.get() {
                    b.turned_at.store(now, Ordering::SeqCst);
                } else if now.saturating_sub(last) >= LOOK.as_nanos() as u64 {
                    tokio::task::yield_now().await;
                    tokio::task::yield_now().await;
                    b.turned_at.store(b.now_ns(), Ordering::SeqCst);
                }
                answer
            })
        });
        std::panic::catch_unwind(driven).unwrap_or(Some(Err(Error::Closed)))
    }
}

impl Drop for Driving<'_> {
    fn drop(&mut self) {
        let b = self.baton;
        b.left_at.store(b.now_ns(), Ordering::SeqCst);
        b.state.store(FREE, Ordering::SeqCst);
        // A call spawned while we drove waits for the runtime thread: wake
        // it now, not at its next look. (A call spawned after our `FREE`
        // wakes it itself: `Hop::spawned`.)
        if b.untimed.load(Ordering::SeqCst) || b.hops.load(Ordering::SeqCst) > 0 {
            b.unpark_runtime_thread();
        }
    }
}

/// A call spawned onto the runtime while another thread drives.
pub(super) struct Hop<'a> {
    baton: &'a Baton,
}

impl Hop<'_> {
    /// The call is spawned: if the driver left meanwhile, the runtime
    /// thread must take the core now rather than after the grace.
    pub(super) fn spawned(&self) {
        if self.baton.state.load(Ordering::SeqCst) != CALLER {
            self.baton.unpark_runtime_thread();
        }
    }
}

impl Drop for Hop<'_> {
    fn drop(&mut self) {
        self.baton.hops.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The stack this thread has left below the current frame, where the
/// platform says (Linux); `None` elsewhere, or when the frame is not on
/// the thread's stack (a coroutine's, an alternate signal stack). The
/// stack's ends are read once per thread (for the main thread glibc reads
/// `/proc/self/maps`).
pub(super) fn stack_left() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        use std::cell::Cell;
        thread_local! {
            static ENDS: Cell<Option<Option<(usize, usize)>>> = const { Cell::new(None) };
        }
        let (low, high) = ENDS.with(|c| {
            if c.get().is_none() {
                c.set(Some(stack_ends()));
            }
            c.get().flatten()
        })?;
        let here = 0u8;
        left_from(std::ptr::from_ref(&here) as usize, low, high)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The room below `here` on a stack from `low` to `high`; `None` when
/// `here` is not on it.
pub(super) fn left_from(here: usize, low: usize, high: usize) -> Option<usize> {
    (low..=high).contains(&here).then(|| here - low)
}

/// The thread's stack: its low and high ends.
#[cfg(target_os = "linux")]
fn stack_ends() -> Option<(usize, usize)> {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    let mut addr: *mut libc::c_void = std::ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: `pthread_getattr_np` initialises `attr` for the calling
    // thread when it returns 0; only then is it read and destroyed.
    let rc = unsafe {
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return None;
        }
        let rc = libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size);
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        rc
    };
    let low = addr as usize;
    (rc == 0 && size > 0).then(|| (low, low.saturating_add(size)))
}
