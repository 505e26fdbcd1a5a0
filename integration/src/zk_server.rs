//! A ZooKeeper 3.8 server process: standalone, or one member of a
//! [`ZkCluster`](crate::ZkCluster).
//!
//! The JVM is started directly (Debian's `zkServer.sh` hard-sets its folders
//! and logs nothing) with slf4j-simple logging to stderr, which goes to
//! `server.log` in the server's own folder.

mod config;
mod launch;

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::env::scale;
use crate::four_letter::{
    self, parse_mode, parse_watches_by_path, parse_watches_by_session, ZkMode,
};
use crate::ports::{reserve_port, PortReservation};
use crate::process::ManagedProcess;
use crate::run_shared::{self, Record, RunShared, SharedSlots};
use crate::server::{process_lifecycle, start_server, ServerProcess};
use crate::test_dir::TestDir;
use crate::zk_facts::ZkFacts;

pub(crate) use config::Ensemble;
pub use config::ZkConfig;
pub use launch::ZK_JAR_DIR;

/// Upper bound (scaled) for a server to start serving.
pub const ZK_START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one 4lw probe may take before the server counts as not
/// answering (used as a short, unscaled probe timeout).
pub const ZK_PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// One ZooKeeper server process with its own folder and loopback port.
///
/// Dropping it kills (SIGKILL) and reaps the JVM and removes its folder
/// (kept when the thread panics).
#[derive(Debug)]
pub struct ZkServer {
    label: String,
    client_addr: SocketAddr,
    /// The secure client port's address, with TLS.
    secure_addr: Option<SocketAddr>,
    config: ZkConfig,
    ensemble: bool,
    // Field order is drop order: process first, folder last.
    process: ManagedProcess,
    _ports: Vec<PortReservation>,
    dir: TestDir,
}

impl ZkServer {
    /// Starts a standalone server with [`ZkConfig::default`] and waits until
    /// it serves.
    ///
    /// # Panics
    ///
    /// When the server does not serve within the (scaled) start timeout; the
    /// message quotes its log.
    pub fn start() -> ZkServer {
        ZkServer::start_with(ZkConfig::default())
    }

    /// Starts a standalone server with `config` and waits until it serves.
    ///
    /// # Panics
    ///
    /// When the server does not serve within the (scaled) start timeout; the
    /// message quotes its log.
    pub fn start_with(config: ZkConfig) -> ZkServer {
        start_server("zk", || {
            let client_port = reserve_port();
            ZkServer::prepare(
                "zk".to_owned(),
                config.clone(),
                client_port,
                Vec::new(),
                None,
            )
        })
    }

    /// A standalone server shared by every test of this test binary,
    /// started on first use with [`ZkConfig::default`].
    ///
    /// Only for tests that do not break the server (no kill, pause,
    /// restart); give each test its own path. Under `cargo test` the server
    /// lives until the process exits (the parent-death signal kills it);
    /// under nextest the test processes of the binary share it until the
    /// run ends (see `run_shared.rs`).
    pub fn shared() -> &'static ZkServer {
        ZkServer::shared_with(ZkConfig::default())
    }

    /// Like [`shared`](Self::shared), with `config`: one server per
    /// distinct `config`.
    pub fn shared_with(config: ZkConfig) -> &'static ZkServer {
        static SHARED: SharedSlots<ZkServer> = SharedSlots::new();
        run_shared::shared(&SHARED, config)
    }

    /// The name used in messages and folder names (`zk`, `zk-1`, …).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The settings it was started with.
    pub fn config(&self) -> &ZkConfig {
        &self.config
    }

    /// Its client address, `127.0.0.1:<port>`.
    pub fn client_addr(&self) -> SocketAddr {
        self.client_addr
    }

    /// Its secure client port's address, with TLS.
    ///
    /// # Panics
    ///
    /// When it was started without TLS.
    pub fn secure_addr(&self) -> SocketAddr {
        self.secure_addr
            .expect("a ZooKeeper server started with TLS")
    }

    /// The connect string of this one server (`127.0.0.1:<port>`).
    pub fn connect_string(&self) -> String {
        self.client_addr.to_string()
    }

    /// Its folder (config, data, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    process_lifecycle!("JVM");

    /// Kills the JVM if it runs, starts it again on the same port with the
    /// same data, and waits until it serves (a member: until it rejoined
    /// the quorum).
    ///
    /// # Panics
    ///
    /// When it does not serve within the (scaled) start timeout.
    pub fn restart(&self) {
        self.respawn();
    }

    /// Sends a four-letter command and returns the answer.
    ///
    /// # Panics
    ///
    /// When the server does not answer within 5 s (scaled); the message
    /// quotes the log.
    pub fn four_letter(&self, command: &str) -> String {
        self.try_four_letter(command, scale(Duration::from_secs(5)))
            .unwrap_or_else(|e| {
                panic!(
                    "4lw {command} to ZooKeeper {} failed: {e}\n{}",
                    self.label,
                    self.log_tail()
                )
            })
    }

    /// Sends a four-letter command; `timeout` is used as given.
    ///
    /// # Errors
    ///
    /// Connection errors and `TimedOut` (e.g. when the server is paused).
    pub fn try_four_letter(&self, command: &str, timeout: Duration) -> io::Result<String> {
        four_letter::four_letter(self.client_addr, command, timeout)
    }

    /// The `Mode:` from `srvr`, or `None` when the server does not answer
    /// within [`ZK_PROBE_TIMEOUT`] or is not serving.
    pub fn mode(&self) -> Option<ZkMode> {
        self.try_four_letter("srvr", ZK_PROBE_TIMEOUT)
            .ok()
            .as_deref()
            .and_then(parse_mode)
    }

    /// Whether it answers `srvr` with a `Mode:` within [`ZK_PROBE_TIMEOUT`].
    pub fn is_serving(&self) -> bool {
        self.mode().is_some()
    }

    /// Waits until it serves.
    ///
    /// # Panics
    ///
    /// After `upper_bound` (scaled); the message quotes the log.
    pub fn wait_serving(&self, upper_bound: Duration) {
        self.expect_started("", upper_bound);
    }

    /// `wchp`: watched path → ids of the sessions (connected to *this*
    /// server) watching it.
    pub fn watches_by_path(&self) -> BTreeMap<String, Vec<i64>> {
        parse_watches_by_path(&self.four_letter("wchp"))
    }

    /// `wchc`: session id → paths it watches, for sessions connected to
    /// *this* server.
    pub fn watches_by_session(&self) -> BTreeMap<i64, Vec<String>> {
        parse_watches_by_session(&self.four_letter("wchc"))
    }

    /// A new fact client (its own session) connected to this server.
    pub fn facts(&self) -> ZkFacts {
        ZkFacts::connect(&self.connect_string(), self.logs())
    }
}

/// Started means serving: `srvr` reports a `Mode:` (a member: leader or
/// follower), and with TLS the secure client port accepts connections too
/// (ZooKeeper binds it after the plain port answers: 0.4 s later on a
/// loaded machine, where a client connecting at once was refused).
impl ServerProcess for ZkServer {
    const KIND: &'static str = "ZooKeeper";
    const READY: &'static str = "serving";
    const SPAWN_HINT: &'static str = " (is Java installed?)";
    const PORT_IN_USE: &'static str = "Address already in use";
    const START_TIMEOUT: Duration = ZK_START_TIMEOUT;

    fn process(&self) -> &ManagedProcess {
        &self.process
    }

    fn addr(&self) -> SocketAddr {
        self.client_addr
    }

    fn is_ready(&self) -> bool {
        let secure_accepts = || {
            self.secure_addr.is_none_or(|addr| {
                std::net::TcpStream::connect_timeout(&addr, ZK_PROBE_TIMEOUT).is_ok()
            })
        };
        self.mode()
            .is_some_and(|mode| !self.ensemble || mode.is_quorum_member())
            && secure_accepts()
    }
}

impl RunShared for ZkServer {
    type Config = ZkConfig;
    const KIND: &'static str = "zk";

    fn start_shared(config: ZkConfig) -> ZkServer {
        ZkServer::start_with(config)
    }

    fn record(&self) -> Record {
        Record::of(
            &self.process,
            self.dir(),
            [Some(self.client_addr), self.secure_addr]
                .into_iter()
                .flatten()
                .collect(),
        )
    }

    fn adopt(config: ZkConfig, record: Record) -> ZkServer {
        ZkServer {
            client_addr: record.addrs[0],
            secure_addr: record.addrs.get(1).copied(),
            config,
            ensemble: false,
            process: record.process(),
            _ports: Vec::new(),
            dir: TestDir::adopted(record.dir),
            label: record.label,
        }
    }
}
