//! The conformance suite against ZooKeeper. Tests whose names contain
//! `fault` get their own server and run one at a time.

mod conformance;

use std::net::SocketAddr;
use std::time::Duration;

use conformance::Kit;
use integration::{ZkFacts, ZkServer};
use recipes_zk::{ZkClient, ZkMutex};

enum Server {
    Shared(&'static ZkServer),
    Own(Box<ZkServer>),
}

struct ZkKit {
    server: Server,
    facts: ZkFacts,
}

impl ZkKit {
    fn shared() -> ZkKit {
        let server = ZkServer::shared();
        ZkKit {
            facts: server.facts(),
            server: Server::Shared(server),
        }
    }

    fn own() -> ZkKit {
        let server = ZkServer::start();
        ZkKit {
            facts: server.facts(),
            server: Server::Own(Box::new(server)),
        }
    }

    fn server(&self) -> &ZkServer {
        match &self.server {
            Server::Shared(s) => s,
            Server::Own(s) => s,
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

    fn mutex(&self, name: &str, ttl: Duration) -> recipes_zk::InterProcessMutex {
        self.client(self.server().connect_string(), ttl)
            .mutex(name)
            .unwrap()
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
        self.server().client_addr()
    }

    fn worker_connect(&self, ttl: Duration) -> String {
        format!(
            "connect zk {} {}",
            self.server().connect_string(),
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
        let c = self.server().config();
        ttl.clamp(c.min_session_timeout(), c.max_session_timeout())
    }

    fn expiry_granularity(&self) -> Duration {
        self.server().config().tick_time()
    }
}

#[test]
fn mutual_exclusion_four_workers() {
    conformance::mutual_exclusion(&ZkKit::shared(), 4, 25);
}

#[test]
fn fault_killed_holder_frees_the_lock_within_the_session_timeout() {
    conformance::killed_holder_frees_the_lock_within_the_lease(
        &ZkKit::own(),
        Duration::from_secs(2),
    );
}

#[test]
fn fault_paused_holder_is_fenced_out() {
    conformance::paused_holder_is_fenced_out(&ZkKit::own(), Duration::from_secs(2));
}

#[test]
fn fault_blackholed_holder_loses_before_another_acquires() {
    conformance::blackholed_holder_loses_before_another_acquires(
        &ZkKit::own(),
        Duration::from_secs(2),
    );
}

#[test]
fn fault_latch_leader_killed_fails_over() {
    use conformance::{LeaderRecipe, Takeout};
    conformance::leader_failover(
        &ZkKit::own(),
        LeaderRecipe::Latch,
        Takeout::Kill,
        Duration::from_secs(2),
    );
}

#[test]
fn fault_latch_leader_paused_is_fenced_out() {
    use conformance::{LeaderRecipe, Takeout};
    conformance::leader_failover(
        &ZkKit::own(),
        LeaderRecipe::Latch,
        Takeout::Pause,
        Duration::from_secs(2),
    );
}

#[test]
fn fault_selector_leader_killed_fails_over() {
    use conformance::{LeaderRecipe, Takeout};
    conformance::leader_failover(
        &ZkKit::own(),
        LeaderRecipe::Selector,
        Takeout::Kill,
        Duration::from_secs(2),
    );
}

#[test]
fn fault_selector_leader_paused_is_fenced_out() {
    use conformance::{LeaderRecipe, Takeout};
    conformance::leader_failover(
        &ZkKit::own(),
        LeaderRecipe::Selector,
        Takeout::Pause,
        Duration::from_secs(2),
    );
}
