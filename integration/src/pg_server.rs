//! A PostgreSQL 15 server process (Debian's `postgresql-15`) with its own
//! data folder, started with `initdb` and `postgres` directly: no cluster
//! manager, no system service.
//!
//! PostgreSQL refuses to run as root, and the tests do: the server runs as
//! the unprivileged OS user [`PG_OS_USER`] (created by `scripts/setup`),
//! which owns the server's folder. `kill`, `pause` and `resume` reach every
//! backend too (see [`crate::process_tree`]).
//!
//! Inside, every server has the superuser [`PG_SUPERUSER`], an unprivileged
//! login role [`PG_USER`] (it may connect, and as in every PostgreSQL 15 it
//! may not create objects in schema `public`) and the database
//! [`PG_DATABASE`]. Loopback connections are trusted: no passwords.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::certs::ServerTls;
use crate::ports::{reserve_port, PortReservation};
use crate::process::ManagedProcess;
use crate::psql::{psql, PG_BIN_DIR};
use crate::run_shared::{self, SharedSlots};
use crate::server::{process_lifecycle, start_server, ServerProcess};
use crate::test_dir::TestDir;

mod run;
mod shared;
mod standby;
mod template;

/// The OS user the server and pgbouncer run as.
pub const PG_OS_USER: &str = "recipes-pg";

/// The superuser role.
pub const PG_SUPERUSER: &str = "postgres";

/// The unprivileged login role, for permission tests.
pub const PG_USER: &str = "recipes_user";

/// On a server with TLS, the superuser that may log in only over TLS (with
/// a client certificate when the server asks for one): the clients under
/// test; the harness stays [`PG_SUPERUSER`] on plain connections.
pub const PG_TLS_USER: &str = "recipes_tls";

/// The database the tests use.
pub const PG_DATABASE: &str = "recipes";

/// Upper bound (scaled) for a start or a restart (with crash recovery).
pub const PG_START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one probe or harness query may take before the server counts
/// as not answering (a short, unscaled timeout).
pub const PG_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Settings of a test server.
///
/// Defaults: `fsync=off` (testing.md: functional tests run without, as
/// ZooKeeper and etcd do). Killing the server loses nothing committed all
/// the same: `synchronous_commit` stays on, so a commit has reached the
/// kernel before it is acknowledged; fsync only guards against the machine
/// going down, which no test does. `max_connections=400`, room for a
/// 50-waiter test direct and through two pgbouncers.
#[derive(Debug, Clone)]
pub struct PgConfig {
    fsync: bool,
    max_connections: u32,
    tls: Option<ServerTls>,
    clock_rate: Option<f64>,
}

impl Default for PgConfig {
    fn default() -> Self {
        PgConfig {
            fsync: false,
            max_connections: 400,
            tls: None,
            clock_rate: None,
        }
    }
}

impl PgConfig {
    /// `fsync=on`, as in production and for benchmarks.
    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// The server's wall clock runs `rate` times as fast as ours, in every
    /// process of it ([`crate::clock_shim`]).
    pub fn with_clock_rate(mut self, rate: f64) -> Self {
        self.clock_rate = Some(rate);
        self
    }

    /// `max_connections`.
    pub fn with_max_connections(mut self, max_connections: u32) -> Self {
        self.max_connections = max_connections;
        self
    }

    /// `ssl=on` with the certificate; [`PG_TLS_USER`] logs in over TLS
    /// only, with `cert` authentication (its client certificate, mapped
    /// from any name) when `tls.client_auth`.
    pub fn with_tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The server's TLS, if any.
    pub fn tls(&self) -> Option<&ServerTls> {
        self.tls.as_ref()
    }

    /// Whether `fsync` is on.
    pub fn fsync(&self) -> bool {
        self.fsync
    }

    /// `max_connections`.
    pub fn max_connections(&self) -> u32 {
        self.max_connections
    }
}

/// One PostgreSQL server with its own folder and loopback port.
///
/// Dropping it kills (SIGKILL) every process of the server, reaps the
/// postmaster and removes its folder (kept when the thread panics); the
/// kernel frees its shared memory with its last process.
#[derive(Debug)]
pub struct PgServer {
    addr: SocketAddr,
    config: PgConfig,
    // Field order is drop order: process first, folder last.
    process: ManagedProcess,
    _port: Option<PortReservation>,
    dir: TestDir,
}

impl PgServer {
    /// Starts a server with [`PgConfig::default`] and waits until it
    /// accepts connections.
    ///
    /// # Panics
    ///
    /// When `initdb` fails or the server does not accept connections within
    /// the (scaled) start timeout; the message quotes its log.
    pub fn start() -> PgServer {
        PgServer::start_with(PgConfig::default())
    }

    /// Starts a server with `config`; see [`start`](Self::start).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(config: PgConfig) -> PgServer {
        let server = start_server("pg", || PgServer::prepare(config.clone(), reserve_port()));
        server.bootstrap();
        server
    }

    /// A server shared by every test of this test binary, started on first
    /// use with [`PgConfig::default`].
    ///
    /// Only for tests that do not break the server (no kill, pause,
    /// restart); give each test its own table names or key prefix. Under
    /// `cargo test` the server lives until the process exits; under nextest
    /// the test processes of the binary share it until the run ends (see
    /// `run_shared.rs`).
    pub fn shared() -> &'static PgServer {
        PgServer::shared_with(PgConfig::default())
    }

    /// Like [`shared`](Self::shared), with `config`: one server per
    /// distinct `config`.
    pub fn shared_with(config: PgConfig) -> &'static PgServer {
        static SHARED: SharedSlots<PgServer> = SharedSlots::new();
        run_shared::shared(&SHARED, config)
    }

    /// Creates the folder and the data directory (`initdb`); does not start
    /// the server.
    fn prepare(config: PgConfig, port: PortReservation) -> PgServer {
        let postgres = format!("{PG_BIN_DIR}/postgres");
        assert!(
            Path::new(&postgres).exists(),
            "{postgres} is missing: install Debian's postgresql-15 package (scripts/setup)"
        );
        let (uid, gid) = os_user();
        let dir = TestDir::new("pg");
        chown(dir.path(), uid, gid);
        let data = dir.path().join("data");
        let log = dir.path().join("server.log");
        template::fresh_data_dir(&data, &log, uid, gid);
        let mut args = run::server_args(&config, &port, dir.path(), &data);
        if let Some(tls) = &config.tls {
            args.extend(tls_setup(&tls_dir(dir.path()), &data, tls, uid, gid));
        }
        PgServer::unstarted("pg", config, port, dir, args)
    }

    /// Creates the roles and the database of the tests.
    fn bootstrap(&self) {
        for sql in [
            format!("CREATE ROLE {PG_USER} LOGIN"),
            format!("CREATE ROLE {PG_TLS_USER} LOGIN SUPERUSER"),
            format!("CREATE DATABASE {PG_DATABASE}"),
        ] {
            if let Err(e) = psql(
                self.addr,
                PG_SUPERUSER,
                "postgres",
                &sql,
                crate::scale(PG_START_TIMEOUT),
            ) {
                panic!(
                    "bootstrap of pg at {} failed: {e}\n{}",
                    self.addr,
                    self.log_tail()
                );
            }
        }
    }

    /// The settings it was started with.
    pub fn config(&self) -> &PgConfig {
        &self.config
    }

    /// Its address, `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A connection URL for `role` on [`PG_DATABASE`],
    /// `postgresql://<role>@127.0.0.1:<port>/recipes`.
    pub fn url_as(&self, role: &str) -> String {
        format!("postgresql://{role}@{}/{PG_DATABASE}", self.addr)
    }

    /// The connection URL for the superuser.
    pub fn url(&self) -> String {
        self.url_as(PG_SUPERUSER)
    }

    /// The connection URL of the clients under test: [`PG_TLS_USER`] on a
    /// server with TLS (give the client the TLS settings), else
    /// [`url`](Self::url).
    pub fn client_url(&self) -> String {
        match self.config.tls {
            Some(_) => self.url_as(PG_TLS_USER),
            None => self.url(),
        }
    }

    /// Its folder (data directory `data/`, `server.log`, the Unix socket).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Creates the superuser role `role` that logs in over TCP with
    /// `password` only (a `scram-sha-256` rule ahead of the trust rules),
    /// and waits until the rule is in force: a wrong password is refused.
    ///
    /// # Panics
    ///
    /// When the rule is not in force within 10 s (scaled).
    pub fn add_password_role(&self, role: &str, password: &str) {
        self.sql(&format!(
            "CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'"
        ));
        let hba = self.dir().join("data/pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
        let ours = format!("host all {role} 127.0.0.1/32 scram-sha-256\n");
        std::fs::write(&hba, format!("{ours}{rules}")).expect("write pg_hba.conf");
        self.sql("SELECT pg_reload_conf()");
        // psql sends no password: refused once the rule is read.
        crate::wait_until(
            "the password rule is in force",
            Duration::from_secs(10),
            || psql(self.addr, role, PG_DATABASE, "SELECT 1", PG_PROBE_TIMEOUT).is_err(),
        );
    }

    /// Runs `sql` as the superuser on [`PG_DATABASE`]; see
    /// [`psql`] for the output format.
    ///
    /// # Panics
    ///
    /// When it fails or gets no answer within [`PG_PROBE_TIMEOUT`] (scaled);
    /// the message quotes the log.
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql, crate::scale(PG_PROBE_TIMEOUT))
            .unwrap_or_else(|e| panic!("{e}\n{}", self.log_tail()))
    }

    /// Runs `sql` as the superuser on [`PG_DATABASE`] within `timeout`
    /// (unscaled).
    ///
    /// # Errors
    ///
    /// psql's error, or no answer in time.
    pub fn try_sql(&self, sql: &str, timeout: Duration) -> Result<String, String> {
        psql(self.addr, PG_SUPERUSER, PG_DATABASE, sql, timeout)
    }

    process_lifecycle!("server");

    /// Kills every process of the server if it runs, starts it again on the
    /// same port with the same data (crash recovery replays the WAL), and
    /// waits until it accepts connections.
    ///
    /// # Panics
    ///
    /// When it does not accept connections within the (scaled) start
    /// timeout.
    pub fn restart(&self) {
        self.respawn();
    }

    /// The id of the System V segment the running postmaster made, from
    /// `postmaster.pid`; `None` when no server runs.
    pub fn shared_memory_segment(&self) -> Option<i32> {
        run::postmaster_segment(&self.dir().join("data")).map(|(_, id)| id)
    }

    /// Whether the server at our address is this one: its data directory
    /// is ours.
    fn answers_as_ours(&self) -> bool {
        let ours = self.dir().join("data");
        psql(
            self.addr,
            PG_SUPERUSER,
            "postgres",
            "SHOW data_directory",
            crate::scale(PG_START_TIMEOUT),
        )
        .is_ok_and(|out| Path::new(out.trim()) == ours)
    }

    /// Whether `pg_isready` says it accepts connections within
    /// [`PG_PROBE_TIMEOUT`] (during start and crash recovery it rejects
    /// them).
    pub fn is_accepting(&self) -> bool {
        let mut probe = Command::new(format!("{PG_BIN_DIR}/pg_isready"));
        probe
            .arg(format!("--host={}", self.addr.ip()))
            .arg(format!("--port={}", self.addr.port()))
            .arg(format!("--username={PG_SUPERUSER}"))
            .arg(format!("--timeout={}", PG_PROBE_TIMEOUT.as_secs()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        probe.status().is_ok_and(|status| status.success())
    }
}

/// A server that restarted after a backend crash made a new segment; it
/// goes with the server's processes, which the fields' drops kill next
/// (see `run::remove_segment_at_exit`).
impl Drop for PgServer {
    fn drop(&mut self) {
        run::remove_segment_at_exit(&self.dir.path().join("data"));
    }
}

/// Started means `pg_isready` succeeds.
impl ServerProcess for PgServer {
    const KIND: &'static str = "PostgreSQL";
    const READY: &'static str = "accepting connections";
    const SPAWN_HINT: &'static str = " (scripts/setup installs postgresql-15)";
    const PORT_IN_USE: &'static str = "Address already in use";
    const START_TIMEOUT: Duration = PG_START_TIMEOUT;

    fn process(&self) -> &ManagedProcess {
        &self.process
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Accepting, and answered by this server: when another process took
    /// the port first, `pg_isready` reaches that one, while ours exits with
    /// "Address already in use" and the start is tried on another port
    /// (seen once: the bootstrap ran on another test's server and found
    /// its role there).
    fn is_ready(&self) -> bool {
        self.is_accepting() && self.answers_as_ours()
    }

    /// Its System V segment is freed when its last process ends, however
    /// it ends (see `run::remove_segment_at_exit`).
    fn on_ready(&self) {
        run::remove_segment_at_exit(&self.dir.path().join("data"));
    }
}

/// The uid and gid of [`PG_OS_USER`].
///
/// # Panics
///
/// When there is no such user (run `scripts/setup`).
pub(crate) fn os_user() -> (u32, u32) {
    // Looked up once: getpwnam's result lives in a static buffer that a
    // call from another thread would overwrite.
    static USER: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    let user = *USER.get_or_init(|| {
        let name = std::ffi::CString::new(PG_OS_USER).expect("no NUL in the user name");
        // SAFETY: getpwnam with a valid C string; the fields are copied out
        // at once, and no other thread calls it (OnceLock).
        unsafe {
            let entry = libc::getpwnam(name.as_ptr());
            (!entry.is_null()).then(|| ((*entry).pw_uid, (*entry).pw_gid))
        }
    });
    user.unwrap_or_else(|| {
        panic!("no OS user {PG_OS_USER}: PostgreSQL and pgbouncer refuse to run as root; scripts/setup creates it")
    })
}

/// Hands `path` to `uid`/`gid`.
///
/// # Panics
///
/// When chown fails.
pub(crate) fn chown(path: &Path, uid: u32, gid: u32) {
    if let Err(e) = std::os::unix::fs::chown(path, Some(uid), Some(gid)) {
        panic!("cannot chown {} to {PG_OS_USER}: {e}", path.display());
    }
}

/// Where a server's TLS files go.
fn tls_dir(dir: &Path) -> std::path::PathBuf {
    dir.join("tls")
}

/// Copies the certificate, key and CA into `dir` (PostgreSQL wants its key
/// owned by the server's user, mode 0600), writes `pg_hba.conf` and
/// `pg_ident.conf` in `data`, and returns the server's `-c` arguments.
fn tls_setup(dir: &Path, data: &Path, tls: &ServerTls, uid: u32, gid: u32) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).expect("create the TLS folder");
    chown(dir, uid, gid);
    let files = [
        ("server.crt", &tls.server.cert),
        ("server.key", &tls.server.key),
        ("ca.crt", &tls.ca),
    ];
    for (name, from) in files {
        let to = dir.join(name);
        std::fs::copy(from, &to).expect("copy a TLS file");
        chown(&to, uid, gid);
        let mode = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(&to, mode).expect("chmod a TLS file");
    }
    let method = if tls.client_auth {
        "cert map=tls"
    } else {
        "trust"
    };
    let hba = format!(
        "local all all trust\n\
         host all {PG_SUPERUSER} 127.0.0.1/32 trust\n\
         hostssl all {PG_TLS_USER} 127.0.0.1/32 {method}\n"
    );
    std::fs::write(data.join("pg_hba.conf"), hba).expect("write pg_hba.conf");
    std::fs::write(
        data.join("pg_ident.conf"),
        format!("tls /^.*$ {PG_TLS_USER}\n"),
    )
    .expect("write pg_ident.conf");
    let at = |name: &str| dir.join(name).display().to_string();
    [
        "ssl=on".to_owned(),
        format!("ssl_cert_file={}", at("server.crt")),
        format!("ssl_key_file={}", at("server.key")),
        format!("ssl_ca_file={}", at("ca.crt")),
    ]
    .into_iter()
    .flat_map(|setting| ["-c".to_owned(), setting])
    .collect()
}
