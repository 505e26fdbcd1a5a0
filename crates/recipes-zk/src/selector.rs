//! `LeaderSelector`: run a closure while leader (Curator's selector layout,
//! which is its mutex: `<path>/_c_<uuid>-lock-<seq10>`, data = the id).
//!
//! The closure runs on the selector's own thread, never on the runtime. It
//! gets the held lock (fence, loss signal, fenced writes); when leadership
//! may be gone — or the selector is closed — the guard's loss signal fires
//! and the closure must stop. After it returns, leadership is released and,
//! with `requeue`, the selector queues again.

use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;
use recipes_core::{Error, LossReason, LossTrigger, Result};
use tokio::sync::watch;

use crate::client::ZkClient;
use crate::latch::{participants, Participant};
use crate::lock_internals::{acquire, Contender};
use crate::mutex::ZkLock;
use crate::names::validate_path;
use crate::MutexGuard;

/// Runs a closure while this participant leads.
///
/// # Under pause and partition
///
/// Two closures may run at once if a leader is paused past its session:
/// the old one finds its guard's loss signal fired when it resumes, and its
/// writes fenced with the guard's token are refused. Do not rely on the
/// closure having stopped; rely on the fence.
pub struct LeaderSelector {
    client: ZkClient,
    contender: Contender,
    closed: watch::Sender<bool>,
    // The current term's trigger, fired when the selector closes.
    term: Arc<Mutex<Option<LossTrigger>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl LeaderSelector {
    /// Start the selector's thread: queue for leadership, run `leader` with
    /// the held lock while leading, release when it returns, and queue again
    /// if `requeue`. Calling it twice is an error.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if already started; [`Error::Backend`] if
    /// the thread cannot be spawned.
    pub fn start<F>(&self, requeue: bool, mut leader: F) -> Result<()>
    where
        F: FnMut(&MutexGuard) + Send + 'static,
    {
        let mut thread = self.thread.lock();
        if thread.is_some() {
            return Err(Error::invalid("the selector is already started"));
        }
        let (client, contender) = (self.client.clone(), self.contender.clone());
        let (close, term) = (self.closed.subscribe(), self.term.clone());
        let label = format!("[path={}]", contender.dir);
        let spawned = std::thread::Builder::new()
            .name("recipes-zk-selector".into())
            .spawn(move || loop {
                let (c, cont) = (client.clone(), contender.clone());
                let mut closing = close.clone();
                let acquired =
                    client
                        .runtime()
                        .call_until("queue for leadership", None, async move {
                            tokio::select! {
                                r = acquire(&c, &cont, None) => r,
                                _ = closing.wait_for(|c| *c) => Ok(None),
                            }
                        });
                let guard = match acquired {
                    Ok(Some(a)) => MutexGuard::from_lease(ZkLock::held(client.clone(), a)),
                    Ok(None) | Err(Error::Closed) => return,
                    Err(e) => {
                        log::warn!("{label} selector: {e}; queueing again");
                        std::thread::sleep(std::time::Duration::from_millis(200));
                        continue;
                    }
                };
                *term.lock() = Some(guard.lease().trigger().clone());
                if *close.borrow() {
                    guard.lease().trigger().fire(LossReason::Closed);
                }
                log::info!("{label} leadership gained (fence {})", guard.token());
                leader(&guard);
                *term.lock() = None;
                log::info!("{label} leadership released");
                if let Err(e) = guard.release() {
                    log::warn!("{label} release failed: {e}; retrying in the background");
                }
                if !requeue || *close.borrow() {
                    return;
                }
            })
            .map_err(|e| Error::backend("cannot spawn the selector thread", false, e))?;
        *thread = Some(spawned);
        Ok(())
    }

    /// Whether the closure is running as leader now.
    pub fn has_leadership(&self) -> bool {
        self.term
            .lock()
            .as_ref()
            .is_some_and(|t| !t.signal().is_lost())
    }

    /// Every participant in queue order (the first leads).
    ///
    /// # Errors
    ///
    /// Backend errors.
    pub fn participants(&self) -> Result<Vec<Participant>> {
        participants(&self.client, &self.contender.dir)
    }

    /// Stop: tell a running closure to stop (its guard's loss signal fires
    /// with [`LossReason::Closed`]), wait for it to return, release, and
    /// leave the queue. Blocks until the closure returns.
    pub fn close(&self) {
        self.closed.send_replace(true);
        if let Some(t) = self.term.lock().as_ref() {
            t.fire(LossReason::Closed);
        }
        if let Some(thread) = self.thread.lock().take() {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for LeaderSelector {
    fn drop(&mut self) {
        // Tell the closure and the queue to stop, without waiting.
        self.closed.send_replace(true);
        if let Some(t) = self.term.lock().as_ref() {
            t.fire(LossReason::Closed);
        }
    }
}

impl fmt::Debug for LeaderSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderSelector")
            .field("path", &self.contender.dir)
            .field("leading", &self.has_leadership())
            .finish()
    }
}

impl ZkClient {
    /// A leader selector at `path` for participant `id` (Curator's
    /// `LeaderSelector` layout: its mutex names). Call
    /// [`start`](LeaderSelector::start) with the closure to run while
    /// leading.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad path or an empty id.
    pub fn leader_selector(&self, path: &str, id: &str) -> Result<LeaderSelector> {
        validate_path(path)?;
        if id.is_empty() {
            return Err(Error::invalid(
                "a selector participant id must not be empty; use e.g. the host name",
            ));
        }
        Ok(LeaderSelector {
            client: self.clone(),
            contender: Contender {
                dir: path.to_owned(),
                lock_name: "lock-",
                data: id.as_bytes().to_vec(),
                max_leases: 1,
            },
            closed: watch::channel(false).0,
            term: Arc::new(Mutex::new(None)),
            thread: Mutex::new(None),
        })
    }
}
