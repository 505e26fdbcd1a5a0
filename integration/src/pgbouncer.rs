//! A pgbouncer 1.18 process (Debian's package) in front of one
//! [`PgServer`]: its own folder, ini, auth file and loopback port.
//!
//! It runs as [`PG_OS_USER`](crate::pg_server::PG_OS_USER) (pgbouncer refuses root too), in the
//! foreground, logging to stderr, which goes to `pgbouncer.log`; the harness
//! knows its pid, so it writes no pidfile.
//!
//! Every database name is forwarded to the server (`* =`), trusted, for the
//! roles [`PG_SUPERUSER`] and [`PG_USER`]. In [`PoolMode::Transaction`] one
//! client connection is served by whichever server connection is free at
//! each transaction: the failure the PostgreSQL backend must detect.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::pg_server::{chown, os_user, PgServer, PG_DATABASE, PG_SUPERUSER, PG_USER};
use crate::ports::{reserve_port, PortReservation};
use crate::process::ManagedProcess;
use crate::psql::psql;
use crate::run_shared::{self, Record, RunShared, SharedSlots};
use crate::server::{process_lifecycle, start_server, ServerProcess};
use crate::test_dir::TestDir;

/// Debian's pgbouncer binary.
pub const PGBOUNCER_BINARY: &str = "/usr/sbin/pgbouncer";

/// Upper bound (scaled) for pgbouncer to forward a query.
pub const PGBOUNCER_START_TIMEOUT: Duration = Duration::from_secs(20);

/// Server connections per (database, role) pool: room for a 50-waiter test
/// in session mode.
pub const PGBOUNCER_POOL_SIZE: u32 = 100;

/// When pgbouncer hands a client's server connection back to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    /// When the client disconnects: one server connection per client, as
    /// if connected directly (session state survives, `DISCARD ALL` on
    /// release).
    Session,
    /// After every transaction: session state (LISTEN, session advisory
    /// locks, prepared statements, `SET`) stays behind on a server
    /// connection that the next transaction may not get.
    Transaction,
}

impl PoolMode {
    /// Its `pool_mode` value.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        }
    }
}

/// One pgbouncer with its own folder and loopback port.
///
/// Dropping it kills (SIGKILL) and reaps the process and removes its folder
/// (kept when the thread panics). It does not own the server.
#[derive(Debug)]
pub struct PgBouncer {
    addr: SocketAddr,
    server_addr: SocketAddr,
    mode: PoolMode,
    // Field order is drop order: process first, folder last.
    process: ManagedProcess,
    _port: Option<PortReservation>,
    dir: TestDir,
}

impl PgBouncer {
    /// Starts a pgbouncer in `mode` in front of `server` and waits until a
    /// query goes through it.
    ///
    /// # Panics
    ///
    /// When no query goes through within the (scaled) start timeout; the
    /// message quotes its log.
    pub fn start(server: &PgServer, mode: PoolMode) -> PgBouncer {
        start_server("pgbouncer", || {
            PgBouncer::prepare(server.addr(), mode, reserve_port())
        })
    }

    /// A pgbouncer in `mode` in front of [`PgServer::shared`], shared by
    /// every test of this test binary (one per mode; under nextest by its
    /// test processes until the run ends, see `run_shared.rs`).
    ///
    /// Only for tests that break neither; they live until the process
    /// exits. A test that needs to know which server connections exist
    /// (the pool is shared) starts its own.
    pub fn shared(mode: PoolMode) -> &'static PgBouncer {
        static SHARED: SharedSlots<PgBouncer> = SharedSlots::new();
        run_shared::shared(&SHARED, mode)
    }

    fn prepare(server_addr: SocketAddr, mode: PoolMode, port: PortReservation) -> PgBouncer {
        assert!(
            Path::new(PGBOUNCER_BINARY).exists(),
            "{PGBOUNCER_BINARY} is missing: install Debian's pgbouncer package (scripts/setup)"
        );
        let (uid, gid) = os_user();
        let dir = TestDir::new(&format!("pgbouncer-{}", mode.as_str()));
        chown(dir.path(), uid, gid);
        let auth_file = dir.path().join("userlist.txt");
        // With auth_type = trust the password is not checked, but the role
        // must be listed.
        write_file(
            &auth_file,
            &format!("\"{PG_SUPERUSER}\" \"\"\n\"{PG_USER}\" \"\"\n"),
        );
        let ini = dir.path().join("pgbouncer.ini");
        write_file(&ini, &ini_text(server_addr, port.addr(), mode, &auth_file));
        let process = ManagedProcess::new(
            format!("pgbouncer-{}", mode.as_str()),
            PGBOUNCER_BINARY,
            [ini.display().to_string()],
            dir.path(),
            dir.path().join("pgbouncer.log"),
        )
        .with_user(uid, gid);
        PgBouncer {
            addr: port.addr(),
            server_addr,
            mode,
            process,
            _port: Some(port),
            dir,
        }
    }

    /// Its address, `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address of the server behind it.
    pub fn server_addr(&self) -> SocketAddr {
        self.server_addr
    }

    /// Its pool mode.
    pub fn mode(&self) -> PoolMode {
        self.mode
    }

    /// A connection URL for `role` on [`PG_DATABASE`] through it.
    pub fn url_as(&self, role: &str) -> String {
        format!("postgresql://{role}@{}/{PG_DATABASE}", self.addr)
    }

    /// The connection URL for the superuser through it.
    pub fn url(&self) -> String {
        self.url_as(PG_SUPERUSER)
    }

    /// Its folder (ini, auth file, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    process_lifecycle!("pgbouncer");

    /// Kills it if it runs, starts it again on the same port, and waits
    /// until a query goes through.
    ///
    /// # Panics
    ///
    /// When no query goes through within the (scaled) start timeout.
    pub fn restart(&self) {
        self.respawn();
    }

    /// Whether `SELECT 1` goes through it within the probe timeout (so the
    /// server behind it must answer too).
    pub fn forwards(&self) -> bool {
        psql(
            self.addr,
            PG_SUPERUSER,
            PG_DATABASE,
            "SELECT 1",
            crate::pg_server::PG_PROBE_TIMEOUT,
        )
        .is_ok()
    }
}

/// Started means a query goes through.
impl ServerProcess for PgBouncer {
    const KIND: &'static str = "pgbouncer";
    const READY: &'static str = "forwarding";
    const SPAWN_HINT: &'static str = " (scripts/setup installs pgbouncer)";
    const PORT_IN_USE: &'static str = "Address already in use";
    const START_TIMEOUT: Duration = PGBOUNCER_START_TIMEOUT;

    fn process(&self) -> &ManagedProcess {
        &self.process
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn is_ready(&self) -> bool {
        self.forwards()
    }
}

fn ini_text(server: SocketAddr, listen: SocketAddr, mode: PoolMode, auth_file: &Path) -> String {
    let mut ini = String::new();
    let _ = writeln!(ini, "[databases]");
    let _ = writeln!(ini, "* = host={} port={}", server.ip(), server.port());
    let _ = writeln!(ini, "[pgbouncer]");
    let _ = writeln!(ini, "listen_addr = {}", listen.ip());
    let _ = writeln!(ini, "listen_port = {}", listen.port());
    // TCP only: the folder of a test server is not a place for sockets.
    let _ = writeln!(ini, "unix_socket_dir =");
    let _ = writeln!(ini, "auth_type = trust");
    let _ = writeln!(ini, "auth_file = {}", auth_file.display());
    let _ = writeln!(ini, "pool_mode = {}", mode.as_str());
    let _ = writeln!(ini, "default_pool_size = {PGBOUNCER_POOL_SIZE}");
    let _ = writeln!(ini, "max_client_conn = 1000");
    let _ = writeln!(ini, "admin_users = {PG_SUPERUSER}");
    // Sent by many drivers (JDBC, libpq-based ones); pgbouncer would
    // refuse the connection.
    let _ = writeln!(ini, "ignore_startup_parameters = extra_float_digits");
    // After a server restart, reconnect at once instead of after 15 s.
    let _ = writeln!(ini, "server_login_retry = 1");
    ini
}

fn write_file(path: &Path, text: &str) {
    if let Err(e) = std::fs::write(path, text) {
        panic!("cannot write {}: {e}", path.display());
    }
}

impl RunShared for PgBouncer {
    type Config = PoolMode;
    const KIND: &'static str = "pgbouncer";

    fn start_shared(mode: PoolMode) -> PgBouncer {
        PgBouncer::start(PgServer::shared(), mode)
    }

    fn record(&self) -> Record {
        Record::of(&self.process, self.dir(), vec![self.addr, self.server_addr])
    }

    fn adopt(mode: PoolMode, record: Record) -> PgBouncer {
        PgBouncer {
            addr: record.addrs[0],
            server_addr: record.addrs[1],
            mode,
            process: record.process(),
            _port: None,
            dir: TestDir::adopted(record.dir),
        }
    }
}
