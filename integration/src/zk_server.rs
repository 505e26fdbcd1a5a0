//! A ZooKeeper 3.8 server process: standalone, or one member of a
//! [`ZkCluster`](crate::ZkCluster).
//!
//! The JVM is started directly (Debian's `zkServer.sh` hard-sets its folders
//! and logs nothing) with slf4j-simple logging to stderr, which goes to
//! `server.log` in the server's own folder.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use crate::certs::ServerTls;
use crate::env::scale;
use crate::four_letter::{
    self, parse_mode, parse_watches_by_path, parse_watches_by_session, ZkMode,
};
use crate::ports::{reserve_port, PortReservation};
use crate::process::ManagedProcess;
use crate::server::{process_lifecycle, start_server, ServerProcess};
use crate::test_dir::TestDir;
use crate::zk_facts::ZkFacts;

/// Where Debian installs ZooKeeper's jars.
pub const ZK_JAR_DIR: &str = "/usr/share/java";

/// `zookeeper.jar`'s manifest names its own dependencies (jute, netty,
/// slf4j-api, …); the slf4j binding has to be added, and netty's codec,
/// which Debian's manifest lacks and the Netty server (the secure client
/// port) needs.
const CLASSPATH_JARS: [&str; 5] = [
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
    "netty-codec.jar",
];

/// Upper bound (scaled) for a server to start serving.
pub const ZK_START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one 4lw probe may take before the server counts as not
/// answering (used as a short, unscaled probe timeout).
pub const ZK_PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Settings of a test ZooKeeper server.
///
/// Defaults: `tickTime` 200 ms, sessions negotiated within 400 ms ..= 20 s,
/// so tests can ask for 1–10 s session timeouts and get them (ZooKeeper
/// would otherwise clamp to 2..=20 ticks).
#[derive(Debug, Clone)]
pub struct ZkConfig {
    tick_time: Duration,
    min_session_timeout: Duration,
    max_session_timeout: Duration,
    fsync: bool,
    sasl_users: Vec<(String, String)>,
    tls: Option<ServerTls>,
}

impl Default for ZkConfig {
    fn default() -> Self {
        ZkConfig {
            tick_time: Duration::from_millis(200),
            min_session_timeout: Duration::from_millis(400),
            max_session_timeout: Duration::from_secs(20),
            fsync: false,
            sasl_users: Vec::new(),
            tls: None,
        }
    }
}

impl ZkConfig {
    /// Sync the transaction log to disk (`forceSync=yes`), as benchmarks
    /// want; functional tests run without.
    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// Sets `tickTime` (at most 500 ms for functional tests; expiry is
    /// checked once per tick).
    pub fn with_tick_time(mut self, tick_time: Duration) -> Self {
        self.tick_time = tick_time;
        self
    }

    /// Sets `minSessionTimeout` and `maxSessionTimeout`: the server clamps
    /// every requested session timeout into this range.
    pub fn with_session_timeouts(mut self, min: Duration, max: Duration) -> Self {
        self.min_session_timeout = min;
        self.max_session_timeout = max;
        self
    }

    /// Require SASL: the server's JAAS `Server` section knows `user` with
    /// `password` (DIGEST-MD5), and a client that has not authenticated
    /// with SASL is refused (`enforce.auth.enabled`). Call once per user.
    pub fn with_sasl_user(mut self, user: &str, password: &str) -> Self {
        self.sasl_users.push((user.into(), password.into()));
        self
    }

    /// The JAAS file of the SASL users, `None` without any.
    fn jaas(&self) -> Option<String> {
        if self.sasl_users.is_empty() {
            return None;
        }
        let users: String = self
            .sasl_users
            .iter()
            .map(|(u, p)| format!("\n  user_{u}=\"{p}\""))
            .collect();
        Some(format!(
            "Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required{users};\n}};\n"
        ))
    }

    /// A secure client port beside the plain one (Netty, PEM key and
    /// trust stores), with `ssl.clientAuth=need` when `tls.client_auth`.
    /// The harness itself (4lw, facts) stays on the plain port.
    pub fn with_tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The secure port's TLS, if any.
    pub fn tls(&self) -> Option<&ServerTls> {
        self.tls.as_ref()
    }

    /// `tickTime`.
    pub fn tick_time(&self) -> Duration {
        self.tick_time
    }

    /// `minSessionTimeout`.
    pub fn min_session_timeout(&self) -> Duration {
        self.min_session_timeout
    }

    /// `maxSessionTimeout`.
    pub fn max_session_timeout(&self) -> Duration {
        self.max_session_timeout
    }

    /// The lines of `zoo.cfg` shared by standalone servers and members.
    fn common_lines(&self, data_dir: &Path, client_addr: SocketAddr) -> String {
        let mut cfg = String::new();
        let _ = writeln!(cfg, "tickTime={}", self.tick_time.as_millis());
        let _ = writeln!(cfg, "dataDir={}", data_dir.display());
        let _ = writeln!(cfg, "clientPort={}", client_addr.port());
        let _ = writeln!(cfg, "clientPortAddress={}", client_addr.ip());
        let _ = writeln!(
            cfg,
            "minSessionTimeout={}",
            self.min_session_timeout.as_millis()
        );
        let _ = writeln!(
            cfg,
            "maxSessionTimeout={}",
            self.max_session_timeout.as_millis()
        );
        // The default of 60 per client address breaks a 50-waiter test.
        cfg.push_str("maxClientCnxns=0\n");
        cfg.push_str(if self.fsync {
            "forceSync=yes\n"
        } else {
            "forceSync=no\n"
        });
        cfg.push_str("admin.enableServer=false\n");
        cfg.push_str("4lw.commands.whitelist=srvr,mntr,cons,wchc,wchp,stat,ruok,dump\n");
        cfg.push_str("autopurge.purgeInterval=0\n");
        if !self.sasl_users.is_empty() {
            cfg.push_str(
                "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n",
            );
            cfg.push_str("enforce.auth.enabled=true\nenforce.auth.schemes=sasl\n");
        }
        cfg
    }
}

/// How a member learns about its ensemble.
#[derive(Debug, Clone)]
pub(crate) struct Ensemble {
    /// 1-based id of this member (`myid`).
    pub(crate) my_id: usize,
    /// `server.N=…` lines for every member.
    pub(crate) server_lines: String,
}

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

    /// A standalone server shared by every test of this process, started on
    /// first use with [`ZkConfig::default`].
    ///
    /// Only for tests that do not break the server (no kill, pause,
    /// restart); give each test its own path. The server lives until the
    /// process exits: the parent-death signal kills it and a later run
    /// removes its folder.
    pub fn shared() -> &'static ZkServer {
        static SHARED: OnceLock<ZkServer> = OnceLock::new();
        SHARED.get_or_init(ZkServer::start)
    }

    /// Writes the folder and config; does not start the process.
    pub(crate) fn prepare(
        label: String,
        config: ZkConfig,
        client_port: PortReservation,
        mut other_ports: Vec<PortReservation>,
        ensemble: Option<Ensemble>,
    ) -> ZkServer {
        check_installed();
        let dir = TestDir::new(&label);
        let data_dir = dir.path().join("data");
        let client_addr = client_port.addr();
        let mut cfg = config.common_lines(&data_dir, client_addr);
        let mut secure_addr = None;
        if let Some(tls) = &config.tls {
            let secure = reserve_port();
            secure_addr = Some(secure.addr());
            cfg.push_str(&tls_lines(dir.path(), tls, secure.port()));
            other_ports.push(secure);
        }
        let main_class = match &ensemble {
            None => "org.apache.zookeeper.server.ZooKeeperServerMain",
            Some(ensemble) => {
                cfg.push_str("initLimit=10\nsyncLimit=5\n");
                cfg.push_str(&ensemble.server_lines);
                "org.apache.zookeeper.server.quorum.QuorumPeerMain"
            }
        };
        let cfg_path = dir.path().join("zoo.cfg");
        let written = std::fs::create_dir_all(&data_dir)
            .and_then(|()| std::fs::write(&cfg_path, cfg))
            .and_then(|()| match &ensemble {
                Some(ensemble) => {
                    std::fs::write(data_dir.join("myid"), format!("{}\n", ensemble.my_id))
                }
                None => Ok(()),
            });
        let jaas = config
            .jaas()
            .map(|text| (dir.path().join("jaas.conf"), text));
        let written = written.and_then(|()| match &jaas {
            Some((path, text)) => std::fs::write(path, text),
            None => Ok(()),
        });
        if let Err(e) = written {
            panic!(
                "cannot write ZooKeeper config in {}: {e}",
                dir.path().display()
            );
        }
        let classpath = CLASSPATH_JARS
            .iter()
            .map(|jar| format!("{ZK_JAR_DIR}/{jar}"))
            .collect::<Vec<_>>()
            .join(":");
        let mut args: Vec<String> = vec![
            // A small, fast-starting JVM: tests start many of them.
            "-Xmx256m".into(),
            "-XX:+UseSerialGC".into(),
            "-XX:TieredStopAtLevel=1".into(),
            "-XX:-UsePerfData".into(),
            "-Djava.net.preferIPv4Stack=true".into(),
            "-Dzookeeper.jmx.log4j.disable=true".into(),
            // Election connections to a dead or paused peer give up fast.
            "-Dzookeeper.cnxTimeout=1000".into(),
            "-Dorg.slf4j.simpleLogger.showDateTime=true".into(),
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS".into(),
            // One INFO line per 4lw command would bury the log under polls.
            "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NIOServerCnxn=warn".into(),
            "-cp".into(),
            classpath,
            main_class.into(),
            cfg_path.display().to_string(),
        ];
        if let Some((path, _)) = &jaas {
            // A JVM option: before the class path and the main class.
            let at = args.iter().position(|a| a == "-cp").unwrap_or(0);
            args.insert(
                at,
                format!("-Djava.security.auth.login.config={}", path.display()),
            );
        }
        other_ports.insert(0, client_port);
        let process = ManagedProcess::new(
            label.clone(),
            "java",
            args,
            dir.path(),
            dir.path().join("server.log"),
        );
        ZkServer {
            label,
            client_addr,
            secure_addr,
            config,
            ensemble: ensemble.is_some(),
            process,
            _ports: other_ports,
            dir,
        }
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
/// follower).
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
        self.mode()
            .is_some_and(|mode| !self.ensemble || mode.is_quorum_member())
    }
}

fn check_installed() {
    for jar in CLASSPATH_JARS {
        let path = Path::new(ZK_JAR_DIR).join(jar);
        assert!(
            path.exists(),
            "{} is missing: install Debian's zookeeper package (scripts/setup)",
            path.display()
        );
    }
}

/// The `zoo.cfg` lines of a secure client port on `port`: the key store
/// (key and certificate in one PEM file, written into `dir`) and the CA as
/// trust store.
fn tls_lines(dir: &Path, tls: &ServerTls, port: u16) -> String {
    let read = |p: &Path| {
        std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
    };
    let store = dir.join("keystore.pem");
    let pem = format!("{}{}", read(&tls.server.key), read(&tls.server.cert));
    std::fs::write(&store, pem).expect("write the key store");
    let auth = if tls.client_auth { "need" } else { "none" };
    format!(
        "secureClientPort={port}\n\
         serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
         ssl.keyStore.location={}\n\
         ssl.keyStore.type=PEM\n\
         ssl.trustStore.location={}\n\
         ssl.trustStore.type=PEM\n\
         ssl.clientAuth={auth}\n",
        store.display(),
        tls.ca.display()
    )
}
