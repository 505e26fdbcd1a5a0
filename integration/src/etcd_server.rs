//! An etcd 3.4 server process: a one-member cluster, or one member of an
//! [`EtcdCluster`](crate::EtcdCluster).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crate::certs::ServerTls;
use crate::etcd_facts::EtcdFacts;
use crate::http::{http_request, json_field};
use crate::ports::{reserve_port, PortReservation};
use crate::process::ManagedProcess;
use crate::server::{process_lifecycle, start_server, ServerProcess};
use crate::test_dir::TestDir;

/// The etcd binary (Debian's package).
pub const ETCD_BINARY: &str = "/usr/bin/etcd";

/// The etcd versions beside Debian's 3.4 that the version matrix runs
/// (`scripts/setup` fetches them).
pub const VENDORED_VERSIONS: [&str; 3] = ["3.5.34", "3.6.15", "3.7.2"];

/// Upper bound (scaled) for a server to become healthy.
pub const ETCD_START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one `/health` or status probe may take before the server counts
/// as not answering (a short, unscaled probe timeout).
pub const ETCD_PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Settings of a test etcd server.
///
/// Defaults: heartbeat 50 ms, election timeout 500 ms — a killed leader is
/// replaced in about a second, and the minimum lease TTL is 1 s (etcd
/// silently raises a lower TTL to ceil(1.5 × election timeout)).
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    heartbeat_interval: Duration,
    election_timeout: Duration,
    fsync: bool,
    binary: PathBuf,
    tls: Option<ServerTls>,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            heartbeat_interval: Duration::from_millis(50),
            election_timeout: Duration::from_millis(500),
            fsync: false,
            binary: PathBuf::from(ETCD_BINARY),
            tls: None,
        }
    }
}

impl EtcdConfig {
    /// Run the etcd server `version` (`3.5.34`, one of
    /// [`VENDORED_VERSIONS`]) from the etcd-bin-vendored binaries that
    /// `scripts/setup` puts in `target/etcd-bins`, instead of Debian's.
    ///
    /// # Panics
    ///
    /// When that binary is missing (run `scripts/setup`).
    pub fn with_version(mut self, version: &str) -> Self {
        let dir = std::env::var_os("RECIPES_ETCD_BINS").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/etcd-bins"),
            PathBuf::from,
        );
        let binary = dir.join(version).join("etcd");
        assert!(
            binary.exists(),
            "etcd {version} is missing at {}: run scripts/setup (x86_64 only)",
            binary.display()
        );
        self.binary = binary;
        self
    }

    /// Sync writes to disk (no `--unsafe-no-fsync`), as benchmarks want;
    /// functional tests run without.
    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// Sets `--heartbeat-interval` and `--election-timeout` (etcd wants the
    /// election timeout ≥ 5 × the heartbeat).
    pub fn with_election(
        mut self,
        heartbeat_interval: Duration,
        election_timeout: Duration,
    ) -> Self {
        self.heartbeat_interval = heartbeat_interval;
        self.election_timeout = election_timeout;
        self
    }

    /// Serve clients over TLS (an `https://` client URL, its certificate
    /// and key), with `--client-cert-auth` when `tls.client_auth`. The
    /// harness itself (health, facts, status) reads through a second,
    /// plain client URL on another port, so that it works whatever is
    /// wrong with the certificate under test.
    pub fn with_tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// `--heartbeat-interval`.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat_interval
    }

    /// `--election-timeout`.
    pub fn election_timeout(&self) -> Duration {
        self.election_timeout
    }

    /// The smallest lease TTL the server grants: ceil(1.5 × election
    /// timeout) in whole seconds. Smaller requests are silently raised.
    pub fn min_lease_ttl(&self) -> Duration {
        let millis = self.election_timeout.as_millis() * 3 / 2;
        Duration::from_secs(millis.div_ceil(1000) as u64)
    }
}

/// What `/v3/maintenance/status` says about a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcdStatus {
    /// The answering member's id.
    pub member_id: u64,
    /// The id of the leader it follows; 0 when it knows none.
    pub leader: u64,
    /// Its raft term.
    pub raft_term: u64,
    /// The store revision it has applied.
    pub revision: i64,
}

/// How a member learns about its cluster.
#[derive(Debug, Clone)]
pub(crate) struct Membership {
    /// `name=http://127.0.0.1:<peer port>,…` for every member.
    pub(crate) initial_cluster: String,
    /// A token unique to this cluster, so members of different test clusters
    /// never join each other.
    pub(crate) token: String,
}

/// One etcd process with its own folder and loopback ports.
///
/// Dropping it kills (SIGKILL) and reaps the process and removes its folder
/// (kept when the thread panics).
#[derive(Debug)]
pub struct EtcdServer {
    name: String,
    client_addr: SocketAddr,
    peer_addr: SocketAddr,
    /// Where the harness reads (health, facts): the client address, or
    /// with TLS a plain client URL of its own.
    health_addr: SocketAddr,
    config: EtcdConfig,
    // Field order is drop order: process first, folder last.
    process: ManagedProcess,
    _ports: Vec<PortReservation>,
    dir: TestDir,
}

impl EtcdServer {
    /// Starts a one-member cluster with [`EtcdConfig::default`] and waits
    /// until it is healthy.
    ///
    /// # Panics
    ///
    /// When it is not healthy within the (scaled) start timeout; the message
    /// quotes its log.
    pub fn start() -> EtcdServer {
        EtcdServer::start_with(EtcdConfig::default())
    }

    /// Starts a one-member cluster with `config`; see
    /// [`start`](Self::start).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(config: EtcdConfig) -> EtcdServer {
        start_server("etcd", || {
            let (client, peer) = (reserve_port(), reserve_port());
            let membership = Membership {
                initial_cluster: format!("etcd=http://{}", peer.addr()),
                token: unique_token("etcd"),
            };
            EtcdServer::prepare("etcd".to_owned(), config.clone(), client, peer, &membership)
        })
    }

    /// A one-member cluster shared by every test of this process, started
    /// on first use with [`EtcdConfig::default`].
    ///
    /// Only for tests that do not break the server (no kill, pause,
    /// restart); give each test its own key prefix. The server lives until
    /// the process exits: the parent-death signal kills it and a later run
    /// removes its folder.
    pub fn shared() -> &'static EtcdServer {
        static SHARED: OnceLock<EtcdServer> = OnceLock::new();
        SHARED.get_or_init(EtcdServer::start)
    }

    /// Like [`shared`](Self::shared), for the etcd `version` (one of
    /// [`VENDORED_VERSIONS`]); see [`EtcdConfig::with_version`].
    pub fn shared_version(version: &str) -> &'static EtcdServer {
        static SHARED: [OnceLock<EtcdServer>; 3] =
            [OnceLock::new(), OnceLock::new(), OnceLock::new()];
        let i = VENDORED_VERSIONS
            .iter()
            .position(|v| *v == version)
            .unwrap_or_else(|| panic!("etcd {version} is not one of {VENDORED_VERSIONS:?}"));
        SHARED[i]
            .get_or_init(|| EtcdServer::start_with(EtcdConfig::default().with_version(version)))
    }

    /// Writes the folder; does not start the process.
    pub(crate) fn prepare(
        name: String,
        config: EtcdConfig,
        client_port: PortReservation,
        peer_port: PortReservation,
        membership: &Membership,
    ) -> EtcdServer {
        assert!(
            config.binary.exists(),
            "{} is missing: install Debian's etcd-server package (scripts/setup)",
            config.binary.display()
        );
        let dir = TestDir::new(&name);
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let client_url = format!("{scheme}://{}", client_port.addr());
        let peer_url = format!("http://{}", peer_port.addr());
        let mut ports = vec![client_port, peer_port];
        let mut args: Vec<String> = vec![
            format!("--name={name}"),
            format!("--data-dir={}", dir.path().join("data").display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster={}", membership.initial_cluster),
            format!("--initial-cluster-token={}", membership.token),
            // Ignored on restart: the data folder then exists.
            "--initial-cluster-state=new".to_owned(),
            format!("--unsafe-no-fsync={}", !config.fsync),
            format!(
                "--heartbeat-interval={}",
                config.heartbeat_interval.as_millis()
            ),
            format!("--election-timeout={}", config.election_timeout.as_millis()),
            "--logger=zap".to_owned(),
            "--log-outputs=stderr".to_owned(),
        ];
        let mut health_addr = ports[0].addr();
        if let Some(tls) = &config.tls {
            let plain = reserve_port();
            health_addr = plain.addr();
            args[2] = format!("--listen-client-urls={client_url},http://{health_addr}");
            args.extend([
                format!("--cert-file={}", tls.server.cert.display()),
                format!("--key-file={}", tls.server.key.display()),
                format!("--trusted-ca-file={}", tls.ca.display()),
                format!("--client-cert-auth={}", tls.client_auth),
            ]);
            ports.push(plain);
        }
        let process = ManagedProcess::new(
            name.clone(),
            config.binary.clone(),
            args,
            dir.path(),
            dir.path().join("server.log"),
        );
        EtcdServer {
            name,
            client_addr: ports[0].addr(),
            peer_addr: ports[1].addr(),
            health_addr,
            config,
            process,
            _ports: ports,
            dir,
        }
    }

    /// The member name (`etcd`, `etcd-1`, …), also used in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The settings it was started with.
    pub fn config(&self) -> &EtcdConfig {
        &self.config
    }

    /// Its client address, `127.0.0.1:<port>`.
    pub fn client_addr(&self) -> SocketAddr {
        self.client_addr
    }

    /// The value of the metric `name` on the server's `/metrics` page.
    ///
    /// # Panics
    ///
    /// When the page cannot be read or has no such metric.
    pub fn metric(&self, name: &str) -> f64 {
        let body = self.metrics_text();
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
    }

    /// The text of `/metrics`.
    fn metrics_text(&self) -> String {
        let (status, body) = crate::http::http_request(
            self.health_addr,
            "GET",
            "/metrics",
            "",
            std::time::Duration::from_secs(5),
        )
        .expect("read /metrics");
        assert_eq!(status, 200, "{body}");
        body
    }

    /// The sum of every series of the metric `name` (all its label sets),
    /// 0 when it has none yet.
    ///
    /// # Panics
    ///
    /// When `/metrics` cannot be read.
    pub fn metric_sum(&self, name: &str) -> f64 {
        let body = self.metrics_text();
        body.lines()
            .filter_map(|l| {
                let rest = l.strip_prefix(name)?;
                let value = match rest.strip_prefix('{') {
                    Some(labels) => labels.split_once("} ")?.1,
                    None => rest.strip_prefix(' ')?,
                };
                value.trim().parse::<f64>().ok()
            })
            .sum()
    }

    /// Its peer (raft) address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }

    /// Its client URL, `http://127.0.0.1:<port>` (`https://` with TLS).
    pub fn endpoint(&self) -> String {
        let scheme = if self.config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.client_addr)
    }

    /// Its client URL as a one-element list, for `etcd_client::Client::connect`.
    pub fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint()]
    }

    /// Turn authentication on through `etcdctl`: the user `root`
    /// (password `rootpw`) and the user `app` with `app_password`, whose
    /// role may read and write the keys under `/app/` only.
    ///
    /// # Panics
    ///
    /// When an `etcdctl` step fails.
    pub fn enable_app_auth(&self, app_password: &str) {
        let endpoint = self.endpoint();
        let etcdctl = |args: &[&str]| {
            let out = std::process::Command::new("etcdctl")
                .args(["--endpoints", &endpoint, "--dial-timeout", "5s"])
                .args(args)
                .output()
                .expect("etcdctl runs");
            assert!(out.status.success(), "etcdctl {args:?}: {out:?}");
        };
        etcdctl(&["user", "add", "root:rootpw"]);
        etcdctl(&["user", "add", &format!("app:{app_password}")]);
        etcdctl(&["role", "add", "app"]);
        let grant = [
            "role",
            "grant-permission",
            "app",
            "--prefix=true",
            "readwrite",
            "/app/",
        ];
        etcdctl(&grant);
        etcdctl(&["user", "grant-role", "app", "app"]);
        etcdctl(&["auth", "enable"]);
    }

    /// Its folder (data, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    process_lifecycle!("process");

    /// Kills the process if it runs, starts it again on the same ports with
    /// the same data, and waits until it is healthy (a member: until it
    /// follows a leader again).
    ///
    /// # Panics
    ///
    /// When it is not healthy within the (scaled) start timeout.
    pub fn restart(&self) {
        self.respawn();
    }

    /// Whether `/health` answers `"health":"true"` within
    /// [`ETCD_PROBE_TIMEOUT`] (it needs a leader and a served read).
    pub fn is_healthy(&self) -> bool {
        match http_request(self.health_addr, "GET", "/health", "", ETCD_PROBE_TIMEOUT) {
            Ok((200, body)) => json_field(&body, "health") == Some("true"),
            _ => false,
        }
    }

    /// Waits until it is healthy.
    ///
    /// # Panics
    ///
    /// After `upper_bound` (scaled); the message quotes the log.
    pub fn wait_healthy(&self, upper_bound: Duration) {
        self.expect_started("", upper_bound);
    }

    /// The member's status, or `None` when it does not answer within
    /// [`ETCD_PROBE_TIMEOUT`].
    pub fn status(&self) -> Option<EtcdStatus> {
        let (code, body) = http_request(
            self.health_addr,
            "POST",
            "/v3/maintenance/status",
            "{}",
            ETCD_PROBE_TIMEOUT,
        )
        .ok()?;
        if code != 200 {
            return None;
        }
        let number = |key: &str| json_field(&body, key).and_then(|v| v.parse::<u64>().ok());
        Some(EtcdStatus {
            member_id: number("member_id")?,
            leader: number("leader").unwrap_or(0),
            raft_term: number("raftTerm").unwrap_or(0),
            revision: json_field(&body, "revision")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        })
    }

    /// A new fact client connected to this member only.
    pub fn facts(&self) -> EtcdFacts {
        let plain = vec![format!("http://{}", self.health_addr)];
        EtcdFacts::connect(&plain, self.logs())
    }
}

/// Started means healthy: `/health` says true.
impl ServerProcess for EtcdServer {
    const KIND: &'static str = "etcd";
    const READY: &'static str = "healthy";
    const SPAWN_HINT: &'static str = "";
    const PORT_IN_USE: &'static str = "address already in use";
    const START_TIMEOUT: Duration = ETCD_START_TIMEOUT;

    fn process(&self) -> &ManagedProcess {
        &self.process
    }

    fn addr(&self) -> SocketAddr {
        self.client_addr
    }

    fn is_ready(&self) -> bool {
        self.is_healthy()
    }
}

/// A cluster token no other test cluster uses.
pub(crate) fn unique_token(label: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "{label}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}
