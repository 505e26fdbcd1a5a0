//! A client's sessions: the current one (or a new one once it is no longer
//! usable), a session of its own for each further concurrent acquisition of
//! one name, and the in-process *turns* that keep two acquisitions of one name
//! off one session.
//!
//! A store whose contender entry is named by its session (etcd's
//! `<name>/<lease id>`) cannot let two acquisitions of one name share a
//! session: they would own the same entry. Each session therefore hands out
//! one turn per name at a time ([`NamedTurns`]), held until the entry is
//! gone; threads sharing one handle take turns in the process first
//! ([`HandleQueue`]); and an acquisition whose name is taken on the current
//! session gets a session of its own ([`Sessions::for_name`]).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::error::{Error, Result};

/// A turn in one in-process queue, held until dropped.
pub type Turn = OwnedMutexGuard<()>;

type Queue = Arc<tokio::sync::Mutex<()>>;

/// Take a turn in `queue`, waiting until `deadline` at most; `None` when
/// it passed first.
async fn wait_turn(queue: Queue, deadline: Option<Instant>) -> Option<Turn> {
    match deadline {
        // `timeout_at` polls once even with a deadline in the past, so a
        // free queue is taken by a try-lock.
        Some(d) => tokio::time::timeout_at(d, queue.lock_owned()).await.ok(),
        None => Some(queue.lock_owned().await),
    }
}

/// One session's queues, one per name: at most one acquisition of a name
/// uses the session at a time.
#[derive(Debug, Default)]
pub struct NamedTurns(Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>);

impl NamedTurns {
    fn queue(&self, name: &str) -> Queue {
        let mut queues = self.0.lock();
        queues.retain(|_, q| q.strong_count() > 0);
        match queues.get(name).and_then(Weak::upgrade) {
            Some(q) => q,
            None => {
                let q = Queue::default();
                queues.insert(name.to_owned(), Arc::downgrade(&q));
                q
            }
        }
    }

    /// Wait for the turn at `name` until `deadline`; `None` when it passed
    /// first.
    pub async fn wait(&self, name: &str, deadline: Option<Instant>) -> Option<Turn> {
        wait_turn(self.queue(name), deadline).await
    }

    /// The turn at `name` if nobody in this process has it.
    pub fn try_take(&self, name: &str) -> Option<Turn> {
        self.queue(name).try_lock_owned().ok()
    }
}

/// The local queue of one recipe handle (and its clones): threads that
/// share the handle take turns here, holding no entry while they wait. A
/// turn is kept for as long as the guard it led to holds its entry.
#[derive(Debug, Clone, Default)]
pub struct HandleQueue(Queue);

impl HandleQueue {
    /// Wait for this handle's turn until `deadline`; `None` when it passed
    /// first.
    pub async fn turn(&self, deadline: Option<Instant>) -> Option<Turn> {
        wait_turn(self.0.clone(), deadline).await
    }
}

/// An acquisition's places in this process's queues, given back together
/// once its entry is gone: the session's turn at the name and the handle's
/// turn.
#[derive(Debug, Default)]
pub struct Turns {
    // Held for their `Drop` only.
    _session: Option<Turn>,
    _handle: Option<Turn>,
}

impl Turns {
    /// The session's turn and the handle's.
    pub fn new(session: Option<Turn>, handle: Option<Turn>) -> Turns {
        Turns {
            _session: session,
            _handle: handle,
        }
    }

    /// Hold the handle's turn too.
    pub fn hold_handle(&mut self, handle: Option<Turn>) {
        self._handle = handle;
    }
}

/// A session as [`Sessions`] keeps it.
pub trait PooledSession: Send + Sync + 'static {
    /// Whether new acquisitions may use it (not lost, not stopped).
    fn is_usable(&self) -> bool;

    /// Its turns, one per name.
    fn turns(&self) -> &NamedTurns;

    /// End a session opened while the client closed (revoke its lease).
    fn discard(self: Arc<Self>) -> impl Future<Output = ()> + Send;
}

/// A client's sessions: the current one and the single-use ones.
pub struct Sessions<S> {
    // Replaced by a new one once no longer usable; nothing held on the old
    // one carries over.
    current: Mutex<Option<Arc<S>>>,
    opening: tokio::sync::Mutex<()>,
    // The single-use sessions of concurrent acquisitions of one name, kept
    // to be closed with the client; dropped from here once unusable.
    pool: Mutex<Vec<Arc<S>>>,
    closed: AtomicBool,
}

impl<S: PooledSession> Default for Sessions<S> {
    fn default() -> Self {
        Sessions {
            current: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
            pool: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        }
    }
}

impl<S: PooledSession> Sessions<S> {
    /// The current session, whatever its state.
    pub fn current(&self) -> Option<Arc<S>> {
        self.current.lock().clone()
    }

    fn usable(&self) -> Result<Option<Arc<S>>> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        Ok(self.current().filter(|s| s.is_usable()))
    }

    /// `session`, unless the client closed meanwhile (it is discarded).
    async fn unless_closed(&self, session: Arc<S>) -> Result<Arc<S>> {
        if self.closed.load(Ordering::SeqCst) {
            session.discard().await;
            return Err(Error::Closed);
        }
        Ok(session)
    }

    /// The current session, or one `open`ed (one at a time) once it is no
    /// longer usable.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] once closed; errors of `open`.
    pub async fn primary<F>(&self, open: impl FnOnce() -> F) -> Result<Arc<S>>
    where
        F: Future<Output = Result<Arc<S>>>,
    {
        if let Some(s) = self.usable()? {
            return Ok(s);
        }
        let _one_at_a_time = self.opening.lock().await;
        if let Some(s) = self.usable()? {
            return Ok(s);
        }
        let session = open().await?;
        self.keep(&self.current, session, |current, s| *current = Some(s))
            .await
    }

    /// Keep `session` in `slot` with `put`, under `slot`'s lock, unless the
    /// client closed: `close` sets `closed` before it takes each slot's
    /// lock, so a session kept here is one `close` returns. A session not
    /// kept is discarded.
    async fn keep<T>(
        &self,
        slot: &Mutex<T>,
        session: Arc<S>,
        put: impl FnOnce(&mut T, Arc<S>),
    ) -> Result<Arc<S>> {
        {
            let mut kept = slot.lock();
            if !self.closed.load(Ordering::SeqCst) {
                put(&mut kept, session.clone());
                return Ok(session);
            }
        }
        session.discard().await;
        Err(Error::Closed)
    }

    /// A session for an acquisition of `name`, with its turn at the name:
    /// the primary session when its turn is free, else a new one `open`ed
    /// for this acquisition alone (the store ends it when the acquisition
    /// and its guard are over: no session outlives what needed it). Two
    /// acquisitions of one name in this process so never share a session.
    ///
    /// # Errors
    ///
    /// As for [`primary`](Sessions::primary).
    pub async fn for_name<F, Fut>(&self, name: &str, open: F) -> Result<(Arc<S>, Turn)>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Arc<S>>>,
    {
        let primary = self.primary(&open).await?;
        if let Some(turn) = primary.turns().try_take(name) {
            return Ok((primary, turn));
        }
        self.pool.lock().retain(|s| s.is_usable());
        let session = self.unless_closed(open().await?).await?;
        let turn = session
            .turns()
            .try_take(name)
            .ok_or_else(|| Error::Backend {
                message: "a new session already had a turn at the name".into(),
                retryable: true,
                source: None,
            })?;
        let session = self.keep(&self.pool, session, |pool, s| pool.push(s));
        Ok((session.await?, turn))
    }

    /// Every session still kept, without taking them out.
    pub fn all(&self) -> Vec<Arc<S>> {
        let mut all: Vec<_> = self.current().into_iter().collect();
        all.extend(self.pool.lock().iter().cloned());
        all
    }

    /// Close: no session is handed out from now on; every kept one is
    /// taken out and returned.
    pub fn close(&self) -> Vec<Arc<S>> {
        self.closed.store(true, Ordering::SeqCst);
        let mut all: Vec<_> = self.current.lock().take().into_iter().collect();
        all.append(&mut self.pool.lock());
        all
    }
}

impl<S> fmt::Debug for Sessions<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("pooled", &self.pool.lock().len())
            .field("closed", &self.closed.load(Ordering::SeqCst))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_turn_per_name_at_a_time() {
        let turns = NamedTurns::default();
        let a = turns.try_take("/a").unwrap();
        assert!(turns.try_take("/a").is_none());
        assert!(turns.try_take("/b").is_some());
        let past = Some(Instant::now());
        assert!(turns.wait("/a", past).await.is_none());
        drop(a);
        assert!(
            turns.wait("/a", past).await.is_some(),
            "a free turn is taken"
        );
    }
}
