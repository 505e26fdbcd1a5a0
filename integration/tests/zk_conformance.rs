//! The conformance suite against ZooKeeper over the secure client port
//! with client certificates (`ssl.clientAuth=need`): the recipes above the
//! transport are the same on the plain port, which the other ZooKeeper
//! tests use. Tests whose names contain `fault` get their own server
//! and run one at a time.

mod conformance;

use recipes_core::Client as _;
use std::net::SocketAddr;
use std::time::Duration;

use conformance::{Kit, Server};
use integration::{TestPki, ZkConfig, ZkFacts, ZkServer};
use recipes_zk::{ZkClient, ZkClientBuilder, ZkElection, ZkMutex};

/// A kit on the plain client port, or on the secure one with a client
/// certificate when `TLS`.
struct ZkKit<const TLS: bool = false> {
    server: Server<ZkServer>,
    facts: ZkFacts,
}

impl<const TLS: bool> ZkKit<TLS> {
    fn on(server: Server<ZkServer>) -> ZkKit<TLS> {
        ZkKit {
            facts: server.facts(),
            server,
        }
    }

    fn config() -> ZkConfig {
        let tls = TLS.then(|| TestPki::shared().server_tls(true));
        integration::certs::with_tls(ZkConfig::default(), tls, ZkConfig::with_tls)
    }

    /// A client of `hosts`, over TLS with the client certificate when `TLS`.
    fn builder(hosts: String) -> ZkClientBuilder {
        let tls = TLS.then(|| TestPki::shared().client_tls());
        integration::certs::with_tls(ZkClient::builder(hosts), tls, ZkClientBuilder::tls)
    }

    /// The port the clients use: the secure one with TLS.
    fn hosts(&self) -> String {
        self.server_addr().to_string()
    }

    fn client(&self, hosts: String, ttl: Duration) -> ZkClient {
        Self::builder(hosts)
            .session_timeout(ttl)
            .connect()
            .expect("connect")
    }
}

impl<const TLS: bool> Kit for ZkKit<TLS> {
    type Mutex = ZkMutex;

    fn shared() -> Self {
        ZkKit::on(Server::Shared(match TLS {
            true => ZkServer::shared_with(Self::config()),
            false => ZkServer::shared(),
        }))
    }

    fn own() -> Self {
        ZkKit::on(Server::Own(Box::new(ZkServer::start_with(Self::config()))))
    }

    fn mutex(&self, name: &str, ttl: Duration) -> recipes_zk::InterProcessMutex {
        self.client(self.hosts(), ttl).mutex(name).unwrap()
    }

    type Client = ZkClient;

    fn connect(&self, ttl: Duration) -> recipes_core::Result<ZkClient> {
        Self::builder(self.hosts()).ttl(ttl).connect()
    }

    fn connect_via(
        &self,
        proxy: SocketAddr,
        ttl: Duration,
        rpc_timeout: Duration,
    ) -> recipes_core::Result<ZkClient> {
        Self::builder(proxy.to_string())
            .ttl(ttl)
            .rpc_timeout(rpc_timeout)
            .connect()
    }

    type Election = ZkElection;

    fn election(&self, name: &str, ttl: Duration) -> recipes_zk::Election {
        self.client(self.hosts(), ttl).election(name).unwrap()
    }

    fn entries_under(&self, name: &str) -> Vec<String> {
        let children = self.facts.children(name);
        children
            .into_iter()
            .map(|c| format!("{name}/{c}"))
            .collect()
    }

    fn all_waiters_watch(&self, name: &str, waiters: usize) -> bool {
        // A waiter's watch: one on a lock node by a session that does not
        // own it (a holder watches its own node too).
        let watching: usize = self
            .server
            .watches_by_path()
            .into_iter()
            .filter(|(path, _)| path.starts_with(&format!("{name}/")))
            .map(|(path, sessions)| {
                let owner = self.facts.ephemeral_owner(&path);
                sessions.iter().filter(|s| Some(**s) != owner).count()
            })
            .sum();
        watching == waiters
    }

    fn write_entry(&self, path: &str, value: &[u8]) {
        self.facts.create(path, value)
    }

    fn delete_entry(&self, holder: &str) {
        self.facts.delete(holder)
    }

    fn mutex_via(
        &self,
        proxy: SocketAddr,
        name: &str,
        ttl: Duration,
    ) -> recipes_zk::InterProcessMutex {
        self.client(proxy.to_string(), ttl).mutex(name).unwrap()
    }

    fn server_addr(&self) -> SocketAddr {
        match TLS {
            true => self.server.secure_addr(),
            false => self.server.client_addr(),
        }
    }

    fn worker_connect(&self, ttl: Duration) -> String {
        let connect = format!("connect zk {} {}", self.hosts(), ttl.as_millis());
        match TLS {
            true => format!("{connect} {}", TestPki::shared().worker_tls()),
            false => connect,
        }
    }

    fn exists(&self, holder: &str) -> bool {
        self.facts.exists(holder)
    }

    fn value(&self, resource: &str) -> Option<String> {
        self.facts
            .data(resource)
            .map(|d| String::from_utf8_lossy(&d).into_owned())
    }

    fn granted(&self, ttl: Duration) -> Duration {
        let c = self.server.config();
        ttl.clamp(c.min_session_timeout(), c.max_session_timeout())
    }

    fn expiry_granularity(&self) -> Duration {
        // The server checks sessions once per tick.
        self.server.config().tick_time()
    }
}

/// The whole suite over the secure client port, with client certificates.
mod tls {
    use super::{conformance, ZkKit};
    crate::conformance_suite!(ZkKit<true>);
    crate::process_suite!(ZkKit<true>);
}
