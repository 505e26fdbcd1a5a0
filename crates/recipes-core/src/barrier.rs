//! The distributed barrier and double barrier front ends: blocking calls
//! over the wait shape of the engine ([`gather`](crate::engine::gather)).

use std::fmt;
use std::time::{Duration, Instant};

use crate::engine::gather::{self, BarrierStore, DoubleBarrierStore, Joined};
use crate::error::{Error, Result};
use crate::guard::deadline_after;
use crate::loss::LossSignal;
use crate::metrics::Labels;
use crate::runtime::Runtime;

/// The most members a double barrier gathers: each waiter reads every
/// member at each change.
pub const MAX_DOUBLE_BARRIER_COUNT: u32 = 10_000;

/// What the blocking front ends need of a store's recipe besides its
/// verbs: the client's runtime, on which they run.
pub trait OnRuntime: Clone + Send + Sync + 'static {
    /// The client's runtime (its store names the metrics).
    fn runtime(&self) -> &Runtime;
}

/// Check a double barrier's `count`, saying what to change.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for 0 or more than
/// [`MAX_DOUBLE_BARRIER_COUNT`].
pub fn check_count(what: &str, count: u32) -> Result<()> {
    if count == 0 || count > MAX_DOUBLE_BARRIER_COUNT {
        return Err(Error::invalid(format!(
            "{what} asks for {count} members; a double barrier gathers 1 to \
             {MAX_DOUBLE_BARRIER_COUNT} members: give a count in that range"
        )));
    }
    Ok(())
}

/// Run `fut` on the recipe's runtime until `deadline`, plus the request
/// timeout for a last reply.
pub(crate) fn blocking<B: OnRuntime + crate::engine::WaitStore, T: Send + 'static>(
    backend: &B,
    what: &str,
    deadline: Option<Instant>,
    fut: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let hard = deadline.and_then(|d| d.checked_add(backend.rpc_timeout() * 2));
    backend.runtime().call_until(what, hard, fut)
}

/// A barrier, as Curator's `DistributedBarrier`: while it is set, every
/// [`wait`](Barrier::wait) blocks; its removal lets them all through. A
/// waiter holds no thread in a polling loop: it waits on the store's
/// change notification.
///
/// By default the barrier stays up when its setter dies; with
/// [`tied_to_session`](Barrier::tied_to_session), a [`set`](Barrier::set)
/// puts it up under the setter's session (ephemeral, on the lease), and
/// it goes when that session does.
pub struct Barrier<B: BarrierStore + OnRuntime> {
    backend: B,
    tied: bool,
    labels: Labels,
}

impl<B: BarrierStore + OnRuntime> Barrier<B> {
    /// A barrier over `backend`.
    pub fn from_backend(backend: B) -> Barrier<B> {
        let labels = Labels::new(backend.runtime().store(), "barrier", backend.name());
        Barrier {
            backend,
            tied: false,
            labels,
        }
    }

    /// Sets made through this handle put the barrier up under the client's
    /// session: it goes when the session does (the setter died or closed).
    #[must_use]
    pub fn tied_to_session(mut self) -> Barrier<B> {
        self.tied = true;
        self
    }

    /// The barrier's name.
    pub fn name(&self) -> &str {
        self.backend.name()
    }

    /// Put the barrier up (nothing if it is up).
    ///
    /// # Errors
    ///
    /// Backend errors within the request timeout; a name that holds another
    /// recipe's layout; [`Error::Indeterminate`] when no reply came (it may
    /// have landed: setting again changes nothing).
    pub fn set(&self) -> Result<()> {
        let (b, tied) = (self.backend.clone(), self.tied);
        blocking(&self.backend, "barrier set", None, async move {
            crate::engine::once(&b, "barrier set", |e| {
                let b = b.clone();
                async move { b.set(&e, tied).await }
            })
            .await
        })
        .map_err(Error::unconfirmed)
    }

    /// Take the barrier down: every waiter goes through (nothing if it is
    /// down).
    ///
    /// # Errors
    ///
    /// As for [`set`](Barrier::set).
    pub fn remove(&self) -> Result<()> {
        let b = self.backend.clone();
        blocking(&self.backend, "barrier remove", None, async move {
            crate::engine::once(&b, "barrier remove", |e| {
                let b = b.clone();
                async move { b.remove(&e).await }
            })
            .await
        })
        .map_err(Error::unconfirmed)
    }

    /// Wait until the barrier is down; at once if it was never set.
    ///
    /// # Errors
    ///
    /// Backend errors that cannot be retried (a closed client).
    pub fn wait(&self) -> Result<()> {
        if self.wait_until(None)? {
            Ok(())
        } else {
            Err(crate::guard::unbounded_wait_ended("barrier wait"))
        }
    }

    /// Wait at most `timeout` until the barrier is down: `false` when the
    /// timeout passed first.
    ///
    /// # Errors
    ///
    /// As for [`wait`](Barrier::wait); retryable errors past the timeout.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<bool> {
        self.wait_until(deadline_after(timeout))
    }

    fn wait_until(&self, deadline: Option<Instant>) -> Result<bool> {
        let b = self.backend.clone();
        let got = self.labels.timed(|| {
            let down = blocking(&self.backend, "barrier wait", deadline, async move {
                gather::barrier_wait(&b, deadline.map(tokio::time::Instant::from_std)).await
            });
            down.map(|d| d.then_some(()))
        })?;
        Ok(got.is_some())
    }
}

impl<B: BarrierStore + OnRuntime + fmt::Debug> fmt::Debug for Barrier<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier")
            .field("backend", &self.backend)
            .field("tied", &self.tied)
            .finish()
    }
}

/// A double barrier, as Curator's `DistributedDoubleBarrier`:
/// [`enter`](DoubleBarrier::enter) blocks until `count` members entered,
/// [`leave`](DoubleBarrierMember::leave) until every member of its round
/// left (a member that entered again since, in the next round, is not
/// waited for).
///
/// A member lives under its client's session. A member whose process dies
/// leaves with its session: the others' `enter` goes on waiting until
/// `count` members are there (the dead one no longer counts), their
/// `leave` ends once its entry is gone. A flag left by an earlier round
/// never lets a member past early: nobody passes `enter` before `count`
/// members entered in its round.
pub struct DoubleBarrier<B: DoubleBarrierStore + OnRuntime> {
    backend: B,
    labels: Labels,
}

impl<B: DoubleBarrierStore + OnRuntime> DoubleBarrier<B> {
    /// A double barrier over `backend`.
    pub fn from_backend(backend: B) -> DoubleBarrier<B> {
        let labels = Labels::new(backend.runtime().store(), "double_barrier", backend.name());
        DoubleBarrier { backend, labels }
    }

    /// The barrier's name.
    pub fn name(&self) -> &str {
        self.backend.name()
    }

    /// How many members it gathers.
    pub fn count(&self) -> u32 {
        self.backend.count()
    }

    /// Enter, waiting as long as it takes for `count` members.
    ///
    /// # Errors
    ///
    /// Backend errors that cannot be retried; our member is then removed.
    pub fn enter(&self) -> Result<DoubleBarrierMember<B>> {
        self.enter_until(None)?
            .ok_or_else(|| crate::guard::unbounded_wait_ended("double barrier enter"))
    }

    /// Enter, waiting at most `timeout`: `None` (our member removed) when
    /// it passed first.
    ///
    /// # Errors
    ///
    /// As for [`enter`](DoubleBarrier::enter).
    pub fn enter_timeout(&self, timeout: Duration) -> Result<Option<DoubleBarrierMember<B>>> {
        self.enter_until(deadline_after(timeout))
    }

    fn enter_until(&self, deadline: Option<Instant>) -> Result<Option<DoubleBarrierMember<B>>> {
        let b = self.backend.clone();
        let joined = self.labels.timed(|| {
            blocking(
                &self.backend,
                "double barrier enter",
                deadline,
                async move {
                    // Boxed, as the group's join is (core's group.rs): rustc's
                    // query depth overflows on PostgreSQL's future otherwise.
                    Box::pin(gather::enter(
                        &b,
                        deadline.map(tokio::time::Instant::from_std),
                    ))
                    .await
                },
            )
        })?;
        Ok(joined.map(|joined| DoubleBarrierMember {
            backend: self.backend.clone(),
            joined: Some(joined),
        }))
    }
}

impl<B: DoubleBarrierStore + OnRuntime + fmt::Debug> fmt::Debug for DoubleBarrier<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DoubleBarrier")
            .field("backend", &self.backend)
            .finish()
    }
}

/// An entered member of a double barrier. Dropping it removes the member
/// in the background without waiting for the others.
pub struct DoubleBarrierMember<B: DoubleBarrierStore + OnRuntime> {
    backend: B,
    joined: Option<Joined<B>>,
}

impl<B: DoubleBarrierStore + OnRuntime> DoubleBarrierMember<B> {
    /// Fires when our member's session is lost: our member is gone from
    /// the store, and the others may leave without us.
    pub fn lost(&self) -> &LossSignal {
        &self.joined().lost
    }

    fn joined(&self) -> &Joined<B> {
        self.joined
            .as_ref()
            .expect("the member is present until left or dropped")
    }

    /// Leave, waiting as long as it takes for every member of our round to
    /// leave.
    ///
    /// # Errors
    ///
    /// Backend errors that cannot be retried; our member is gone all the
    /// same (or goes with the session).
    pub fn leave(self) -> Result<()> {
        if self.leave_until(None)? {
            Ok(())
        } else {
            Err(crate::guard::unbounded_wait_ended("double barrier leave"))
        }
    }

    /// Leave, waiting at most `timeout` for the others: `false` when it
    /// passed first (our member is gone all the same).
    ///
    /// # Errors
    ///
    /// As for [`leave`](DoubleBarrierMember::leave).
    pub fn leave_timeout(self, timeout: Duration) -> Result<bool> {
        self.leave_until(deadline_after(timeout))
    }

    fn leave_until(mut self, deadline: Option<Instant>) -> Result<bool> {
        let joined = self
            .joined
            .take()
            .expect("the member is present until left or dropped");
        let b = self.backend.clone();
        blocking(
            &self.backend,
            "double barrier leave",
            deadline,
            async move {
                gather::leave(
                    &b,
                    joined.ticket,
                    deadline.map(tokio::time::Instant::from_std),
                )
                .await
            },
        )
    }
}

impl<B: DoubleBarrierStore + OnRuntime> Drop for DoubleBarrierMember<B> {
    fn drop(&mut self) {
        if let Some(joined) = self.joined.take() {
            remove_in_background(&self.backend, B::remove(joined.ticket));
        }
    }
}

/// Hand a member's removal to the recipe's runtime (from `Drop`).
pub(crate) fn remove_in_background<B: OnRuntime>(
    backend: &B,
    removal: impl std::future::Future<Output = ()> + Send + 'static,
) {
    if !backend.runtime().spawn(removal) {
        log::debug!("client closed: the session's end removes our member");
    }
}

impl<B: DoubleBarrierStore + OnRuntime> fmt::Debug for DoubleBarrierMember<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DoubleBarrierMember")
            .field("name", &self.backend.name())
            .field("joined", &self.joined)
            .finish()
    }
}
