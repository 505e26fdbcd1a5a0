//! What the restart tests share (`restart.rs`, `restart_recipes.rs`): a
//! server of each store that can be killed and restarted with its data
//! kept ([`Rig`]), the store's view of a name's entries and of the
//! clients' sessions, and the end of a test: nothing left behind.

#![allow(dead_code)]

use std::time::Duration;

use integration::{
    scale, wait_until, EtcdServer, PgFacts, PgServer, RedisConfig, RedisServer, ZkServer,
};
use recipes_core::{BootInstant, Client};

/// The lease of every client here: much longer than an outage.
pub const TTL: Duration = Duration::from_secs(10);
/// How long after the restart the waiters may take to acquire.
pub const AFTER_RESTART: Duration = Duration::from_secs(20);

/// A server of one store, killed and restarted with its data kept.
pub trait Rig: Sized + Send + Sync + 'static {
    type C: Client;
    /// Whether a holding rides out a restart: its session or lease is in
    /// the store's data (every store here but PostgreSQL's session mode,
    /// whose advisory locks end with the backend that holds them).
    const KEEPS_HOLDINGS: bool = true;
    fn start() -> Self;
    fn connect(&self) -> Self::C {
        self.connect_with(TTL)
    }
    fn connect_with(&self, ttl: Duration) -> Self::C;
    fn kill(&self);
    fn restart(&self);
    /// The contenders' entries under `name` as the server lists them.
    fn entries(&self, name: &str) -> Vec<String>;
    /// What the store keeps of `name` besides the fence (its entries,
    /// and on Redis the keys beside them).
    fn left(&self, name: &str) -> Vec<String> {
        self.entries(name)
    }
    /// The server's leases or sessions; empty on ZooKeeper.
    fn leases(&self) -> Vec<i64>;
    /// Return once `client` is ready for a fenced write after the restart
    /// that began at `killed`: at once but on Redis (see its impl).
    fn ready_to_write(&self, client: &Self::C, killed: BootInstant) {
        let _ = (client, killed);
    }
}

impl Rig for ZkServer {
    type C = recipes_zk::ZkClient;
    fn start() -> Self {
        ZkServer::start()
    }
    fn connect_with(&self, ttl: Duration) -> Self::C {
        recipes_zk::ZkClient::builder(self.connect_string())
            .session_timeout(ttl)
            .connect()
            .expect("connect")
    }
    fn kill(&self) {
        ZkServer::kill(self)
    }
    fn restart(&self) {
        ZkServer::restart(self)
    }
    fn entries(&self, name: &str) -> Vec<String> {
        self.facts().children(name)
    }
    fn leases(&self) -> Vec<i64> {
        Vec::new()
    }
}

impl Rig for EtcdServer {
    type C = recipes_etcd::EtcdClient;
    fn start() -> Self {
        EtcdServer::start()
    }
    fn connect_with(&self, ttl: Duration) -> Self::C {
        recipes_etcd::EtcdClient::builder(self.endpoints())
            .ttl(ttl)
            .connect()
            .expect("connect")
    }
    fn kill(&self) {
        EtcdServer::kill(self)
    }
    fn restart(&self) {
        EtcdServer::restart(self)
    }
    fn entries(&self, name: &str) -> Vec<String> {
        self.facts().keys_with_prefix(&format!("{name}/"))
    }
    fn leases(&self) -> Vec<i64> {
        self.facts().leases()
    }
}

impl Rig for PgServer {
    type C = recipes_pg::PgClient;
    fn start() -> Self {
        PgServer::start()
    }
    fn connect_with(&self, ttl: Duration) -> Self::C {
        recipes_pg::PgClient::builder(self.url())
            .ttl(ttl)
            .connect()
            .expect("connect")
    }
    fn kill(&self) {
        PgServer::kill(self)
    }
    fn restart(&self) {
        PgServer::restart(self)
    }
    fn entries(&self, name: &str) -> Vec<String> {
        PgFacts::new(self.addr()).entries_under(name)
    }
    /// The session rows, live or not.
    fn leases(&self) -> Vec<i64> {
        let rows = PgFacts::new(self.addr()).sessions();
        rows.iter().filter_map(|id| id.parse().ok()).collect()
    }
}

/// A PostgreSQL server whose clients are in session mode: advisory locks
/// on connections of their own, which a restart ends.
pub struct PgSessionMode(PgServer);

impl Rig for PgSessionMode {
    type C = recipes_pg::PgClient;
    const KEEPS_HOLDINGS: bool = false;
    fn start() -> Self {
        PgSessionMode(PgServer::start())
    }
    fn connect_with(&self, ttl: Duration) -> Self::C {
        recipes_pg::PgClient::builder(self.0.url())
            .ttl(ttl)
            .session_mode()
            .connect()
            .expect("connect")
    }
    fn kill(&self) {
        self.0.kill()
    }
    fn restart(&self) {
        self.0.restart()
    }
    /// The backends holding or waiting for `name`'s advisory key.
    fn entries(&self, name: &str) -> Vec<String> {
        let facts = PgFacts::new(self.0.addr());
        let mut all = facts.advisory(name, true);
        all.extend(facts.advisory(name, false));
        all
    }
    /// The backends holding or waiting for any advisory lock of ours.
    fn leases(&self) -> Vec<i64> {
        let locks = PgFacts::new(self.0.addr()).advisory_all();
        let pids = locks
            .iter()
            .filter_map(|l| l.split(':').next()?.parse().ok());
        pids.collect()
    }
}

/// The keys of every Redis recipe.
const NS: &str = "{recipes}:";

/// A Redis server with its append-only file synced at every write, so a
/// restart keeps every key (without it a restart is a data loss, tested in
/// `redis_data_loss.rs`).
impl Rig for RedisServer {
    type C = recipes_redis::RedisClient;
    fn start() -> Self {
        RedisServer::start_with(RedisConfig {
            aof: Some("always"),
            ..RedisConfig::default()
        })
    }
    fn connect_with(&self, ttl: Duration) -> Self::C {
        recipes_redis::RedisClient::builder(self.url())
            .ttl(ttl)
            .connect()
            .expect("connect")
    }
    fn kill(&self) {
        RedisServer::kill(self)
    }
    fn restart(&self) {
        RedisServer::restart(self)
    }
    /// The members of `name`'s queue, holding or waiting.
    fn entries(&self, name: &str) -> Vec<String> {
        self.cmd(&["ZRANGE", &format!("{NS}q:{name}"), "0", "-1"])
    }
    /// Every key of `name` (queue, roles, hold keys), its fence counter
    /// aside: kept for ever, so that fences never repeat.
    fn left(&self, name: &str) -> Vec<String> {
        let mut keys = self.keys(&format!("{NS}*{name}*"));
        keys.retain(|k| !k.starts_with(&format!("{NS}fence:")));
        keys
    }
    /// Once a request of `client` was answered after the restart (its
    /// renewal, within a third of its TTL): the connection manager of the
    /// `redis` crate (RESP2) reconnects only after a request failed on the
    /// dropped connection, and a fenced write is never resent (it is not
    /// idempotent), so one sent first after a restart is `Indeterminate`
    /// although it never left the client.
    fn ready_to_write(&self, client: &Self::C, killed: BootInstant) {
        wait_until("a renewal after the restart", scale(TTL), || {
            client.last_acknowledged().is_some_and(|at| at > killed)
        });
    }
    /// The sessions with a key or an index of entries.
    fn leases(&self) -> Vec<i64> {
        let mut keys = self.keys(&format!("{NS}s:*"));
        keys.extend(self.keys(&format!("{NS}h:*")));
        let ids = keys
            .iter()
            .filter_map(|k| k.rsplit(':').next()?.parse().ok());
        ids.collect()
    }
}

/// Wait until `n` contenders are listed under `names` in all.
pub fn queued<R: Rig>(rig: &R, names: &[&str], n: usize) {
    wait_until(
        &format!("{n} contenders queue"),
        scale(Duration::from_secs(10)),
        || {
            names
                .iter()
                .map(|name| rig.entries(name).len())
                .sum::<usize>()
                == n
        },
    );
}

/// The end of a test: nothing is left under `names`, and once `clients`
/// close, no session or lease either.
pub fn nothing_left<R: Rig>(rig: &R, names: &[&str], clients: impl IntoIterator<Item = R::C>) {
    wait_until(
        "every entry is gone",
        scale(Duration::from_secs(10)),
        || names.iter().all(|name| rig.left(name).is_empty()),
    );
    for client in clients {
        client.close().expect("close");
    }
    wait_until("no lease is left", scale(Duration::from_secs(10)), || {
        rig.leases().is_empty()
    });
}
