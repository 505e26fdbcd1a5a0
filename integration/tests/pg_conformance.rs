//! The conformance suite against PostgreSQL, run three times: lease mode
//! directly over TLS with client certificates (`hostssl … cert`), lease
//! mode through pgbouncer in transaction mode without TLS (each statement
//! may run on another backend; `LISTEN` goes to the server directly, as
//! the crate docs say to deploy it), and session mode (advisory locks)
//! directly. Tests whose names contain `fault` get their
//! own server and run one at a time.

mod conformance;

use std::net::SocketAddr;
use std::time::Duration;

use conformance::{Kit, Server};
use integration::pg_server::PG_TLS_USER;
use integration::{PgBouncer, PgConfig, PgFacts, PgServer, PoolMode, TestPki};
use recipes_core::Client as _;
use recipes_pg::{PgClient, PgElection, PgMutex};

/// The server, and the pgbouncer in front of it when the kit goes
/// through one.
struct PgKit {
    // Field order is drop order: the pooler before its server.
    bouncer: Option<Server<PgBouncer>>,
    server: Server<PgServer>,
    facts: PgFacts,
    /// Whether the clients connect over TLS with a client certificate.
    tls: bool,
}

impl PgKit {
    fn on(server: Server<PgServer>, bouncer: Option<Server<PgBouncer>>) -> PgKit {
        PgKit {
            facts: PgFacts::new(server.addr()),
            tls: server.config().tls().is_some(),
            server,
            bouncer,
        }
    }

    /// Where statements go: the server, or the pooler.
    fn url(&self) -> String {
        match &self.bouncer {
            Some(b) => b.url(),
            None => self.server.client_url(),
        }
    }

    /// A client of `url`, over TLS with the client certificate when the
    /// kit is.
    fn client_of(&self, url: String) -> recipes_pg::PgClientBuilder {
        let tls = self.tls.then(|| TestPki::shared().client_tls());
        integration::certs::with_tls(
            PgClient::builder(url),
            tls,
            recipes_pg::PgClientBuilder::tls,
        )
    }

    fn builder(&self, url: String, ttl: Duration) -> recipes_pg::PgClientBuilder {
        self.client_of(url)
            .ttl(ttl)
            .listen_url(self.server.client_url())
    }

    fn client(&self, ttl: Duration) -> PgClient {
        self.builder(self.url(), ttl).connect().expect("connect")
    }

    fn via(&self, proxy: SocketAddr) -> String {
        let user = if self.tls { PG_TLS_USER } else { "postgres" };
        format!("postgresql://{user}@{proxy}/recipes")
    }
}

impl Kit for PgKit {
    type Mutex = PgMutex;

    fn shared() -> Self {
        PgKit::on(Server::Shared(PgServer::shared()), None)
    }

    fn own() -> Self {
        PgKit::on(Server::Own(Box::new(PgServer::start())), None)
    }

    fn mutex(&self, name: &str, ttl: Duration) -> recipes_pg::Mutex {
        self.client(ttl).mutex(name).unwrap()
    }

    type Client = PgClient;

    fn connect(&self, ttl: Duration) -> recipes_core::Result<PgClient> {
        self.builder(self.url(), ttl).connect()
    }

    fn connect_via(
        &self,
        proxy: SocketAddr,
        ttl: Duration,
        rpc_timeout: Duration,
    ) -> recipes_core::Result<PgClient> {
        let url = self.via(proxy);
        self.client_of(url.clone())
            .ttl(ttl)
            .rpc_timeout(rpc_timeout)
            .listen_url(url)
            .connect()
    }

    type Election = PgElection;

    fn election(&self, name: &str, ttl: Duration) -> recipes_pg::Election {
        self.client(ttl).election(name).unwrap()
    }

    fn entries_under(&self, name: &str) -> Vec<String> {
        self.facts.entries_under(name)
    }

    fn all_waiters_watch(&self, name: &str, waiters: usize) -> bool {
        // Every waiter's client (and the holder's, for its own row) has
        // listened on the name's channel, which each waiter does after its
        // first read of the queue.
        self.facts.entries_under(name).len() == waiters + 1
            && self.facts.listeners(name) == waiters + 1
    }

    fn write_entry(&self, path: &str, value: &[u8]) {
        self.facts.put(path, value)
    }

    fn delete_entry(&self, holder: &str) {
        self.facts.delete(holder)
    }

    fn mutex_via(&self, proxy: SocketAddr, name: &str, ttl: Duration) -> recipes_pg::Mutex {
        let url = self.via(proxy);
        let client = self
            .client_of(url.clone())
            .ttl(ttl)
            .listen_url(url)
            .connect()
            .expect("connect through the proxy");
        client.mutex(name).unwrap()
    }

    fn server_addr(&self) -> SocketAddr {
        match &self.bouncer {
            Some(b) => b.addr(),
            None => self.server.addr(),
        }
    }

    fn worker_connect(&self, ttl: Duration) -> String {
        let (url, listen) = (self.url(), self.server.client_url());
        let connect = format!("connect pg {url} {} {listen}", ttl.as_millis());
        match self.tls {
            true => format!("{connect} {}", TestPki::shared().worker_tls()),
            false => connect,
        }
    }

    fn exists(&self, holder: &str) -> bool {
        self.facts.exists(holder)
    }

    fn value(&self, resource: &str) -> Option<String> {
        self.facts.get(resource)
    }

    fn granted(&self, ttl: Duration) -> Duration {
        // As asked, to the millisecond.
        ttl
    }

    fn expiry_granularity(&self) -> Duration {
        // No server-side sweep: an expired row stops counting at once; a
        // waiter looks again when the row's remaining life is over.
        Duration::from_millis(100)
    }
}

/// The same server, statements through pgbouncer in transaction mode.
struct PgBouncerKit(PgKit);

impl std::ops::Deref for PgBouncerKit {
    type Target = PgKit;
    fn deref(&self) -> &PgKit {
        &self.0
    }
}

macro_rules! delegate {
    ($($f:ident($($a:ident: $t:ty),*) -> $r:ty;)*) => {
        $(fn $f(&self, $($a: $t),*) -> $r { self.0.$f($($a),*) })*
    };
}

/// Every `Kit` method but `shared` and `own`, to the inner `PgKit`.
macro_rules! delegate_to_pg_kit {
    () => {
        delegate! {
            mutex(name: &str, ttl: Duration) -> recipes_pg::Mutex;
            connect(ttl: Duration) -> recipes_core::Result<PgClient>;
            connect_via(proxy: SocketAddr, ttl: Duration, rpc: Duration) -> recipes_core::Result<PgClient>;
            election(name: &str, ttl: Duration) -> recipes_pg::Election;
            entries_under(name: &str) -> Vec<String>;
            all_waiters_watch(name: &str, waiters: usize) -> bool;
            write_entry(path: &str, value: &[u8]) -> ();
            delete_entry(holder: &str) -> ();
            mutex_via(proxy: SocketAddr, name: &str, ttl: Duration) -> recipes_pg::Mutex;
            server_addr() -> SocketAddr;
            worker_connect(ttl: Duration) -> String;
            exists(holder: &str) -> bool;
            value(resource: &str) -> Option<String>;
            granted(ttl: Duration) -> Duration;
            expiry_granularity() -> Duration;
        }
    };
}

impl Kit for PgBouncerKit {
    type Mutex = PgMutex;
    type Client = PgClient;
    type Election = PgElection;

    fn shared() -> Self {
        let server = Server::Shared(PgServer::shared());
        let bouncer = Server::Shared(PgBouncer::shared(PoolMode::Transaction));
        PgBouncerKit(PgKit::on(server, Some(bouncer)))
    }

    fn own() -> Self {
        let server = Box::new(PgServer::start());
        let bouncer = Box::new(PgBouncer::start(&server, PoolMode::Transaction));
        PgBouncerKit(PgKit::on(Server::Own(server), Some(Server::Own(bouncer))))
    }

    delegate_to_pg_kit!();
}

/// The server over TLS, every client with a client certificate.
struct PgTlsKit(PgKit);

impl PgTlsKit {
    fn config() -> PgConfig {
        PgConfig::default().with_tls(TestPki::shared().server_tls(true))
    }
}

impl Kit for PgTlsKit {
    type Mutex = PgMutex;
    type Client = PgClient;
    type Election = PgElection;

    fn shared() -> Self {
        let server = PgServer::shared_with(Self::config());
        PgTlsKit(PgKit::on(Server::Shared(server), None))
    }

    fn own() -> Self {
        let server = Box::new(PgServer::start_with(Self::config()));
        PgTlsKit(PgKit::on(Server::Own(server), None))
    }

    delegate_to_pg_kit!();
}

mod tls {
    use super::{conformance, PgTlsKit};
    use crate::conformance_suite;
    conformance_suite!(PgTlsKit);
    crate::process_suite!(PgTlsKit);
}

mod bouncer {
    use super::{conformance, PgBouncerKit};
    use crate::conformance_suite;
    conformance_suite!(PgBouncerKit);
}

/// Session mode: mutexes and semaphores are advisory locks on connections
/// of their own (elections stay rows), so the store's entries are
/// `pg_locks` rows as well as queue rows.
struct PgSessionKit(PgKit);

impl std::ops::Deref for PgSessionKit {
    type Target = PgKit;
    fn deref(&self) -> &PgKit {
        &self.0
    }
}

impl PgSessionKit {
    fn session(&self, url: String, ttl: Duration) -> recipes_pg::PgClientBuilder {
        PgClient::builder(url).ttl(ttl).session_mode()
    }
}

impl Kit for PgSessionKit {
    type Mutex = PgMutex;
    type Client = PgClient;
    type Election = PgElection;

    fn shared() -> Self {
        PgSessionKit(PgKit::shared())
    }

    fn own() -> Self {
        PgSessionKit(PgKit::own())
    }

    fn mutex(&self, name: &str, ttl: Duration) -> recipes_pg::Mutex {
        self.connect(ttl).expect("connect").mutex(name).unwrap()
    }

    fn connect(&self, ttl: Duration) -> recipes_core::Result<PgClient> {
        self.session(self.url(), ttl).connect()
    }

    fn connect_via(
        &self,
        proxy: SocketAddr,
        ttl: Duration,
        rpc_timeout: Duration,
    ) -> recipes_core::Result<PgClient> {
        let url = self.via(proxy);
        self.session(url.clone(), ttl)
            .rpc_timeout(rpc_timeout)
            .listen_url(url)
            .connect()
    }

    fn election(&self, name: &str, ttl: Duration) -> recipes_pg::Election {
        self.connect(ttl).expect("connect").election(name).unwrap()
    }

    /// Held and awaited advisory locks, then queue rows (an election's).
    fn entries_under(&self, name: &str) -> Vec<String> {
        let mut all = self.facts.advisory(name, true);
        all.extend(self.facts.advisory(name, false));
        all.extend(self.facts.entries_under(name));
        all
    }

    /// Every waiter waits in the lock manager's queue (between two
    /// slices a waiter is briefly out of it: asked again until true).
    fn all_waiters_watch(&self, name: &str, waiters: usize) -> bool {
        self.facts.advisory(name, false).len() == waiters
            && self.facts.advisory(name, true).len() == 1
    }

    fn write_entry(&self, path: &str, value: &[u8]) {
        self.facts.put(path, value)
    }

    /// An advisory lock is taken away by ending its backend.
    fn delete_entry(&self, holder: &str) {
        if holder.contains("/backend-") {
            self.facts.terminate(holder)
        } else {
            self.facts.delete(holder)
        }
    }

    fn mutex_via(&self, proxy: SocketAddr, name: &str, ttl: Duration) -> recipes_pg::Mutex {
        let url = self.via(proxy);
        let client = self
            .session(url.clone(), ttl)
            .listen_url(url)
            .connect()
            .expect("connect through the proxy");
        client.mutex(name).unwrap()
    }

    fn server_addr(&self) -> SocketAddr {
        self.server.addr()
    }

    fn worker_connect(&self, ttl: Duration) -> String {
        format!("connect pg-session {} {}", self.url(), ttl.as_millis())
    }

    fn exists(&self, holder: &str) -> bool {
        if holder.contains("/backend-") {
            self.facts.advisory_held(holder)
        } else {
            self.facts.exists(holder)
        }
    }

    fn value(&self, resource: &str) -> Option<String> {
        self.facts.get(resource)
    }

    /// As asked: a lock whose holder ended without releasing it (killed,
    /// terminated) is taken by the next holder only once the old one's
    /// last heartbeat + TTL has passed (its deadline); a paused holder's
    /// session is ended by the server `idle_session_timeout` (the TTL)
    /// after its last heartbeat.
    fn granted(&self, ttl: Duration) -> Duration {
        ttl
    }

    fn expiry_granularity(&self) -> Duration {
        Duration::from_millis(100)
    }
}

mod session {
    use super::{conformance, PgSessionKit};
    use crate::conformance_suite;
    conformance_suite!(PgSessionKit);
    crate::process_suite!(PgSessionKit);
}
