//! The connected backend, and acquiring a lock, permit or leadership on it
//! as one [`Held`] shape the supervisor works with.

use std::fmt;
use std::time::{Duration, Instant};

use recipes_core::tls::with_tls;
use recipes_core::{Client, FencingToken, LockKind, LossSignal, Result, Tls};
use recipes_etcd::EtcdClient;
use recipes_pg::PgClient;
use recipes_redis::RedisClient;
use recipes_zk::ZkClient;

use crate::cli::BackendChoice;
use crate::credentials::Credentials;

/// How long to wait for the first session before calling the backend
/// unreachable: the TTL (a server that cannot answer within it could not
/// keep our lease either), within 2..=10 s.
fn connect_timeout(ttl: Duration) -> Duration {
    ttl.clamp(Duration::from_secs(2), Duration::from_secs(10))
}

/// A connected client of one store: the one place the CLI branches on
/// the store; everything else is written against [`Client`].
#[derive(Debug)]
pub enum Connected {
    /// ZooKeeper.
    Zk(ZkClient),
    /// etcd.
    Etcd(EtcdClient),
    /// PostgreSQL.
    Pg(PgClient),
    /// Redis (a single node).
    Redis(RedisClient),
}

/// Run `$body` with `$client` bound to the connected client, whatever its
/// store.
macro_rules! on_client {
    ($connected:expr, $client:ident => $body:expr) => {
        match $connected {
            $crate::backend::Connected::Zk($client) => $body,
            $crate::backend::Connected::Etcd($client) => $body,
            $crate::backend::Connected::Pg($client) => $body,
            $crate::backend::Connected::Redis($client) => $body,
        }
    };
}
pub(crate) use on_client;

/// Connect to the chosen store with `ttl` as the session timeout or lease
/// TTL, over `tls` when given, as `user` (on ZooKeeper by SASL when
/// `zk_sasl`, else as a digest identity).
///
/// # Errors
///
/// [`recipes_core::Error::InvalidArgument`] for unusable settings, other
/// errors when no server answered.
pub fn connect(
    choice: &BackendChoice,
    ttl: Duration,
    user: Option<&Credentials>,
    zk_sasl: bool,
    tls: Option<&Tls>,
) -> Result<Connected> {
    // Each builder: TLS, the lease, the connect timeout, the credentials.
    macro_rules! connect_with {
        ($builder:expr, $login:ident, $connected:path) => {{
            let mut builder = with_tls($builder, tls.cloned(), |b, t| b.tls(t))
                .ttl(ttl)
                .connect_timeout(connect_timeout(ttl));
            if let Some(c) = user {
                builder = builder.$login(c.user.clone(), c.password.clone());
            }
            builder.connect().map($connected)
        }};
    }
    match choice {
        BackendChoice::Zk(hosts) if zk_sasl => {
            connect_with!(ZkClient::builder(hosts.clone()), sasl_digest, Connected::Zk)
        }
        BackendChoice::Zk(hosts) => {
            connect_with!(ZkClient::builder(hosts.clone()), digest_auth, Connected::Zk)
        }
        BackendChoice::Etcd(endpoints) => {
            connect_with!(
                EtcdClient::builder(endpoints.clone()),
                user,
                Connected::Etcd
            )
        }
        BackendChoice::Pg(url, mode) => connect_with!(
            PgClient::builder(url.clone()).mode(*mode),
            user,
            Connected::Pg
        ),
        BackendChoice::Redis(url) => {
            connect_with!(RedisClient::builder(url.clone()), user, Connected::Redis)
        }
    }
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
    /// Locks: one mutex, one side of a read-write lock, or several of
    /// them all or nothing; each name with what to take, in command-line
    /// order.
    Locks(Vec<(String, LockKind)>),
    /// One of this many permits.
    Semaphore(u32),
    /// Leadership, campaigning with this id.
    Elect(String),
    /// A member of a double barrier of this many, leaving within this
    /// long (as long as it takes: `None`).
    DoubleBarrier(u32, Option<std::time::Duration>),
    /// Membership of a group, with this id and data.
    Join(String, String),
}

/// One lock of several held together.
#[derive(Debug, Clone)]
pub struct HeldPart {
    /// The lock's name.
    pub name: String,
    /// Its fencing token.
    pub fence: FencingToken,
    /// Where it lives in the store.
    pub holder: String,
}

/// A held lock, permit or leadership, whatever the store.
pub struct Held {
    /// The fencing token (none for a permit); the first name's of several.
    pub fence: Option<FencingToken>,
    /// Where it lives in the store (node path or key); the first name's.
    pub holder: String,
    /// Fires when it may be gone (any one of several).
    pub lost: LossSignal,
    /// Each of several locks held together, in command-line order; empty
    /// for one.
    pub parts: Vec<HeldPart>,
    /// Of several: the name whose lease was lost first, once one was.
    pub lost_name: Option<Box<dyn Fn() -> Option<String> + Send>>,
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
            parts: Vec::new(),
            lost_name: None,
            release: Box::new(release),
        }
    }

    /// Of several, which lease was lost, for a message: ` (the lock on
    /// <name>)` once it is known; else nothing.
    pub fn which_was_lost(&self) -> String {
        match self.lost_name.as_ref().and_then(|name| name()) {
            Some(name) => format!(" (the lock on {name})"),
            None => String::new(),
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

/// Acquire `recipe` on `name` through `client`; `Ok(None)` when `wait`
/// ran out first.
///
/// # Errors
///
/// Backend errors; [`recipes_core::Error::InvalidArgument`] for a bad name
/// or size.
pub fn acquire<C: Client>(
    client: &C,
    recipe: &Recipe,
    name: &str,
    wait: Wait,
) -> Result<Option<Held>> {
    match recipe {
        Recipe::Locks(parts) => match parts.as_slice() {
            [(name, LockKind::Mutex)] => lock(&client.mutex(name)?, wait),
            [(name, LockKind::Read)] => read(&client.rw_lock(name)?, wait),
            [(name, LockKind::Write)] => write(&client.rw_lock(name)?, wait),
            parts => crate::locks::multi(client, parts, wait),
        },
        Recipe::Semaphore(n) => permit(&client.semaphore(name, *n)?, wait),
        Recipe::Elect(id) => {
            recipes_core::store::validate_participant_id("election", id)?;
            campaign(&client.election(name)?, id, wait)
        }
        Recipe::DoubleBarrier(count, leave) => {
            crate::double_barrier::enter(&client.double_barrier(name, *count)?, wait, *leave)
        }
        Recipe::Join(id, data) => {
            let member = client.group(name)?.join(id, data.as_bytes())?;
            let (holder, lost) = (format!("{name}/{id}"), member.lost().clone());
            Ok(Some(Held::new(None, holder, lost, move || {
                member.release()
            })))
        }
    }
}

fn lock<B: recipes_core::store::MutexBackend>(
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

fn read<B: recipes_core::store::RwLockBackend>(
    rw: &recipes_core::RwLock<B>,
    wait: Wait,
) -> Result<Option<Held>> {
    let guard = match wait {
        Wait::Forever => Some(rw.read()?),
        Wait::AtOnce => rw.try_read()?,
        Wait::Until(t) => rw.try_read_until(t)?,
    };
    Ok(guard.map(|g| {
        let (token, holder, lost) = (g.token(), g.holder().to_owned(), g.lost().clone());
        Held::new(Some(token), holder, lost, move || g.release())
    }))
}

fn write<B: recipes_core::store::RwLockBackend>(
    rw: &recipes_core::RwLock<B>,
    wait: Wait,
) -> Result<Option<Held>> {
    let guard = match wait {
        Wait::Forever => Some(rw.write()?),
        Wait::AtOnce => rw.try_write()?,
        Wait::Until(t) => rw.try_write_until(t)?,
    };
    Ok(guard.map(|g| {
        let (token, holder, lost) = (g.token(), g.holder().to_owned(), g.lost().clone());
        Held::new(Some(token), holder, lost, move || g.release())
    }))
}

fn permit<B: recipes_core::store::SemaphoreBackend>(
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

/// Leadership of the election `name` (on ZooKeeper Curator's latch layout,
/// so Curator `LeaderLatch`es on the same path contend with it).
fn campaign<B: recipes_core::store::ElectionBackend>(
    election: &recipes_core::Election<B>,
    id: &str,
    wait: Wait,
) -> Result<Option<Held>> {
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
