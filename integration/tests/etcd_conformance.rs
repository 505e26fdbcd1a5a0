//! The conformance suite against etcd. Tests whose names contain `fault`
//! get their own server and run one at a time.

mod conformance;

use std::net::SocketAddr;
use std::time::Duration;

use conformance::Kit;
use integration::{EtcdFacts, EtcdServer};
use recipes_etcd::{EtcdClient, EtcdMutex};

enum Server {
    Shared(&'static EtcdServer),
    Own(Box<EtcdServer>),
}

struct EtcdKit {
    server: Server,
    facts: EtcdFacts,
}

impl EtcdKit {
    fn shared() -> EtcdKit {
        let server = EtcdServer::shared();
        EtcdKit {
            facts: server.facts(),
            server: Server::Shared(server),
        }
    }

    fn own() -> EtcdKit {
        let server = EtcdServer::start();
        EtcdKit {
            facts: server.facts(),
            server: Server::Own(Box::new(server)),
        }
    }

    fn server(&self) -> &EtcdServer {
        match &self.server {
            Server::Shared(s) => s,
            Server::Own(s) => s,
        }
    }

    fn client(&self, endpoints: Vec<String>, ttl: Duration) -> EtcdClient {
        EtcdClient::builder(endpoints)
            .ttl(ttl)
            .connect()
            .expect("connect")
    }
}

impl Kit for EtcdKit {
    type Mutex = EtcdMutex;

    fn mutex(&self, name: &str, ttl: Duration) -> recipes_etcd::Mutex {
        self.client(self.server().endpoints(), ttl)
            .mutex(name)
            .unwrap()
    }

    fn mutex_via(&self, proxy: SocketAddr, name: &str, ttl: Duration) -> recipes_etcd::Mutex {
        self.client(vec![format!("http://{proxy}")], ttl)
            .mutex(name)
            .unwrap()
    }

    fn server_addr(&self) -> SocketAddr {
        self.server().client_addr()
    }

    fn worker_connect(&self, ttl: Duration) -> String {
        format!(
            "connect etcd {} {}",
            self.server().endpoints().join(","),
            ttl.as_millis()
        )
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
        secs.max(self.server().config().min_lease_ttl())
    }

    fn expiry_granularity(&self) -> Duration {
        // etcd's lessor looks for expired leases every 500 ms.
        Duration::from_millis(500)
    }
}

#[test]
fn mutual_exclusion_four_workers() {
    conformance::mutual_exclusion(&EtcdKit::shared(), 4, 25);
}

#[test]
fn fault_killed_holder_frees_the_lock_within_the_ttl() {
    conformance::killed_holder_frees_the_lock_within_the_lease(
        &EtcdKit::own(),
        Duration::from_secs(2),
    );
}

#[test]
fn fault_paused_holder_is_fenced_out() {
    conformance::paused_holder_is_fenced_out(&EtcdKit::own(), Duration::from_secs(2));
}

#[test]
fn fault_blackholed_holder_loses_before_another_acquires() {
    conformance::blackholed_holder_loses_before_another_acquires(
        &EtcdKit::own(),
        Duration::from_secs(2),
    );
}
