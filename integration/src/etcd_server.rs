//! An etcd 3.4 server process: a one-member cluster, or one member of an
//! [`EtcdCluster`](crate::EtcdCluster).

mod config;
mod launch;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::etcd_facts::EtcdFacts;
use crate::http::{http_request, json_field};
use crate::ports::{reserve_port, PortReservation};
use crate::process::ManagedProcess;
use crate::run_shared::{self, Record, RunShared, SharedSlots};
use crate::server::{process_lifecycle, start_server, ServerProcess};
use crate::test_dir::TestDir;

pub(crate) use config::{unique_token, Membership};
pub use config::{EtcdConfig, ETCD_BINARY, VENDORED_VERSIONS};

/// Upper bound (scaled) for a server to become healthy.
pub const ETCD_START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one `/health` or status probe may take before the server counts
/// as not answering (a short, unscaled probe timeout).
pub const ETCD_PROBE_TIMEOUT: Duration = Duration::from_millis(500);

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

    /// A one-member cluster shared by every test of this test binary,
    /// started on first use with [`EtcdConfig::default`].
    ///
    /// Only for tests that do not break the server (no kill, pause,
    /// restart); give each test its own key prefix. Under `cargo test` the
    /// server lives until the process exits (the parent-death signal kills
    /// it); under nextest the test processes of the binary share it until
    /// the run ends (see `run_shared.rs`).
    pub fn shared() -> &'static EtcdServer {
        EtcdServer::shared_with(EtcdConfig::default())
    }

    /// Like [`shared`](Self::shared), for the etcd `version` (one of
    /// [`VENDORED_VERSIONS`]); see [`EtcdConfig::with_version`].
    ///
    /// # Panics
    ///
    /// When `version` is not one of [`VENDORED_VERSIONS`].
    pub fn shared_version(version: &str) -> &'static EtcdServer {
        assert!(
            VENDORED_VERSIONS.contains(&version),
            "etcd {version} is not one of {VENDORED_VERSIONS:?}"
        );
        EtcdServer::shared_with(EtcdConfig::default().with_version(version))
    }

    /// Like [`shared`](Self::shared), with `config`: one server per
    /// distinct `config`.
    pub fn shared_with(config: EtcdConfig) -> &'static EtcdServer {
        static SHARED: SharedSlots<EtcdServer> = SharedSlots::new();
        run_shared::shared(&SHARED, config)
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

impl RunShared for EtcdServer {
    type Config = EtcdConfig;
    const KIND: &'static str = "etcd";

    fn start_shared(config: EtcdConfig) -> EtcdServer {
        EtcdServer::start_with(config)
    }

    fn record(&self) -> Record {
        Record::of(
            &self.process,
            self.dir(),
            vec![self.client_addr, self.peer_addr, self.health_addr],
        )
    }

    fn adopt(config: EtcdConfig, record: Record) -> EtcdServer {
        EtcdServer {
            client_addr: record.addrs[0],
            peer_addr: record.addrs[1],
            health_addr: record.addrs[2],
            config,
            process: record.process(),
            _ports: Vec::new(),
            dir: TestDir::adopted(record.dir),
            name: record.label,
        }
    }
}
