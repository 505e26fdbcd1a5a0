//! A Redis 7 server process (Debian's `redis-server`) on a loopback port
//! in its own folder, with persistence, a password or `--replicaof` as
//! asked, and facts read through a plain connection of the `redis` crate.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::certs::ServerTls;
use crate::clock_shim::clock_rate_env;
use crate::ports::{reserve_port, PortReservation};
use crate::process::ManagedProcess;
use crate::run_shared::{self, Record, RunShared, SharedSlots};
use crate::server::{process_lifecycle, start_server, ServerProcess};
use crate::test_dir::TestDir;

/// The server binary (Debian's package).
pub const REDIS_BINARY: &str = "/usr/bin/redis-server";

/// Upper bound (scaled) for a server to answer `PING`.
pub const REDIS_START_TIMEOUT: Duration = Duration::from_secs(20);

/// How long one probe or fact query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings of a test Redis server. Default: no persistence at all
/// (`--save "" --appendonly no`), no password.
#[derive(Debug, Clone, Default)]
pub struct RedisConfig {
    /// `Some(fsync)`: `--appendonly yes --appendfsync <fsync>` (`always`,
    /// `everysec`).
    pub aof: Option<&'static str>,
    /// `--requirepass`.
    pub password: Option<String>,
    /// `--replicaof 127.0.0.1 <port>`.
    pub replica_of: Option<SocketAddr>,
    /// TLS: `--tls-port <port>` with the certificate, and
    /// `--tls-auth-clients yes` when `client_auth`; the harness itself
    /// reads through a plain `--port` of its own.
    pub tls: Option<ServerTls>,
    /// More `--name value` arguments, as given (`--cluster-enabled yes`).
    pub extra_args: Vec<String>,
    /// `Some(rate)`: the server's wall clock runs `rate` times as fast as
    /// ours ([`crate::clock_shim`]).
    pub clock_rate: Option<f64>,
}

/// One `redis-server` process with its own folder and loopback port.
///
/// Dropping it kills (SIGKILL) and reaps the process and removes its
/// folder (kept when the thread panics).
#[derive(Debug)]
pub struct RedisServer {
    addr: SocketAddr,
    /// Where the harness reads: `addr`, or with TLS a plain port.
    harness_addr: SocketAddr,
    config: RedisConfig,
    // Field order is drop order: process first, folder last.
    process: ManagedProcess,
    _ports: Vec<PortReservation>,
    dir: TestDir,
}

impl RedisServer {
    /// Starts a server with [`RedisConfig::default`] and waits until it
    /// answers `PING`.
    ///
    /// # Panics
    ///
    /// When it does not answer within the (scaled) start timeout; the
    /// message quotes its log.
    pub fn start() -> RedisServer {
        RedisServer::start_with(RedisConfig::default())
    }

    /// Starts a server with `config`; see [`start`](Self::start).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(config: RedisConfig) -> RedisServer {
        start_server("redis", || {
            RedisServer::prepare(config.clone(), reserve_port())
        })
    }

    /// A server shared by every test of this test binary, started on first
    /// use; only for tests that do not break it. Under nextest the test
    /// processes of the binary share it until the run ends (see
    /// `run_shared.rs`).
    pub fn shared() -> &'static RedisServer {
        RedisServer::shared_with(RedisConfig::default())
    }

    /// Like [`shared`](Self::shared), with `config`: one server per
    /// distinct `config`.
    pub fn shared_with(config: RedisConfig) -> &'static RedisServer {
        static SHARED: SharedSlots<RedisServer> = SharedSlots::new();
        run_shared::shared(&SHARED, config)
    }

    fn prepare(config: RedisConfig, port: PortReservation) -> RedisServer {
        assert!(
            Path::new(REDIS_BINARY).exists(),
            "{REDIS_BINARY} is missing: install Debian's redis-server package (scripts/setup)"
        );
        let dir = TestDir::new("redis");
        let harness = config.tls.as_ref().map(|_| reserve_port());
        let (plain, tls_port) = match &harness {
            None => (port.port().to_string(), "0".to_owned()),
            Some(h) => (h.port().to_string(), port.port().to_string()),
        };
        let mut args: Vec<String> = [
            "--port",
            &plain,
            "--tls-port",
            &tls_port,
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir.path().display().to_string(),
            "--daemonize",
            "no",
            "--save",
            "",
            "--logfile",
            "",
            "--enable-debug-command",
            "local",
            "--maxmemory-policy",
            "noeviction",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        match config.aof {
            Some(fsync) => {
                args.extend(["--appendonly", "yes", "--appendfsync", fsync].map(String::from))
            }
            None => args.extend(["--appendonly", "no"].map(String::from)),
        }
        if let Some(password) = &config.password {
            args.extend(["--requirepass".to_owned(), password.clone()]);
            args.extend(["--masterauth".to_owned(), password.clone()]);
        }
        if let Some(tls) = &config.tls {
            let auth = if tls.client_auth { "yes" } else { "no" };
            args.extend([
                "--tls-cert-file".to_owned(),
                tls.server.cert.display().to_string(),
                "--tls-key-file".to_owned(),
                tls.server.key.display().to_string(),
                "--tls-ca-cert-file".to_owned(),
                tls.ca.display().to_string(),
                "--tls-auth-clients".to_owned(),
                auth.to_owned(),
            ]);
        }
        args.extend(config.extra_args.iter().cloned());
        if let Some(primary) = config.replica_of {
            let (host, port) = (primary.ip().to_string(), primary.port().to_string());
            args.extend(["--replicaof".to_owned(), host, port]);
        }
        let process = ManagedProcess::new(
            format!("redis-{}", port.port()),
            REDIS_BINARY,
            args,
            dir.path(),
            dir.path().join("server.log"),
        )
        .with_env(config.clock_rate.map(clock_rate_env).unwrap_or_default());
        RedisServer {
            addr: port.addr(),
            harness_addr: harness.as_ref().map_or(port.addr(), PortReservation::addr),
            config,
            process,
            _ports: [Some(port), harness].into_iter().flatten().collect(),
            dir,
        }
    }

    /// Its address, `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its URL, with the password when it has one (`rediss://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.config.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        match &self.config.password {
            Some(p) => format!("{scheme}://:{p}@{}", self.addr),
            None => format!("{scheme}://{}", self.addr),
        }
    }

    /// The settings it was started with.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// Its folder (data, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    process_lifecycle!("server");

    /// Kills the server if it runs, starts it again on the same port with
    /// the same folder (so the append-only file, when on, is replayed),
    /// and waits until it answers.
    ///
    /// # Panics
    ///
    /// When it does not answer within the (scaled) start timeout.
    pub fn restart(&self) {
        self.respawn();
    }

    /// Runs one command on a fresh connection.
    ///
    /// # Errors
    ///
    /// The server's or the connection's error.
    pub fn try_cmd<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        let url = match &self.config.password {
            Some(p) => format!("redis://:{p}@{}", self.harness_addr),
            None => format!("redis://{}", self.harness_addr),
        };
        query(&url, cmd)
    }

    /// Runs one command (`args`, the command first).
    ///
    /// # Panics
    ///
    /// When it fails; the message quotes the log.
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        self.try_cmd(&command(args))
            .unwrap_or_else(|e| panic!("redis {args:?}: {e}\n{}", self.log_tail()))
    }

    /// Every key matching `pattern` (`KEYS`, fine for tests), sorted.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys: Vec<String> = self.cmd(&["KEYS", pattern]);
        keys.sort();
        keys
    }

    /// The role the server reports: `master` or `slave`.
    pub fn role(&self) -> String {
        let role: Vec<redis::Value> = self.cmd(&["ROLE"]);
        redis::from_redis_value(&role[0]).unwrap_or_default()
    }
}

/// `args` (the command first) as a command.
fn command(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(args[0]);
    args[1..].iter().for_each(|a| {
        cmd.arg(*a);
    });
    cmd
}

/// One command on a fresh connection to `url`, timed.
fn query<T: redis::FromRedisValue>(url: &str, cmd: &redis::Cmd) -> redis::RedisResult<T> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_connection_with_timeout(QUERY_TIMEOUT)?;
    conn.set_read_timeout(Some(QUERY_TIMEOUT))?;
    cmd.query(&mut conn)
}

/// Started means it answers `PING`.
impl ServerProcess for RedisServer {
    const KIND: &'static str = "Redis";
    const READY: &'static str = "answering PING";
    const SPAWN_HINT: &'static str = " (scripts/setup installs redis-server)";
    const PORT_IN_USE: &'static str = "Address already in use";
    const START_TIMEOUT: Duration = REDIS_START_TIMEOUT;

    fn process(&self) -> &ManagedProcess {
        &self.process
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn is_ready(&self) -> bool {
        let ping = redis::cmd("PING");
        matches!(self.try_cmd::<String>(&ping).as_deref(), Ok("PONG"))
    }
}

/// The sentinel binary (Debian's `redis-sentinel` package).
pub const SENTINEL_BINARY: &str = "/usr/bin/redis-sentinel";

/// One `redis-sentinel` watching a primary under the name
/// [`RedisSentinel::MASTER`], quorum 1, on a loopback port in its own
/// folder: it calls the primary down 500 ms after its last answer and
/// promotes a replica.
#[derive(Debug)]
pub struct RedisSentinel {
    addr: SocketAddr,
    process: ManagedProcess,
    _port: PortReservation,
    _dir: TestDir,
}

impl RedisSentinel {
    /// The name the primary is monitored under.
    pub const MASTER: &'static str = "recipes";

    /// Starts a sentinel of `primary` and waits until it answers `PING`
    /// and knows of `replicas` replicas.
    ///
    /// # Panics
    ///
    /// When it does not within the (scaled) start timeout.
    pub fn start(primary: &RedisServer, replicas: usize) -> RedisSentinel {
        assert!(
            Path::new(SENTINEL_BINARY).exists(),
            "{SENTINEL_BINARY} is missing: install Debian's redis-sentinel package (scripts/setup)"
        );
        let port = reserve_port();
        let dir = TestDir::new("sentinel");
        let conf = dir.path().join("sentinel.conf");
        let m = Self::MASTER;
        // `failover-timeout` also bounds how long a sentinel leaves a
        // replica that replicates from an address other than the
        // primary's: after it, the sentinel points the replica at the
        // primary itself (`+fix-slave-config`, at its next `INFO` of the
        // replica, 10 s after it started with 5 s). A replica behind a
        // test's proxy is such a replica, and once rewired no longer
        // lags when the proxy holds back: long enough for any test.
        let text = format!(
            "port {}\nbind 127.0.0.1\ndir {}\nlogfile \"\"\n\
             sentinel monitor {m} 127.0.0.1 {} 1\n\
             sentinel down-after-milliseconds {m} 500\n\
             sentinel failover-timeout {m} 600000\n\
             sentinel parallel-syncs {m} 1\n",
            port.port(),
            dir.path().display(),
            primary.addr().port()
        );
        std::fs::write(&conf, text).expect("write sentinel.conf");
        let process = ManagedProcess::new(
            format!("sentinel-{}", port.port()),
            SENTINEL_BINARY,
            [conf.display().to_string()],
            dir.path(),
            dir.path().join("sentinel.log"),
        );
        let sentinel = RedisSentinel {
            addr: port.addr(),
            process,
            _port: port,
            _dir: dir,
        };
        sentinel.spawn();
        sentinel.expect_started("sentinel: ", REDIS_START_TIMEOUT);
        crate::wait_until(
            "the sentinel knows the replicas",
            crate::scale(REDIS_START_TIMEOUT),
            || sentinel.replicas() >= replicas,
        );
        sentinel
    }

    fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        query(&format!("redis://{}", self.addr), &command(args))
    }

    /// How many replicas of the primary it knows.
    pub fn replicas(&self) -> usize {
        self.query::<Vec<redis::Value>>(&["SENTINEL", "REPLICAS", Self::MASTER])
            .map(|r| r.len())
            .unwrap_or(0)
    }

    /// The port of the primary it names now.
    pub fn primary_port(&self) -> Option<u16> {
        let addr: Vec<String> = self
            .query(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::MASTER])
            .ok()?;
        addr.get(1)?.parse().ok()
    }

    process_lifecycle!("sentinel");
}

impl ServerProcess for RedisSentinel {
    const KIND: &'static str = "Redis sentinel";
    const READY: &'static str = "answering PING";
    const SPAWN_HINT: &'static str = " (scripts/setup installs redis-sentinel)";
    const PORT_IN_USE: &'static str = "Address already in use";
    const START_TIMEOUT: Duration = REDIS_START_TIMEOUT;

    fn process(&self) -> &ManagedProcess {
        &self.process
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn is_ready(&self) -> bool {
        matches!(self.query::<String>(&["PING"]).as_deref(), Ok("PONG"))
    }
}

impl RunShared for RedisServer {
    type Config = RedisConfig;
    const KIND: &'static str = "redis";

    fn start_shared(config: RedisConfig) -> RedisServer {
        RedisServer::start_with(config)
    }

    fn record(&self) -> Record {
        Record::of(
            &self.process,
            self.dir(),
            vec![self.addr, self.harness_addr],
        )
    }

    fn adopt(config: RedisConfig, record: Record) -> RedisServer {
        RedisServer {
            addr: record.addrs[0],
            harness_addr: record.addrs[1],
            config,
            process: record.process(),
            _ports: Vec::new(),
            dir: TestDir::adopted(record.dir),
        }
    }
}
