//! The conformance suite against ZooKeeper. Tests whose names contain
//! `fault` get their own server and run one at a time.

mod conformance;

use recipes_core::Client as _;
use std::net::SocketAddr;
use std::time::Duration;

use conformance::{Kit, Server};
use integration::{ZkFacts, ZkServer};
use recipes_zk::{ZkClient, ZkElection, ZkMutex};

struct ZkKit {
    server: Server<ZkServer>,
    facts: ZkFacts,
}

impl ZkKit {
    fn on(server: Server<ZkServer>) -> ZkKit {
        ZkKit {
            facts: server.facts(),
            server,
        }
    }

    fn client(&self, hosts: String, ttl: Duration) -> ZkClient {
        ZkClient::builder(hosts)
            .session_timeout(ttl)
            .connect()
            .expect("connect")
    }
}

impl Kit for ZkKit {
    type Mutex = ZkMutex;

    fn shared() -> Self {
        ZkKit::on(Server::Shared(ZkServer::shared()))
    }

    fn own() -> Self {
        ZkKit::on(Server::Own(Box::new(ZkServer::start())))
    }

    fn mutex(&self, name: &str, ttl: Duration) -> recipes_zk::InterProcessMutex {
        self.client(self.server.connect_string(), ttl)
            .mutex(name)
            .unwrap()
    }

    type Client = ZkClient;

    fn connect(&self, ttl: Duration) -> recipes_core::Result<ZkClient> {
        ZkClient::builder(self.server.connect_string())
            .ttl(ttl)
            .connect()
    }

    fn connect_via(
        &self,
        proxy: SocketAddr,
        ttl: Duration,
        rpc_timeout: Duration,
    ) -> recipes_core::Result<ZkClient> {
        ZkClient::builder(proxy.to_string())
            .ttl(ttl)
            .rpc_timeout(rpc_timeout)
            .connect()
    }

    type Election = ZkElection;

    fn election(&self, name: &str, ttl: Duration) -> recipes_zk::Election {
        self.client(self.server.connect_string(), ttl)
            .election(name)
            .unwrap()
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
        self.server.client_addr()
    }

    fn worker_connect(&self, ttl: Duration) -> String {
        format!(
            "connect zk {} {}",
            self.server.connect_string(),
            ttl.as_millis()
        )
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

conformance_suite!(ZkKit);
