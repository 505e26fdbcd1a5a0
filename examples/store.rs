//! Connect to the store the environment names, for the examples that run
//! the same code on every store: `RECIPES_REDIS`, `RECIPES_PG`,
//! `RECIPES_ETCD` or `RECIPES_ZK` (ZooKeeper at 127.0.0.1:2181 when none
//! is set).

/// Run `$body` with `$client` bound to a client of the chosen store (a
/// session TTL of `$ttl`); the body's `Result` is the macro's.
macro_rules! on_store {
    ($ttl:expr, $client:ident => $body:expr) => {{
        let ttl: std::time::Duration = $ttl;
        let var = |v: &str| std::env::var(v).ok();
        if let Some(url) = var("RECIPES_REDIS") {
            println!("store: Redis at {url}");
            let $client = recipes_redis::RedisClient::builder(url.as_str())
                .ttl(ttl)
                .connect()?;
            $body
        } else if let Some(url) = var("RECIPES_PG") {
            println!("store: PostgreSQL");
            let $client = recipes_pg::PgClient::builder(url.as_str())
                .ttl(ttl)
                .connect()?;
            $body
        } else if let Some(endpoint) = var("RECIPES_ETCD") {
            println!("store: etcd at {endpoint}");
            let $client = recipes_etcd::EtcdClient::builder([endpoint.as_str()])
                .ttl(ttl)
                .connect()?;
            $body
        } else {
            let hosts = var("RECIPES_ZK").unwrap_or_else(|| "127.0.0.1:2181".into());
            println!("store: ZooKeeper at {hosts}");
            let $client = recipes_zk::ZkClient::builder(hosts.as_str())
                .ttl(ttl)
                .connect()?;
            $body
        }
    }};
}
pub(crate) use on_store;
