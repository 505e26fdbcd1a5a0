//! The stores as the bad-input suite sees them: how to connect with
//! given settings, and what a case may have left behind (nodes, keys,
//! leases).

use std::net::SocketAddr;
use std::time::Duration;

use integration::{EtcdFacts, EtcdServer, PgFacts, PgServer, RedisServer, ZkFacts, ZkServer};
use recipes_core::Client;
use recipes_etcd::EtcdClient;
use recipes_pg::PgClient;
use recipes_redis::RedisClient;
use recipes_zk::ZkClient;

/// A client's settings, as the builders of both stores take them.
#[derive(Debug, Clone)]
pub struct Settings {
    pub ttl: Duration,
    pub connect_timeout: Duration,
    pub rpc_timeout: Duration,
    pub lease_slack: Option<Duration>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            ttl: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            rpc_timeout: Duration::from_secs(3),
            lease_slack: None,
        }
    }
}

/// What a case needs from a store.
pub trait Store: 'static {
    /// The client of this store.
    type C: Client;

    /// `zk` or `etcd`, as `Client::store` says it.
    const LABEL: &'static str;

    /// How large a value (node data, key value) the server accepts at
    /// most in one request, roughly: past it, the request is refused.
    const REQUEST_LIMIT: usize;

    /// The shared server's address as the builder takes it.
    fn target() -> String;

    /// The shared server's client address.
    fn addr() -> SocketAddr;

    /// The target the builder takes for a server at `address` (a
    /// `host:port`, reachable or not).
    fn target_at(address: &str) -> String {
        address.to_owned()
    }

    /// The other store's shared server (started on first use).
    fn other_addr() -> SocketAddr;

    /// A client of `target` with `settings`.
    fn connect_to(target: &str, settings: &Settings) -> recipes_core::Result<Self::C>;

    /// A client of the shared server with `settings`.
    fn connect(settings: &Settings) -> recipes_core::Result<Self::C> {
        Self::connect_to(&Self::target(), settings)
    }

    /// What lives at and under `root` that the server will not remove by
    /// itself: ZooKeeper's ephemeral nodes and nodes with data, every etcd
    /// key.
    fn leftovers(root: &str) -> Vec<String>;

    /// The leases the server holds (etcd); sessions are not listed for
    /// ZooKeeper (empty).
    fn leases() -> Vec<i64>;

    /// Whether a holder's node or key exists.
    fn exists(holder: &str) -> bool;

    /// Write a plain entry, as another program would.
    fn write_entry(path: &str, value: &[u8]);

    /// Delete a holder's entry behind its back.
    fn delete_entry(holder: &str);
}

/// `builder` with the settings every store's builder has (core's
/// `settings_setters!`); the lease is set by the caller.
macro_rules! with_settings {
    ($builder:expr, $s:expr) => {{
        let mut b = $builder
            .connect_timeout($s.connect_timeout)
            .rpc_timeout($s.rpc_timeout);
        if let Some(slack) = $s.lease_slack {
            b = b.lease_slack(slack);
        }
        b
    }};
}

fn zk_facts() -> &'static ZkFacts {
    static FACTS: std::sync::OnceLock<ZkFacts> = std::sync::OnceLock::new();
    FACTS.get_or_init(|| ZkServer::shared().facts())
}

fn etcd_facts() -> &'static EtcdFacts {
    static FACTS: std::sync::OnceLock<EtcdFacts> = std::sync::OnceLock::new();
    FACTS.get_or_init(|| EtcdServer::shared().facts())
}

/// ZooKeeper.
pub struct Zk;

impl Store for Zk {
    type C = ZkClient;
    const LABEL: &'static str = "zk";
    // jute.maxbuffer: 1 MiB (0xfffff) by default.
    const REQUEST_LIMIT: usize = 1024 * 1024;

    fn target() -> String {
        ZkServer::shared().connect_string()
    }

    fn addr() -> SocketAddr {
        ZkServer::shared().client_addr()
    }

    fn other_addr() -> SocketAddr {
        EtcdServer::shared().client_addr()
    }

    fn connect_to(target: &str, s: &Settings) -> recipes_core::Result<ZkClient> {
        with_settings!(ZkClient::builder(target).session_timeout(s.ttl), s).connect()
    }

    fn leftovers(root: &str) -> Vec<String> {
        // Ephemeral nodes and nodes with data. The server shows clients no
        // difference between a container (which it removes once empty) and
        // an empty persistent node, so neither is listed.
        zk_facts()
            .tree(root)
            .into_iter()
            .filter(|(_, owner, len)| *owner != 0 || *len > 0)
            .map(|(path, owner, len)| format!("{path} (owner {owner:#x}, {len} bytes)"))
            .collect()
    }

    fn leases() -> Vec<i64> {
        Vec::new()
    }

    fn exists(holder: &str) -> bool {
        zk_facts().exists(holder)
    }

    fn write_entry(path: &str, value: &[u8]) {
        zk_facts().create(path, value)
    }

    fn delete_entry(holder: &str) {
        zk_facts().delete(holder)
    }
}

/// etcd.
pub struct Etcd;

impl Store for Etcd {
    type C = EtcdClient;
    const LABEL: &'static str = "etcd";
    // --max-request-bytes: 1.5 MiB by default.
    const REQUEST_LIMIT: usize = 1536 * 1024;

    fn target() -> String {
        EtcdServer::shared().endpoint()
    }

    fn addr() -> SocketAddr {
        EtcdServer::shared().client_addr()
    }

    fn other_addr() -> SocketAddr {
        ZkServer::shared().client_addr()
    }

    fn connect_to(target: &str, s: &Settings) -> recipes_core::Result<EtcdClient> {
        with_settings!(
            EtcdClient::builder(target.split(',').map(str::to_owned)).ttl(s.ttl),
            s
        )
        .connect()
    }

    fn leftovers(root: &str) -> Vec<String> {
        etcd_facts().keys_with_prefix(root)
    }

    fn leases() -> Vec<i64> {
        etcd_facts().leases()
    }

    fn exists(holder: &str) -> bool {
        etcd_facts().exists(holder)
    }

    fn write_entry(path: &str, value: &[u8]) {
        etcd_facts().put(path, value)
    }

    fn delete_entry(holder: &str) {
        etcd_facts().delete(holder)
    }
}

fn pg_facts() -> &'static PgFacts {
    static FACTS: std::sync::OnceLock<PgFacts> = std::sync::OnceLock::new();
    FACTS.get_or_init(|| PgFacts::new(PgServer::shared().addr()))
}

/// PostgreSQL, lease mode.
pub struct Pg;

impl Store for Pg {
    type C = PgClient;
    const LABEL: &'static str = "pg";
    // Not the server's limit (a field holds up to 1 GB) but the one every
    // store shares, MAX_VALUE_BYTES, rounded up.
    const REQUEST_LIMIT: usize = 1024 * 1024;

    fn target() -> String {
        PgServer::shared().url()
    }

    fn addr() -> SocketAddr {
        PgServer::shared().addr()
    }

    fn target_at(address: &str) -> String {
        format!("postgres://postgres@{address}/recipes")
    }

    fn other_addr() -> SocketAddr {
        EtcdServer::shared().client_addr()
    }

    fn connect_to(target: &str, s: &Settings) -> recipes_core::Result<PgClient> {
        with_settings!(PgClient::builder(target).ttl(s.ttl), s).connect()
    }

    /// Live entries of the recipes at or under `root`, and the keys fenced
    /// writes left there. A name's row (its queue counter and fence) is
    /// kept for good, as the fences' order needs: not a leftover.
    fn leftovers(root: &str) -> Vec<String> {
        let like = format!("'{}%'", root.replace('\'', "''"));
        let sql = format!(
            "SELECT q.name || '/' || q.entry || ' (entry)' FROM recipes.queue q \
             JOIN recipes.sessions s ON s.id = q.session \
             WHERE s.expires_at > clock_timestamp() AND q.name LIKE {like} \
             UNION ALL SELECT key || ' (key)' FROM recipes.kv WHERE key LIKE {like}"
        );
        pg_facts().sql(&sql).lines().map(str::to_owned).collect()
    }

    /// The live session rows.
    fn leases() -> Vec<i64> {
        let sql = "SELECT id FROM recipes.sessions WHERE expires_at > clock_timestamp()";
        let rows = pg_facts().sql(sql);
        rows.lines().filter_map(|id| id.parse().ok()).collect()
    }

    fn exists(holder: &str) -> bool {
        pg_facts().exists(holder)
    }

    fn write_entry(path: &str, value: &[u8]) {
        pg_facts().put(path, value)
    }

    fn delete_entry(holder: &str) {
        pg_facts().delete(holder)
    }
}

/// A single Redis node.
pub struct Redis;

/// Our keys on the shared Redis server.
fn redis_keys(pattern: &str) -> Vec<String> {
    RedisServer::shared().keys(pattern)
}

impl Store for Redis {
    type C = RedisClient;
    const LABEL: &'static str = "redis";
    // Core's MAX_VALUE_BYTES refuses first (Redis takes up to 512 MB).
    const REQUEST_LIMIT: usize = 1024 * 1024;

    fn target() -> String {
        RedisServer::shared().url()
    }

    fn addr() -> SocketAddr {
        RedisServer::shared().addr()
    }

    fn other_addr() -> SocketAddr {
        EtcdServer::shared().client_addr()
    }

    fn connect_to(target: &str, s: &Settings) -> recipes_core::Result<RedisClient> {
        let mut b = RedisClient::builder(target)
            .ttl(s.ttl)
            .connect_timeout(s.connect_timeout)
            .rpc_timeout(s.rpc_timeout);
        if let Some(slack) = s.lease_slack {
            b = b.lease_slack(slack);
        }
        b.connect()
    }

    /// Keys at and under `root` (plain writes), and every key of ours that
    /// names it, fence counters aside (kept for ever, so that fences never
    /// repeat), shown by the name first (`<name> ({recipes}:size:)`), so
    /// that what a case may leave under a name is matched as on the other
    /// stores.
    fn leftovers(root: &str) -> Vec<String> {
        let mut keys = redis_keys(&format!("{root}*"));
        keys.extend(
            redis_keys(&format!("{{recipes}}:*{root}*"))
                .into_iter()
                .filter(|k| !k.starts_with("{recipes}:fence:"))
                .map(|k| match k.find(root) {
                    Some(at) => format!("{} ({})", &k[at..], &k[..at]),
                    None => k,
                }),
        );
        keys
    }

    /// The session ids whose keys exist.
    fn leases() -> Vec<i64> {
        redis_keys("{recipes}:s:*")
            .iter()
            .filter_map(|k| k.rsplit(':').next()?.parse().ok())
            .collect()
    }

    /// Queued, and its session alive or holding.
    fn exists(holder: &str) -> bool {
        let (queue, member) = holder.rsplit_once('/').unwrap_or((holder, ""));
        let server = RedisServer::shared();
        let queued: Option<f64> =
            server.cmd(&["ZSCORE", &format!("{{recipes}}:q:{queue}"), member]);
        let session = member.split('-').next().unwrap_or_default();
        let alive: bool = server.cmd(&["EXISTS", &format!("{{recipes}}:s:{session}")]);
        queued.is_some() && alive
    }

    fn write_entry(path: &str, value: &[u8]) {
        let _: () = RedisServer::shared().cmd(&["SET", path, &String::from_utf8_lossy(value)]);
    }

    fn delete_entry(holder: &str) {
        redis_delete(holder)
    }
}

/// Delete a Redis holder behind its back, as an administrator would.
pub fn redis_delete(holder: &str) {
    let (queue, member) = holder.rsplit_once('/').unwrap_or((holder, ""));
    let server = RedisServer::shared();
    let _: i64 = server.cmd(&["ZREM", &format!("{{recipes}}:q:{queue}"), member]);
    for key in [
        format!("{{recipes}}:lock:{queue}"),
        format!("{{recipes}}:permit:{queue}:{member}"),
    ] {
        if server.cmd::<Option<String>>(&["GET", &key]).as_deref() == Some(member) {
            let _: i64 = server.cmd(&["DEL", &key]);
        }
    }
}
