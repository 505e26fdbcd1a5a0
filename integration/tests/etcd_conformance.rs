//! The conformance suite against etcd: Debian's 3.4 at the top level, and
//! the etcd-bin-vendored 3.5, 3.6 and 3.7 servers in the modules
//! `etcd_3_5`, `etcd_3_6`, `etcd_3_7_tls` (the version matrix) — 3.7 over
//! mutual TLS (`--client-cert-auth` with the tests' own CA), so one run
//! covers both. Tests whose names contain `fault` get their own server
//! and run one at a time.

mod conformance;

use recipes_core::Client as _;
use std::net::SocketAddr;
use std::time::Duration;

use conformance::{Kit, Server};
use integration::etcd_server::VENDORED_VERSIONS;
use integration::{EtcdConfig, EtcdFacts, EtcdServer, TestPki};
use recipes_etcd::{EtcdClient, EtcdClientBuilder, EtcdElection, EtcdMutex};

/// A kit on Debian's etcd (`V` = 0) or on `VENDORED_VERSIONS[V - 1]`;
/// over mutual TLS when `TLS`.
struct EtcdKit<const V: usize = 0, const TLS: bool = false> {
    server: Server<EtcdServer>,
    facts: EtcdFacts,
}

impl<const V: usize, const TLS: bool> EtcdKit<V, TLS> {
    fn version() -> Option<&'static str> {
        V.checked_sub(1).map(|i| VENDORED_VERSIONS[i])
    }

    fn config() -> EtcdConfig {
        let config = match Self::version() {
            None => EtcdConfig::default(),
            Some(v) => EtcdConfig::default().with_version(v),
        };
        match TLS {
            true => config.with_tls(TestPki::shared().server_tls(true)),
            false => config,
        }
    }

    /// A client of `endpoints` (`host:port`), over mutual TLS when `TLS`.
    fn builder(endpoints: Vec<String>) -> EtcdClientBuilder {
        let builder = EtcdClient::builder(endpoints);
        match TLS {
            true => builder.tls(TestPki::shared().client_tls()),
            false => builder,
        }
    }

    /// The server's address, as the clients name it.
    fn addrs(&self) -> Vec<String> {
        vec![self.server.client_addr().to_string()]
    }

    fn on(server: Server<EtcdServer>) -> EtcdKit<V, TLS> {
        EtcdKit {
            facts: server.facts(),
            server,
        }
    }

    fn watchers(&self) -> u64 {
        self.server.metric("etcd_debugging_mvcc_watcher_total") as u64
    }

    fn client(&self, endpoints: Vec<String>, ttl: Duration) -> EtcdClient {
        Self::builder(endpoints)
            .ttl(ttl)
            .connect()
            .expect("connect")
    }
}

impl<const V: usize, const TLS: bool> Kit for EtcdKit<V, TLS> {
    type Mutex = EtcdMutex;

    fn shared() -> Self {
        let server = match (TLS, Self::version()) {
            (true, _) => EtcdServer::shared_with(Self::config()),
            (false, None) => EtcdServer::shared(),
            (false, Some(v)) => EtcdServer::shared_version(v),
        };
        EtcdKit::on(Server::Shared(server))
    }

    fn own() -> Self {
        EtcdKit::on(Server::Own(Box::new(
            EtcdServer::start_with(Self::config()),
        )))
    }

    fn mutex(&self, name: &str, ttl: Duration) -> recipes_etcd::Mutex {
        self.client(self.addrs(), ttl).mutex(name).unwrap()
    }

    type Client = EtcdClient;

    fn connect(&self, ttl: Duration) -> recipes_core::Result<EtcdClient> {
        Self::builder(self.addrs()).ttl(ttl).connect()
    }

    fn connect_via(
        &self,
        proxy: SocketAddr,
        ttl: Duration,
        rpc_timeout: Duration,
    ) -> recipes_core::Result<EtcdClient> {
        Self::builder(vec![proxy.to_string()])
            .ttl(ttl)
            .rpc_timeout(rpc_timeout)
            .connect()
    }

    type Election = EtcdElection;

    fn election(&self, name: &str, ttl: Duration) -> recipes_etcd::Election {
        self.client(self.addrs(), ttl).election(name).unwrap()
    }

    fn entries_under(&self, name: &str) -> Vec<String> {
        self.facts.keys_with_prefix(&format!("{name}/"))
    }

    fn all_waiters_watch(&self, name: &str, waiters: usize) -> bool {
        // On a server of its own: each client (the holder's, each
        // waiter's) watches the name once, whatever waits on it.
        let queued = self.facts.keys_with_prefix(&format!("{name}/")).len() == waiters + 1;
        queued && self.watchers() > waiters as u64
    }

    fn write_entry(&self, path: &str, value: &[u8]) {
        self.facts.put(path, value)
    }

    fn delete_entry(&self, holder: &str) {
        self.facts.delete(holder)
    }

    fn mutex_via(&self, proxy: SocketAddr, name: &str, ttl: Duration) -> recipes_etcd::Mutex {
        self.client(vec![proxy.to_string()], ttl)
            .mutex(name)
            .unwrap()
    }

    fn server_addr(&self) -> SocketAddr {
        self.server.client_addr()
    }

    fn worker_connect(&self, ttl: Duration) -> String {
        let connect = format!("connect etcd {} {}", self.addrs()[0], ttl.as_millis());
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
            .get(resource)
            .map(|d| String::from_utf8_lossy(&d).into_owned())
    }

    fn granted(&self, ttl: Duration) -> Duration {
        // Whole seconds, and never below the server's minimum.
        let secs = Duration::from_secs(ttl.as_millis().div_ceil(1000) as u64);
        secs.max(self.server.config().min_lease_ttl())
    }

    fn expiry_granularity(&self) -> Duration {
        // etcd's lessor looks for expired leases every 500 ms.
        Duration::from_millis(500)
    }
}

conformance_suite!(EtcdKit);
process_suite!(EtcdKit);

mod etcd_3_5 {
    use super::{conformance, EtcdKit};
    crate::conformance_suite!(EtcdKit<1>);
}

mod etcd_3_6 {
    use super::{conformance, EtcdKit};
    crate::conformance_suite!(EtcdKit<2>);
}

/// The newest server, and the whole suite over mutual TLS.
mod etcd_3_7_tls {
    use super::{conformance, EtcdKit};
    crate::conformance_suite!(EtcdKit<3, true>);
}
