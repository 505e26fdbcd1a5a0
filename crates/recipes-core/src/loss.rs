//! The loss signal: fires the moment a lease may be gone.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::clock::BootInstant;
use crate::lease::LeaseClock;

/// Why a lease is considered lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// The local lease deadline passed without a fresh acknowledgement from
    /// the server: the server may already have given the lease away.
    DeadlineExpired,
    /// The server expired the session.
    SessionExpired,
    /// Our lock node or key was deleted (by an administrator, a revoked
    /// lease, or a cleanup).
    Deleted,
    /// The server revoked the lease, or a keep-alive reported it gone.
    Revoked,
    /// The connection dropped and the loss policy treats that as loss.
    Disconnected,
    /// The lease was released by its holder.
    Released,
    /// The client was closed or its runtime thread is gone.
    Closed,
}

impl LossReason {
    /// The reason in snake case (`deadline_expired`): the `reason` label of
    /// the loss metrics.
    pub fn label(self) -> &'static str {
        match self {
            LossReason::DeadlineExpired => "deadline_expired",
            LossReason::SessionExpired => "session_expired",
            LossReason::Deleted => "deleted",
            LossReason::Revoked => "revoked",
            LossReason::Disconnected => "disconnected",
            LossReason::Released => "released",
            LossReason::Closed => "closed",
        }
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::DeadlineExpired => {
                "the lease deadline passed without an acknowledgement from the server"
            }
            LossReason::SessionExpired => "the session expired on the server",
            LossReason::Deleted => "our lock node or key was deleted",
            LossReason::Revoked => "the lease was revoked",
            LossReason::Disconnected => "the connection dropped (loss policy: on disconnect)",
            LossReason::Released => "the lease was released",
            LossReason::Closed => "the client was closed",
        })
    }
}

/// What runs when a signal fires (see [`LossSignal::on_fire`]).
type Hook = Box<dyn FnOnce(LossReason) + Send>;

/// Fire `signals` and their live children together: all of them are
/// marked (their receivers disconnect, their waiters wake) before any hook
/// runs, and a hook that panics is logged and passed over, so that no
/// hook — a logger, a metrics recorder, a caller's callback — can keep a
/// signal from firing or delay another one's (the process's one deadline
/// thread fires every lease's). How many of `signals` this fired.
fn fire_together<'a>(
    signals: impl IntoIterator<Item = &'a SignalInner>,
    reason: LossReason,
) -> usize {
    let mut hooks = Vec::new();
    let fired = signals
        .into_iter()
        .filter(|s| s.mark(reason, &mut hooks))
        .count();
    if fired > 0 {
        log::debug!("loss signal fired: {reason} ({fired})");
    }
    for hook in hooks {
        let run = std::panic::AssertUnwindSafe(|| hook(reason));
        if std::panic::catch_unwind(run).is_err() {
            log::error!("a hook of a loss signal panicked; the signal fired regardless");
        }
    }
    fired
}

struct SignalState {
    reason: Option<LossReason>,
    fired_at: Option<BootInstant>,
    // Dropped when the signal fires: every receiver sees a disconnect.
    tx: Option<Sender<()>>,
    children: Vec<Weak<SignalInner>>,
    // Run once, when the signal fires (metrics).
    hooks: Vec<Hook>,
}

struct SignalInner {
    state: Mutex<SignalState>,
    rx: Receiver<()>,
    // Wakes async waiters (tasks on a backend's runtime) when fired.
    notify: tokio::sync::Notify,
    lease: Option<Arc<LeaseClock>>,
    // The store of the runtime whose root this descends from (`etcd`), for
    // metrics.
    store: Arc<str>,
    // For a signal of several leases (`LossSignal::any_of`): lost when any
    // of them is, valid until the first of them ends.
    parts: Vec<LossSignal>,
}

impl SignalInner {
    fn new(lease: Option<Arc<LeaseClock>>, store: Arc<str>) -> Arc<SignalInner> {
        SignalInner::build(lease, store, Vec::new())
    }

    fn build(
        lease: Option<Arc<LeaseClock>>,
        store: Arc<str>,
        parts: Vec<LossSignal>,
    ) -> Arc<SignalInner> {
        let (tx, rx) = crossbeam_channel::bounded(0);
        Arc::new(SignalInner {
            state: Mutex::new(SignalState {
                reason: None,
                fired_at: None,
                tx: Some(tx),
                children: Vec::new(),
                hooks: Vec::new(),
            }),
            rx,
            notify: tokio::sync::Notify::new(),
            lease,
            store,
            parts,
        })
    }

    /// The deadline of the lease, or the first deadline of the parts.
    fn deadline(&self) -> Option<BootInstant> {
        let own = self.lease.as_ref().and_then(|l| l.valid_until());
        let parts = self.parts.iter().filter_map(LossSignal::valid_until).min();
        match (own, parts) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fire this signal and every live child (see [`fire_together`]).
    fn fire(&self, reason: LossReason) -> bool {
        fire_together([self], reason) == 1
    }

    /// Mark this signal and its live children fired, oldest first, and
    /// collect their hooks (in that order) into `hooks`; false if this one
    /// had fired already.
    fn mark(&self, reason: LossReason, hooks: &mut Vec<Hook>) -> bool {
        // Read first: a clock that panics (a caller's) must not leave the
        // signal half marked. Without a time it fired at the earliest.
        let read = std::panic::AssertUnwindSafe(|| self.now());
        let at = std::panic::catch_unwind(read)
            .unwrap_or_else(|_| BootInstant::from_since_boot(Duration::ZERO));
        let (tx, children) = {
            let mut st = self.state.lock();
            if st.reason.is_some() {
                return false;
            }
            st.reason = Some(reason);
            st.fired_at = Some(at);
            hooks.append(&mut st.hooks);
            (st.tx.take(), std::mem::take(&mut st.children))
        };
        drop(tx);
        self.notify.notify_waiters();
        for child in children.iter().filter_map(Weak::upgrade) {
            child.mark(reason, hooks);
        }
        true
    }

    fn now(&self) -> BootInstant {
        match &self.lease {
            Some(l) => l.now(),
            None => BootInstant::now(),
        }
    }

    fn reason(&self) -> Option<LossReason> {
        if let Some(r) = self.state.lock().reason {
            return Some(r);
        }
        // The deadline thread may not have run yet (after a process pause the
        // user's thread can run first): read the clock ourselves.
        match &self.lease {
            Some(l) if l.expired() => Some(LossReason::DeadlineExpired),
            _ => self.parts.iter().find_map(LossSignal::reason),
        }
    }
}

/// Fires once when a lease may be gone; every clone sees it.
///
/// It fires when any of these happens: the local lease deadline passes, the
/// session expires, our node or key is deleted, the lease is revoked, the
/// connection drops under [`LossPolicy::OnDisconnect`](crate::LossPolicy),
/// the lease is released, or the client closes.
///
/// Use it three ways: poll [`is_lost`](LossSignal::is_lost) (it reads the
/// clock itself, so it is never stale after a pause), block in
/// [`wait_timeout`](LossSignal::wait_timeout), or put
/// [`receiver`](LossSignal::receiver) in a `crossbeam_channel::select!` —
/// the receiver disconnects when the signal fires.
///
/// # Examples
///
/// ```no_run
/// # fn demo(lost: recipes_core::LossSignal, work: crossbeam_channel::Receiver<u32>) {
/// use crossbeam_channel::select;
/// loop {
///     select! {
///         recv(lost.receiver()) -> _ => {
///             eprintln!("stop: {}", lost.reason().unwrap());
///             break;
///         }
///         recv(work) -> item => { let _ = item; /* fenced work */ }
///     }
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct LossSignal {
    inner: Arc<SignalInner>,
}

impl LossSignal {
    /// Run `hook` once with the reason when the signal fires (at once if it
    /// already has). Explicit fires only: a deadline seen by the clock
    /// before the deadline thread fired counts when the thread fires.
    pub(crate) fn on_fire(&self, hook: impl FnOnce(LossReason) + Send + 'static) {
        let fired = {
            let mut st = self.inner.state.lock();
            match st.reason {
                Some(reason) => Some(reason),
                None => {
                    st.hooks.push(Box::new(hook));
                    return;
                }
            }
        };
        if let Some(reason) = fired {
            hook(reason);
        }
    }

    /// One signal for several leases held together (a multi-lock's): it
    /// fires when any of them fires, with that one's reason; it reads as
    /// lost when any of them does, and is valid until the first of them
    /// ends.
    pub fn any_of(signals: &[LossSignal]) -> LossSignal {
        let store = signals
            .first()
            .map_or_else(|| "".into(), |s| s.inner.store.clone());
        let inner = SignalInner::build(None, store, signals.to_vec());
        for part in signals {
            let weak = Arc::downgrade(&inner);
            part.on_fire(move |reason| {
                if let Some(inner) = weak.upgrade() {
                    inner.fire(reason);
                }
            });
        }
        LossSignal { inner }
    }

    /// Whether the lease may be gone. Reads the clock, so a thread that runs
    /// first after a process pause never sees a stale "held".
    pub fn is_lost(&self) -> bool {
        self.inner.reason().is_some()
    }

    /// Why the lease is lost, or `None` while it is held.
    pub fn reason(&self) -> Option<LossReason> {
        self.inner.reason()
    }

    /// Until when the lease may be assumed held: the local lease deadline,
    /// or the moment the signal fired if that was earlier. `None` when no
    /// deadline is known yet and the signal has not fired.
    pub fn valid_until(&self) -> Option<BootInstant> {
        let fired_at = self.inner.state.lock().fired_at;
        let deadline = self.inner.deadline();
        match (fired_at, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A receiver that disconnects when the signal fires; no message is ever
    /// sent on it. For `crossbeam_channel::select!`.
    pub fn receiver(&self) -> &Receiver<()> {
        &self.inner.rx
    }

    /// Block until the signal fires or `timeout` passes; the reason, or
    /// `None` if the lease is still held.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<LossReason> {
        self.wait_until(crate::limits::deadline_in(timeout))
    }

    /// Block until the signal fires or `deadline` passes.
    pub fn wait_until(&self, deadline: Instant) -> Option<LossReason> {
        loop {
            if let Some(r) = self.reason() {
                return Some(r);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            // Wake at the lease deadline too, in case the deadline thread is
            // late; the loop then reads the clock.
            let mut until = deadline;
            if let Some(v) = self.inner.deadline() {
                until = until.min(v.to_instant().max(now + Duration::from_millis(1)));
            }
            // Nothing is ever sent: this returns on disconnect (fired) or at
            // `until`; either way the loop re-reads the state.
            let _ = self.inner.rx.recv_deadline(until);
        }
    }

    /// Resolves when the signal has fired (explicitly, or by the deadline
    /// thread once the lease deadline passed). For backends' async tasks;
    /// blocking code uses [`wait`](LossSignal::wait) or the
    /// [`receiver`](LossSignal::receiver).
    pub async fn fired(&self) -> LossReason {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(r) = self.inner.state.lock().reason {
                return r;
            }
            notified.await;
        }
    }

    /// Block until the signal fires.
    pub fn wait(&self) -> LossReason {
        loop {
            if let Some(r) = self.wait_timeout(Duration::from_secs(3600)) {
                return r;
            }
        }
    }
}

impl fmt::Debug for LossSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossSignal")
            .field("reason", &self.reason())
            .field("valid_until", &self.valid_until())
            .finish()
    }
}

/// The firing side of a [`LossSignal`], held by backends.
///
/// Triggers form a tree: a child fires when its parent fires (client →
/// session → guard), and may also fire on its own (our node was deleted).
#[derive(Clone)]
pub struct LossTrigger {
    inner: Arc<SignalInner>,
}

impl LossTrigger {
    /// A trigger with no lease deadline and no parent.
    pub fn root() -> LossTrigger {
        LossTrigger::root_of("")
    }

    /// The root of a runtime of `store` (metrics name it).
    pub(crate) fn root_of(store: &str) -> LossTrigger {
        LossTrigger {
            inner: SignalInner::new(None, store.into()),
        }
    }

    pub(crate) fn with_lease(parent: &LossTrigger, lease: Arc<LeaseClock>) -> LossTrigger {
        parent.attach(SignalInner::new(Some(lease), parent.inner.store.clone()))
    }

    /// A child trigger: shares this one's lease deadline, fires when this
    /// one fires (at once if it already has).
    pub fn child(&self) -> LossTrigger {
        let (lease, store) = (self.inner.lease.clone(), self.inner.store.clone());
        self.attach(SignalInner::new(lease, store))
    }

    /// The store this trigger's runtime serves (empty when none).
    pub(crate) fn store(&self) -> &str {
        &self.inner.store
    }

    fn attach(&self, child: Arc<SignalInner>) -> LossTrigger {
        let fired = {
            let mut st = self.inner.state.lock();
            match st.reason {
                Some(r) => Some(r),
                None => {
                    st.children.retain(|w| w.strong_count() > 0);
                    st.children.push(Arc::downgrade(&child));
                    None
                }
            }
        };
        if let Some(r) = fired {
            child.fire(r);
        }
        LossTrigger { inner: child }
    }

    /// Fire the signal (and every child) with `reason`. Only the first call
    /// counts; returns whether this call fired it.
    pub fn fire(&self, reason: LossReason) -> bool {
        self.inner.fire(reason)
    }

    /// Fire every one of `triggers` together (see [`fire_together`]): a
    /// slow hook of one (a blocked logger) delays no other's signal. The
    /// deadline thread fires the epochs due together so.
    pub(crate) fn fire_all(triggers: &[LossTrigger], reason: LossReason) {
        fire_together(triggers.iter().map(|t| &*t.inner), reason);
    }

    /// Whether the signal has been fired explicitly (the clock is not read).
    pub fn is_fired(&self) -> bool {
        self.inner.state.lock().reason.is_some()
    }

    /// The observing side.
    pub fn signal(&self) -> LossSignal {
        LossSignal {
            inner: self.inner.clone(),
        }
    }
}

impl fmt::Debug for LossTrigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossTrigger")
            .field("fired", &self.inner.state.lock().reason)
            .finish()
    }
}

#[cfg(test)]
#[path = "loss_tests.rs"]
mod tests;
