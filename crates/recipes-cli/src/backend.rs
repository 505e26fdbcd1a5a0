//! The connected backend, and acquiring a lock, permit or leadership on it
//! as one [`Held`] shape the supervisor works with.

use std::fmt;
use std::time::{Duration, Instant};

use recipes_core::{FencingToken, LossSignal, Result};
use recipes_etcd::EtcdClient;
use recipes_zk::{LeaderLatch, ZkClient};

use crate::cli::BackendChoice;

/// How long to wait for the first session before calling the backend
/// unreachable: the TTL (a server that cannot answer within it could not
/// keep our lease either), within 2..=10 s.
fn connect_timeout(ttl: Duration) -> Duration {
    ttl.clamp(Duration::from_secs(2), Duration::from_secs(10))
}

/// A connected client of either store.
#[derive(Debug, Clone)]
pub enum Backend {
    /// ZooKeeper.
    Zk(ZkClient),
    /// etcd.
    Etcd(EtcdClient),
}

/// How long to wait for the lock, permit or leadership.
#[derive(Debug, Clone, Copy)]
pub enum Wait {
    /// As long as it takes.
    Forever,
    /// Only if free now.
    AtOnce,
    /// Until this moment.
    Until(Instant),
}

/// What is acquired.
#[derive(Debug, Clone)]
pub enum Recipe {
    /// A mutex.
    Lock,
    /// One of this many permits.
    Semaphore(u32),
    /// Leadership, campaigning with this id.
    Elect(String),
}

/// A held lock, permit or leadership, whatever the store.
pub struct Held {
    /// The fencing token (none for a permit).
    pub fence: Option<FencingToken>,
    /// Where it lives in the store (node path or key).
    pub holder: String,
    /// Fires when it may be gone.
    pub lost: LossSignal,
    release: Box<dyn FnOnce() -> Result<()> + Send>,
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held")
            .field("fence", &self.fence)
            .field("holder", &self.holder)
            .field("lost", &self.lost.reason())
            .finish()
    }
}

impl Held {
    /// A held lock, permit or leadership; `release` gives it up.
    pub fn new(
        fence: Option<FencingToken>,
        holder: String,
        lost: LossSignal,
        release: impl FnOnce() -> Result<()> + Send + 'static,
    ) -> Held {
        Held {
            fence,
            holder,
            lost,
            release: Box::new(release),
        }
    }

    /// Give it up and wait until the store confirmed.
    ///
    /// # Errors
    ///
    /// When the store could not confirm; the lease bounds the leftover.
    pub fn release(self) -> Result<()> {
        (self.release)()
    }
}

impl Backend {
    /// Connect to the chosen store with `ttl` as the session timeout or
    /// lease TTL.
    ///
    /// # Errors
    ///
    /// [`recipes_core::Error::InvalidArgument`] for unusable settings, other errors when
    /// no server answered.
    pub fn connect(choice: &BackendChoice, ttl: Duration) -> Result<Backend> {
        match choice {
            BackendChoice::Zk(hosts) => ZkClient::builder(hosts.clone())
                .session_timeout(ttl)
                .connect_timeout(connect_timeout(ttl))
                .connect()
                .map(Backend::Zk),
            BackendChoice::Etcd(endpoints) => EtcdClient::builder(endpoints.clone())
                .ttl(ttl)
                .connect_timeout(connect_timeout(ttl))
                .connect()
                .map(Backend::Etcd),
        }
    }

    /// The session timeout or lease TTL the server granted (it may differ
    /// from the one asked for).
    pub fn granted_ttl(&self) -> Duration {
        match self {
            Backend::Zk(c) => c.session_timeout(),
            Backend::Etcd(c) => c.session_ttl(),
        }
    }

    /// Close the session (deleting what it still holds) within `grace`.
    pub fn close(&self, grace: Duration) {
        match self {
            Backend::Zk(c) => c.close(grace),
            Backend::Etcd(c) => c.close(grace),
        }
    }

    /// Acquire `recipe` on `name`; `Ok(None)` when `wait` ran out first.
    ///
    /// # Errors
    ///
    /// Backend errors; [`recipes_core::Error::InvalidArgument`] for a bad name
    /// or size.
    pub fn acquire(&self, recipe: &Recipe, name: &str, wait: Wait) -> Result<Option<Held>> {
        match (self, recipe) {
            (Backend::Zk(c), Recipe::Lock) => lock(&c.mutex(name)?, wait),
            (Backend::Etcd(c), Recipe::Lock) => lock(&c.mutex(name)?, wait),
            (Backend::Zk(c), Recipe::Semaphore(n)) => permit(&c.semaphore(name, *n)?, wait),
            (Backend::Etcd(c), Recipe::Semaphore(n)) => permit(&c.semaphore(name, *n)?, wait),
            (Backend::Zk(c), Recipe::Elect(id)) => zk_latch(c, name, id, wait),
            (Backend::Etcd(c), Recipe::Elect(id)) => etcd_campaign(c, name, id, wait),
        }
    }
}

fn lock<B: recipes_core::MutexBackend>(
    mutex: &recipes_core::Mutex<B>,
    wait: Wait,
) -> Result<Option<Held>> {
    let guard = match wait {
        Wait::Forever => Some(mutex.lock()?),
        Wait::AtOnce => mutex.try_lock()?,
        Wait::Until(t) => mutex.try_lock_until(t)?,
    };
    Ok(guard.map(|g| {
        let (token, holder, lost) = (g.token(), g.holder().to_owned(), g.lost().clone());
        Held::new(Some(token), holder, lost, move || g.release())
    }))
}

fn permit<B: recipes_core::SemaphoreBackend>(
    semaphore: &recipes_core::Semaphore<B>,
    wait: Wait,
) -> Result<Option<Held>> {
    let permit = match wait {
        Wait::Forever => Some(semaphore.acquire()?),
        Wait::AtOnce => semaphore.try_acquire()?,
        Wait::Until(t) => semaphore.try_acquire_until(t)?,
    };
    Ok(permit.map(|p| {
        let (holder, lost) = (p.holder().to_owned(), p.lost().clone());
        Held::new(None, holder, lost, move || p.release())
    }))
}

fn etcd_campaign(client: &EtcdClient, name: &str, id: &str, wait: Wait) -> Result<Option<Held>> {
    let election = client.election(name)?;
    let leadership = match wait {
        Wait::Forever => Some(election.campaign(id.as_bytes())?),
        Wait::AtOnce => election.try_campaign(id.as_bytes())?,
        Wait::Until(t) => election.try_campaign_until(id.as_bytes(), t)?,
    };
    Ok(leadership.map(|l| {
        let (token, holder, lost) = (l.token(), l.holder().to_owned(), l.lost().clone());
        Held::new(Some(token), holder, lost, move || l.resign())
    }))
}

/// ZooKeeper leadership through a `LeaderLatch` (Curator's latch layout):
/// the latch is closed on every way out, so an abandoned or lost campaign
/// never leads again in the background.
fn zk_latch(client: &ZkClient, name: &str, id: &str, wait: Wait) -> Result<Option<Held>> {
    let latch = client.leader_latch(name, id)?;
    // Another leader now is the whole answer to --no-wait: joining would
    // only queue behind it.
    if matches!(wait, Wait::AtOnce) && latch.leader()?.is_some() {
        return Ok(None);
    }
    latch.start();
    let leading = match wait {
        Wait::AtOnce => lead_unless_another_leads(&latch, id, client.session_timeout()),
        Wait::Forever => await_leadership(&latch, None),
        Wait::Until(t) => await_leadership(&latch, Some(t)),
    };
    let Some((token, lost)) = leading else {
        let _ = latch.close();
        return Ok(None);
    };
    let holder = latch
        .participants()
        .ok()
        .and_then(|ps| ps.into_iter().find(|p| p.is_leader && p.id == id))
        .map(|p| p.holder)
        .unwrap_or_else(|| name.to_owned());
    Ok(Some(Held::new(Some(token), holder, lost, move || {
        latch.close()
    })))
}

/// Leadership of the started `latch`, waiting until `deadline` (`None`:
/// as long as it takes).
fn await_leadership(
    latch: &LeaderLatch,
    deadline: Option<Instant>,
) -> Option<(FencingToken, LossSignal)> {
    loop {
        let step = match deadline {
            None => Duration::from_secs(3600),
            Some(t) => t.saturating_duration_since(Instant::now()),
        };
        if latch.await_leadership(step) {
            if let Some(leading) = latch.leadership() {
                return Some(leading);
            }
        }
        if deadline.is_some_and(|t| Instant::now() >= t) {
            return None;
        }
    }
}

/// Leadership of the just started `latch` if its node comes first: waits
/// only for the node's creation and the queue's read, and answers `None` as
/// soon as the store shows another participant leading. `bound` ends the
/// wait when neither comes — a store that does not answer, or a leader
/// with our own `id`, whose node cannot be told from ours.
fn lead_unless_another_leads(
    latch: &LeaderLatch,
    id: &str,
    bound: Duration,
) -> Option<(FencingToken, LossSignal)> {
    // How often the queue is read while our node is on its way.
    const POLL: Duration = Duration::from_millis(20);
    let until = Instant::now() + bound;
    loop {
        if latch.await_leadership(POLL) {
            if let Some(leading) = latch.leadership() {
                return Some(leading);
            }
        }
        let another = latch.leader().ok().flatten().is_some_and(|l| l.id != id);
        if another || Instant::now() >= until {
            return None;
        }
    }
}
