//! `LeaderSelector`: run a closure while leader, over the election layout
//! (`<name>/<lease id in hex>` = the participant id).
//!
//! The closure runs on the selector's own thread, never on the runtime. It
//! gets the held [`Leadership`] (fence, loss signal, proclaim, fenced
//! writes); when leadership may be gone — or the selector is closed — its
//! loss signal fires and the closure must stop. After it returns, the
//! selector resigns and, with `requeue`, campaigns again with a new key.

use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use recipes_core::{ElectionBackend, Error, LossReason, LossTrigger, Result};
use tokio::sync::watch;

use crate::client::EtcdClient;
use crate::election::{Election, EtcdElection, Leadership};
use crate::latch::{participants, validate_id, Participant};

/// How long the selector waits before campaigning again after an error.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Runs a closure while this participant leads.
///
/// Made by [`EtcdClient::leader_selector`]; same API as the ZooKeeper
/// selector, over the election layout.
///
/// # Under pause and partition
///
/// Guaranteed (clocks within 500 ppm): the closure's [`Leadership`] loss
/// signal fires before etcd can expire the client's lease and let another
/// participant lead, and fences strictly increase from one closure run to
/// the next, across participants. Not guaranteed: that only one closure
/// runs at a time — a leader paused past its lease resumes inside its
/// closure while another runs; it finds its loss signal fired, and its
/// writes fenced with the token (or through the leadership's fenced writes)
/// are refused. Do not rely on the closure having stopped; rely on the
/// fence.
pub struct LeaderSelector {
    election: EtcdElection,
    id: String,
    closed: watch::Sender<bool>,
    // The current term's trigger, fired when the selector closes.
    term: Arc<Mutex<Option<LossTrigger>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl LeaderSelector {
    /// Start the selector's thread: campaign, run `leader` with the held
    /// leadership while leading, resign when it returns, and campaign again
    /// (with a new key) if `requeue`. Calling it twice is an error.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if already started (or closed);
    /// [`Error::Backend`] if the thread cannot be spawned.
    pub fn start<F>(&self, requeue: bool, mut leader: F) -> Result<()>
    where
        F: FnMut(&Leadership) + Send + 'static,
    {
        let mut thread = self.thread.lock();
        if thread.is_some() || *self.closed.borrow() {
            return Err(Error::invalid(
                "the selector is already started (or closed); make another one",
            ));
        }
        let close = self.closed.subscribe();
        let election = Election::from_backend(self.election.clone().cancelled_by(close.clone()));
        let (term, id) = (self.term.clone(), self.id.clone());
        let label = format!("[name={} id={id}]", self.election.name());
        let spawned = std::thread::Builder::new()
            .name("recipes-etcd-selector".into())
            .spawn(move || loop {
                // No deadline: `Ok(None)` only when the selector closes.
                let won = election.try_campaign_for(id.as_bytes(), Duration::MAX);
                let leadership = match won {
                    Ok(Some(l)) => l,
                    Ok(None) | Err(Error::Closed) => return,
                    Err(e) => {
                        log::warn!("{label} selector: {e}; campaigning again");
                        std::thread::sleep(RETRY_PAUSE);
                        if *close.borrow() {
                            return;
                        }
                        continue;
                    }
                };
                *term.lock() = Some(leadership.lease().trigger().clone());
                if *close.borrow() {
                    leadership.lease().trigger().fire(LossReason::Closed);
                }
                log::info!("{label} running as leader (fence {})", leadership.token());
                leader(&leadership);
                *term.lock() = None;
                log::info!("{label} resigning");
                if let Err(e) = leadership.resign() {
                    log::warn!("{label} resign failed: {e}; retrying in the background");
                }
                if !requeue || *close.borrow() {
                    return;
                }
            })
            .map_err(|e| Error::backend("cannot spawn the selector thread", false, e))?;
        *thread = Some(spawned);
        Ok(())
    }

    /// Whether the closure is running as leader now (reads the lease
    /// deadline).
    pub fn has_leadership(&self) -> bool {
        self.term
            .lock()
            .as_ref()
            .is_some_and(|t| !t.signal().is_lost())
    }

    /// This participant's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Every participant, oldest first (the first leads).
    ///
    /// # Errors
    ///
    /// Backend errors.
    pub fn participants(&self) -> Result<Vec<Participant>> {
        participants(&self.election)
    }

    /// Stop: tell a running closure to stop (its leadership's loss signal
    /// fires with [`LossReason::Closed`]), wait for it to return, resign,
    /// and stop campaigning. Blocks until the closure returns and the
    /// resignation is confirmed (or handed to the background after an
    /// error).
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
        // Tell the closure and the campaign to stop, without waiting.
        self.closed.send_replace(true);
        if let Some(t) = self.term.lock().as_ref() {
            t.fire(LossReason::Closed);
        }
    }
}

impl fmt::Debug for LeaderSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderSelector")
            .field("name", &self.election.name())
            .field("id", &self.id)
            .field("leading", &self.has_leadership())
            .finish()
    }
}

impl EtcdClient {
    /// A leader selector on the election `name` for participant `id` (the
    /// value of its key). Call [`start`](LeaderSelector::start) with the
    /// closure to run while leading.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name (as for
    /// [`election`](EtcdClient::election)) or an empty id.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), recipes_etcd::Error> {
    /// use std::time::Duration;
    /// let client = recipes_etcd::EtcdClient::connect(["127.0.0.1:2379"])?;
    /// let selector = client.leader_selector("/elections/compactor", "host-a")?;
    /// selector.start(true, |leadership| {
    ///     // Work until leadership may be gone; fence every write.
    ///     while leadership.lost().wait_timeout(Duration::from_secs(1)).is_none() {
    ///         let _ = leadership.lease().put("/compactor/last-run", leadership.token().to_string());
    ///     }
    /// })?;
    /// // … later:
    /// selector.close();
    /// # Ok(())
    /// # }
    /// ```
    pub fn leader_selector(&self, name: &str, id: &str) -> Result<LeaderSelector> {
        let election = EtcdElection::new(self.clone(), name)?;
        validate_id("selector", id)?;
        Ok(LeaderSelector {
            election,
            id: id.to_owned(),
            closed: watch::channel(false).0,
            term: Arc::new(Mutex::new(None)),
            thread: Mutex::new(None),
        })
    }
}
