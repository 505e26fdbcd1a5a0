//! The runtime bridge: async client crates behind a blocking API.
//!
//! Each client owns one tokio runtime with one named thread. Sessions,
//! heartbeats, keep-alives and watches run all the time, not only while a
//! caller blocks, so a lease is renewed while user code works. A blocking
//! call made while no other call is in progress drives the runtime on the
//! caller's own thread for its length (`drive`: no wake-up of another
//! thread per request); a call made while another is in progress, or from
//! a thread inside a tokio context (`tokio::task::spawn_blocking`
//! included), spawns its future on the runtime and waits for the answer on
//! a crossbeam channel with a deadline.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::loss::{LossReason, LossTrigger};

mod drive;
use drive::Baton;

/// A call's future on the heap: what [`Runtime::call_until`] runs, and
/// what a caller that builds a large future hands
/// [`Runtime::call_boxed`] (`Box::pin`), so that no frame of the caller's
/// holds the future itself.
pub type Boxed<T> = std::pin::Pin<Box<dyn Future<Output = Result<T>> + Send + 'static>>;

/// How long shutdown waits for background work (releases handed over by
/// guards' `Drop`) before it cancels what is left.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

enum Control {
    Shutdown {
        grace: Duration,
    },
    #[cfg(any(test, feature = "test-hooks"))]
    Crash,
}

struct RuntimeInner {
    name: String,
    handle: Handle,
    thread_id: ThreadId,
    alive: Arc<AtomicBool>,
    control: mpsc::UnboundedSender<Control>,
    thread: Mutex<Option<JoinHandle<()>>>,
    loss: LossTrigger,
    background: Arc<AtomicUsize>,
    baton: Arc<Baton>,
    readers: Readers,
    claims: crate::group_claims::Claims,
}

/// The read guards of the client's read-write locks by name, each as the
/// thread that took it and its handle: a write of that name from that
/// thread would wait for itself ([`crate::rw_lock`]).
pub(crate) type Readers = Mutex<std::collections::HashMap<String, Vec<crate::rw_lock::Reading>>>;

/// A client's runtime: one tokio runtime on one named thread.
///
/// Cheap to clone; the thread stops when the last clone is dropped (after
/// giving background work [`DEFAULT_SHUTDOWN_GRACE`]) or at
/// [`shutdown`](Runtime::shutdown). If the thread dies, every call returns
/// [`Error::Closed`] and every loss signal derived from
/// [`loss_root`](Runtime::loss_root) fires.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

/// Marks the thread dead and fires loss however the thread ends, unwinding
/// included.
struct DeathWatch {
    alive: Arc<AtomicBool>,
    loss: LossTrigger,
    name: String,
    baton: Arc<Baton>,
}

impl Drop for DeathWatch {
    fn drop(&mut self) {
        self.alive.store(false, Ordering::SeqCst);
        // Stops a caller driving the runtime, and drops the runtime (every
        // task still running is cancelled: their reply channels disconnect,
        // so waiting callers get `Error::Closed`) unless that caller still
        // holds it, which drops it as it leaves.
        self.baton.close();
        self.loss.fire(LossReason::Closed);
        if std::thread::panicking() {
            log::error!("[runtime={}] runtime thread died", self.name);
        } else {
            log::trace!("[runtime={}] runtime thread stopped", self.name);
        }
    }
}

/// Whether the current thread is polling a tokio task: an async
/// runtime's worker, or `block_on`'s thread, where a blocking wait stalls
/// the executor (reqwest's blocking client panics there in debug builds;
/// we return an error instead). Told by the task's cooperative budget,
/// which tokio sets for a task it polls and not for
/// `spawn_blocking`'s closures or a plain thread that entered a runtime
/// (`Handle::enter`): those may block. A task run under
/// `tokio::task::coop::unconstrained` is not seen.
pub fn inside_async_task() -> bool {
    use std::task::{Context, Poll, Waker};
    if Handle::try_current().is_err() {
        return false;
    }
    let mut cx = Context::from_waker(Waker::noop());
    // Spend the budget (at most 128 units) until tokio says to yield, then
    // give it all back: each guard restores what it took when dropped, so
    // they are dropped in the reverse order.
    let mut spent = Vec::new();
    let budgeted = loop {
        match tokio::task::coop::poll_proceed(&mut cx) {
            Poll::Ready(restore) if spent.len() <= usize::from(u8::MAX) => spent.push(restore),
            Poll::Ready(_) => break false,
            Poll::Pending => break true,
        }
    };
    while spent.pop().is_some() {}
    budgeted
}

/// Decrements the background count however the task ends.
struct BackgroundTicket(Arc<AtomicUsize>);

impl Drop for BackgroundTicket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Runtime {
    /// Start a runtime whose thread is named `name`.
    ///
    /// Returns once the runtime is built and running (a start-up handshake),
    /// so build errors are reported here.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name with a NUL byte;
    /// [`Error::Backend`] if the thread or the runtime cannot be created.
    pub fn new(name: &str) -> Result<Runtime> {
        if name.contains('\0') {
            return Err(Error::invalid(format!(
                "runtime thread name {name:?} contains a NUL byte; remove it"
            )));
        }
        let alive = Arc::new(AtomicBool::new(true));
        let loss = LossTrigger::root_of(name.strip_prefix("recipes-").unwrap_or(name));
        let background = Arc::new(AtomicUsize::new(0));
        let (control, mut control_rx) = mpsc::unbounded_channel::<Control>();
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        let baton = Arc::new(Baton::new());
        let thread = {
            let watch = DeathWatch {
                alive: alive.clone(),
                loss: loss.clone(),
                name: name.to_owned(),
                baton: baton.clone(),
            };
            let background = background.clone();
            let baton = baton.clone();
            let stack = drive::runtime_stack_size();
            std::thread::Builder::new()
                .name(name.to_owned())
                .stack_size(stack)
                .spawn(move || {
                    let _watch = watch;
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => Arc::new(rt),
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    baton.started(rt.clone(), stack);
                    let _ = ready_tx.send(Ok((rt.handle().clone(), std::thread::current().id())));
                    let grace = match baton.run(&rt, &mut control_rx) {
                        #[cfg(any(test, feature = "test-hooks"))]
                        Some(Control::Crash) => panic!("runtime thread crash injected by a test"),
                        Some(Control::Shutdown { grace }) => grace,
                        None => DEFAULT_SHUTDOWN_GRACE,
                    };
                    rt.block_on(async move {
                        let drained = async {
                            while background.load(Ordering::SeqCst) > 0 {
                                tokio::time::sleep(Duration::from_millis(5)).await;
                            }
                        };
                        if tokio::time::timeout(grace, drained).await.is_err() {
                            log::warn!(
                                "shutdown: {} background task(s) still running after {grace:?}; cancelling them",
                                background.load(Ordering::SeqCst)
                            );
                        }
                    });
                    // `_watch` drops the runtime as the thread ends.
                })
                .map_err(|e| Error::backend("cannot spawn the runtime thread", false, e))?
        };
        let (handle, thread_id) = match ready_rx.recv() {
            Ok(Ok(ready)) => ready,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(Error::backend("cannot build the tokio runtime", false, e));
            }
            Err(_) => {
                let _ = thread.join();
                return Err(Error::Backend {
                    message: "the runtime thread died during start-up".into(),
                    retryable: false,
                    source: None,
                });
            }
        };
        log::trace!("[runtime={name}] runtime thread started");
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                name: name.to_owned(),
                handle,
                thread_id,
                alive,
                control,
                thread: Mutex::new(Some(thread)),
                loss,
                background,
                baton,
                readers: Readers::default(),
                claims: Default::default(),
            }),
        })
    }

    /// Run `fut` on the runtime thread and block until it answers or
    /// `timeout` passes.
    ///
    /// # Errors
    ///
    /// The future's own error; [`Error::Timeout`] when `timeout` passes (the
    /// future is then cancelled); [`Error::Closed`] when the runtime is gone;
    /// [`Error::InvalidArgument`] when called on the runtime thread itself,
    /// where blocking would deadlock.
    pub fn call<T, F>(&self, what: &str, timeout: Duration, fut: F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        // A timeout too long for the clock waits as long as it takes.
        self.call_until(what, Instant::now().checked_add(timeout), fut)
    }

    /// Like [`call`](Runtime::call) with an absolute deadline; `None` waits
    /// as long as it takes.
    ///
    /// # Errors
    ///
    /// As for [`call`](Runtime::call).
    pub fn call_until<T, F>(&self, what: &str, deadline: Option<Instant>, fut: F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        // On the heap at once, as `spawn` puts a task: a store's future can
        // be tens of KiB, and every frame below that held it by value would
        // take that much more of the caller's stack (`drive`'s notes). A
        // caller that builds a large future boxes it itself and calls
        // [`call_boxed`](Runtime::call_boxed).
        self.call_boxed(what, deadline, Box::pin(fut))
    }

    /// [`call_until`](Runtime::call_until) with a future already on the
    /// heap (`Pin<Box<dyn Future>>`): built there by a caller whose future
    /// is large, so that none of its frames holds it and it is not boxed
    /// twice.
    ///
    /// # Errors
    ///
    /// As for [`call`](Runtime::call).
    pub fn call_boxed<T>(&self, what: &str, deadline: Option<Instant>, fut: Boxed<T>) -> Result<T>
    where
        T: Send + 'static,
    {
        let result = self.answer(what, deadline, fut);
        if let Err(e) = &result {
            crate::metrics::error(self.store(), e);
        }
        result
    }

    fn answer<T>(&self, what: &str, deadline: Option<Instant>, fut: Boxed<T>) -> Result<T>
    where
        T: Send + 'static,
    {
        self.check_not_runtime_thread(what)?;
        if !self.is_alive() {
            return Err(Error::Closed);
        }
        let started = Instant::now();
        let timed_out = || Error::Timeout {
            what: what.to_owned(),
            after: started.elapsed(),
        };
        // A thread in a tokio context (another runtime's `spawn_blocking`,
        // `Handle::enter`) may not enter this runtime's `block_on`, nor
        // may one whose thread-locals are being destroyed (tokio's
        // context is gone: entering it would panic).
        if Handle::try_current().is_err_and(|e| e.is_missing_context()) {
            if let Some(driving) = self.inner.baton.try_drive() {
                return driving
                    .run(deadline, fut)
                    .unwrap_or_else(|| Err(timed_out()));
            }
        }
        let hop = self.inner.baton.hop();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let task = self.inner.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        hop.spawned();
        let answer = match deadline {
            Some(d) => rx.recv_deadline(d),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match answer {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => {
                task.abort();
                Err(timed_out())
            }
            Err(RecvTimeoutError::Disconnected) => Err(Error::Closed),
        }
    }

    /// Return an error if the current thread may not block: this
    /// runtime's own thread, or a thread polling an async task (a tokio
    /// worker's or `block_on`'s; `spawn_blocking`'s may block).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming the call and what to do instead.
    pub fn check_not_runtime_thread(&self, what: &str) -> Result<()> {
        if std::thread::current().id() == self.inner.thread_id {
            return Err(Error::invalid(format!(
                "blocking call `{what}` made on the runtime thread `{}` of the same client, \
                 where it would deadlock; make it from another thread",
                self.inner.name
            )));
        }
        if inside_async_task() {
            return Err(Error::invalid(format!(
                "blocking call `{what}` made inside an async task, where it would stall every \
                 task of that executor thread for as long as it waits; call it from \
                 tokio::task::spawn_blocking or a plain thread"
            )));
        }
        Ok(())
    }

    /// Run `fut` in the background on the runtime thread, tracked so that
    /// shutdown gives it a grace period. Never blocks. Returns false if the
    /// runtime is gone (the future is dropped).
    pub fn spawn<F>(&self, fut: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if !self.is_alive() {
            return false;
        }
        self.inner.background.fetch_add(1, Ordering::SeqCst);
        let ticket = BackgroundTicket(self.inner.background.clone());
        self.inner.handle.spawn(async move {
            let _ticket = ticket;
            fut.await;
        });
        true
    }

    /// The tokio handle, for backends that spawn long-lived tasks (sessions,
    /// watches) themselves.
    pub fn handle(&self) -> &Handle {
        &self.inner.handle
    }

    /// Enter the runtime's context on this thread (some client crates create
    /// or drop objects that need it).
    pub fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.inner.handle.enter()
    }

    /// Whether the runtime thread is running.
    pub fn is_alive(&self) -> bool {
        self.inner.alive.load(Ordering::SeqCst)
    }

    /// The root of every loss signal of this client: it fires when the
    /// client closes or its thread dies.
    pub fn loss_root(&self) -> &LossTrigger {
        &self.inner.loss
    }

    /// The client's reading threads ([`Readers`]).
    pub(crate) fn readers(&self) -> &Readers {
        &self.inner.readers
    }

    /// The member ids the client's memberships hold
    /// ([`crate::group_claims::Claims`]).
    pub(crate) fn claims(&self) -> &crate::group_claims::Claims {
        &self.inner.claims
    }

    /// The runtime thread's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The store this runtime serves: its name without `recipes-` (`etcd`
    /// for `recipes-etcd`), the `store` label of the metrics.
    pub fn store(&self) -> &str {
        self.inner.loss.store()
    }

    /// Stop the runtime: fire every loss signal, give background work up to
    /// `grace`, cancel the rest, and join the thread (unless called on the
    /// runtime thread itself, where the join is skipped). Later calls return
    /// [`Error::Closed`].
    pub fn shutdown(&self, grace: Duration) {
        self.inner.shutdown(grace);
    }

    /// Make the runtime thread panic, to test what happens when it dies.
    /// Only with the `test-hooks` feature, which no release build enables.
    #[cfg(any(test, feature = "test-hooks"))]
    #[doc(hidden)]
    pub fn crash_for_tests(&self) {
        let _ = self.inner.control.send(Control::Crash);
        self.inner.baton.unpark_runtime_thread();
    }
}

impl RuntimeInner {
    fn shutdown(&self, grace: Duration) {
        let _ = self.control.send(Control::Shutdown { grace });
        self.baton.unpark_runtime_thread();
        if std::thread::current().id() == self.thread_id {
            // Dropped or closed from inside a task: the thread ends once this
            // task yields; joining here would deadlock.
            return;
        }
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        self.loss.fire(LossReason::Closed);
    }
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        self.shutdown(DEFAULT_SHUTDOWN_GRACE);
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("name", &self.inner.name)
            .field("alive", &self.is_alive())
            .finish()
    }
}

#[cfg(test)]
mod drive_tests;
#[cfg(test)]
mod tests;
