//! The TLS suites' view of each backend: a server with or without TLS, a
//! client connected with the given TLS settings, and what is left in the
//! store.

#![allow(dead_code)]

use std::time::Duration;

use integration::certs::with_tls;
use integration::pg_server::PG_TLS_USER;
use integration::{
    EtcdConfig, EtcdServer, PgConfig, PgServer, RedisConfig, RedisServer, ServerTls, ZkConfig,
    ZkServer,
};
use recipes_core::{Client as _, Tls};

/// One backend, for the TLS suites.
pub trait Backend {
    /// The backend's name, in messages.
    const NAME: &'static str;
    /// Its test server.
    type Server: Send + Sync + 'static;
    /// A server, over TLS when `tls`.
    fn start(tls: Option<ServerTls>) -> Self::Server;
    /// The address of `server`, as a client without TLS names it.
    fn plain_url(server: &Self::Server) -> String;
    /// Connect to `server` with `tls` (none: plain), then close.
    fn connect(
        server: &Self::Server,
        tls: Option<Tls>,
        timeout: Duration,
    ) -> recipes_core::Result<()>;
    /// What the store holds (keys, rows, nodes of the recipes).
    fn leftovers(server: &Self::Server) -> Vec<String>;
}

/// etcd.
pub struct EtcdBackend;

impl Backend for EtcdBackend {
    const NAME: &'static str = "etcd";
    type Server = EtcdServer;

    fn start(tls: Option<ServerTls>) -> EtcdServer {
        EtcdServer::start_with(with_tls(EtcdConfig::default(), tls, EtcdConfig::with_tls))
    }

    fn plain_url(server: &EtcdServer) -> String {
        server.client_addr().to_string()
    }

    fn connect(
        server: &EtcdServer,
        tls: Option<Tls>,
        timeout: Duration,
    ) -> recipes_core::Result<()> {
        let builder = recipes_etcd::EtcdClient::builder([Self::plain_url(server)]);
        let builder = match tls {
            Some(tls) => builder.tls(tls),
            None => builder,
        };
        builder.connect_timeout(timeout).connect()?.close()
    }

    fn leftovers(server: &EtcdServer) -> Vec<String> {
        let facts = server.facts();
        let mut left = facts.keys_with_prefix("");
        left.extend(facts.leases().into_iter().map(|l| format!("lease {l:x}")));
        left
    }
}

/// Redis.
pub struct RedisBackend;

impl Backend for RedisBackend {
    const NAME: &'static str = "Redis";
    type Server = RedisServer;

    fn start(tls: Option<ServerTls>) -> RedisServer {
        RedisServer::start_with(RedisConfig {
            tls,
            ..RedisConfig::default()
        })
    }

    fn plain_url(server: &RedisServer) -> String {
        server.addr().to_string()
    }

    fn connect(
        server: &RedisServer,
        tls: Option<Tls>,
        timeout: Duration,
    ) -> recipes_core::Result<()> {
        let builder = recipes_redis::RedisClient::builder(Self::plain_url(server));
        with_tls(builder, tls, recipes_redis::RedisClientBuilder::tls)
            .connect_timeout(timeout)
            .connect()?
            .close()
    }

    fn leftovers(server: &RedisServer) -> Vec<String> {
        server.keys("*")
    }
}

/// PostgreSQL.
pub struct PgBackend;

impl Backend for PgBackend {
    const NAME: &'static str = "PostgreSQL";
    type Server = PgServer;

    fn start(tls: Option<ServerTls>) -> PgServer {
        PgServer::start_with(with_tls(PgConfig::default(), tls, PgConfig::with_tls))
    }

    fn plain_url(server: &PgServer) -> String {
        server.url_as(PG_TLS_USER)
    }

    fn connect(server: &PgServer, tls: Option<Tls>, timeout: Duration) -> recipes_core::Result<()> {
        let builder = recipes_pg::PgClient::builder(Self::plain_url(server));
        with_tls(builder, tls, recipes_pg::PgClientBuilder::tls)
            .connect_timeout(timeout)
            .connect()?
            .close()
    }

    /// The sessions and queue entries (the schema may not exist yet).
    fn leftovers(server: &PgServer) -> Vec<String> {
        if server
            .sql("SELECT to_regclass('recipes.sessions') IS NULL")
            .trim()
            == "t"
        {
            return Vec::new();
        }
        let rows = server.sql("SELECT id FROM recipes.sessions");
        rows.split_whitespace()
            .map(|id| format!("session {id}"))
            .collect()
    }
}

/// ZooKeeper.
pub struct ZkBackend;

impl Backend for ZkBackend {
    const NAME: &'static str = "ZooKeeper";
    type Server = ZkServer;

    fn start(tls: Option<ServerTls>) -> ZkServer {
        ZkServer::start_with(with_tls(ZkConfig::default(), tls, ZkConfig::with_tls))
    }

    /// The secure port with TLS, where a plain client must be refused.
    fn plain_url(server: &ZkServer) -> String {
        match server.config().tls() {
            Some(_) => server.secure_addr().to_string(),
            None => server.client_addr().to_string(),
        }
    }

    fn connect(server: &ZkServer, tls: Option<Tls>, timeout: Duration) -> recipes_core::Result<()> {
        let builder = recipes_zk::ZkClient::builder(Self::plain_url(server));
        with_tls(builder, tls, recipes_zk::ZkClientBuilder::tls)
            .connect_timeout(timeout)
            .connect()?
            .close()
    }

    /// Every node but ZooKeeper's own, and every session.
    fn leftovers(server: &ZkServer) -> Vec<String> {
        let facts = server.facts();
        let mut left: Vec<String> = facts.children("/");
        left.retain(|c| c != "zookeeper");
        left
    }
}
