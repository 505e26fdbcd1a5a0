//! Tests of the PostgreSQL harness: `PgServer` and `PgBouncer` against the
//! real PostgreSQL 15 and pgbouncer 1.18.
//!
//! Fault tests (named `fault_*`, run serially by nextest) kill, pause or
//! restart their own server; the others share one server per process and
//! use their own tables, or start their own pgbouncer when they count on
//! which server connections exist.

use std::path::Path;
use std::task::Poll;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver};
use integration::pg_server::{PG_SUPERUSER, PG_USER};
use integration::runtime::{block_on_timeout, runtime};
use integration::{scale, wait_until_with, PgBouncer, PgServer, PoolMode, ServerLogs};
use tokio_postgres::{AsyncMessage, Client, NoTls, SimpleQueryMessage};

/// One client connection; the notifications it receives arrive on `notes`.
struct Conn {
    client: Client,
    notes: Receiver<String>,
    logs: ServerLogs,
}

impl Conn {
    fn open(url: &str, logs: &ServerLogs) -> Conn {
        let (client, mut connection) = block_on_timeout(
            scale(Duration::from_secs(10)),
            tokio_postgres::connect(url, NoTls),
        )
        .unwrap_or_else(|| panic!("no connection to {url} in 10 s\n{}", logs.tail()))
        .unwrap_or_else(|e| panic!("connect to {url}: {e}\n{}", logs.tail()));
        let (tx, notes) = unbounded();
        runtime().spawn(std::future::poll_fn(move |cx| loop {
            match connection.poll_message(cx) {
                Poll::Ready(Some(Ok(AsyncMessage::Notification(n)))) => {
                    let _ = tx.send(n.payload().to_owned());
                }
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }));
        Conn {
            client,
            notes,
            logs: logs.clone(),
        }
    }

    /// The first column of the first row of `sql` (simple protocol), or the
    /// server's error.
    fn try_value(
        &self,
        sql: &str,
        limit: Duration,
    ) -> Option<Result<String, tokio_postgres::Error>> {
        block_on_timeout(limit, self.client.simple_query(sql)).map(|answer| {
            Ok(answer?
                .into_iter()
                .find_map(|m| match m {
                    SimpleQueryMessage::Row(row) => Some(row.get(0).unwrap_or("NULL").to_owned()),
                    _ => None,
                })
                .unwrap_or_default())
        })
    }

    fn value(&self, sql: &str) -> String {
        self.try_value(sql, scale(Duration::from_secs(10)))
            .unwrap_or_else(|| panic!("no answer to {sql:?} in 10 s\n{}", self.logs.tail()))
            .unwrap_or_else(|e| panic!("{sql:?}: {e}\n{}", self.logs.tail()))
    }

    fn backend_pid(&self) -> i32 {
        self.value("SELECT pg_backend_pid()")
            .parse()
            .expect("a pid")
    }
}

fn assert_process_gone(pid: u32) {
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "process {pid} outlived its handle"
    );
}

#[test]
fn pg_server_starts_with_roles_and_settings_and_stops() {
    let started = Instant::now();
    let server = PgServer::start();
    eprintln!("PostgreSQL accepting after {:?}", started.elapsed());
    assert_eq!(
        server.sql(
            "SELECT current_setting('fsync'), current_setting('max_connections'), current_user"
        ),
        "off|400|postgres"
    );
    assert_eq!(
        server.sql(&format!(
            "SELECT rolsuper FROM pg_roles WHERE rolname = '{PG_USER}'"
        )),
        "f"
    );
    let pid = server.pid().expect("pid of a started server");
    let workers = integration::process_tree::descendants(pid);
    assert!(!workers.is_empty(), "the postmaster forks workers");
    let dir = server.dir().to_owned();
    drop(server);
    assert_process_gone(pid);
    assert!(
        workers.iter().all(|w| !w.is_alive()),
        "a worker outlived its server"
    );
    assert!(!dir.exists(), "{} outlived its server", dir.display());
}

#[test]
fn the_unprivileged_role_connects_and_may_not_create_tables() {
    let server = PgServer::shared();
    let logs = server.logs();
    let user = Conn::open(&server.url_as(PG_USER), &logs);
    assert_eq!(user.value("SELECT current_user"), PG_USER);
    let denied = user
        .try_value(
            "CREATE TABLE harness_denied (x int)",
            scale(Duration::from_secs(10)),
        )
        .expect("an answer")
        .expect_err("CREATE in schema public as an unprivileged role");
    assert_eq!(
        denied.code(),
        Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
        "{denied}"
    );
    let admin = Conn::open(&server.url(), &logs);
    assert_eq!(admin.value("SELECT current_user"), PG_SUPERUSER);
    admin.value("CREATE TABLE harness_allowed (x int)");
}

#[test]
fn fault_restart_after_kill_keeps_committed_rows() {
    let server = PgServer::start();
    let logs = server.logs();
    let conn = Conn::open(&server.url(), &logs);
    conn.value("CREATE TABLE kept (x int)");
    conn.value("INSERT INTO kept VALUES (42)");
    let before = server.pid().expect("pid");
    let workers = integration::process_tree::descendants(before);
    server.kill();
    assert!(
        !server.is_accepting(),
        "killed server accepts\n{}",
        logs.tail()
    );
    assert!(
        workers.iter().all(|w| !w.is_alive()),
        "a backend outlived the kill"
    );
    assert!(
        matches!(
            conn.try_value("SELECT 1", scale(Duration::from_secs(10))),
            Some(Err(_))
        ),
        "a connection to a killed server answered"
    );
    server.restart();
    assert_ne!(server.pid(), Some(before));
    assert_eq!(server.sql("SELECT x FROM kept"), "42");
}

/// Whether System V segment `shmid` exists (marked for removal or not).
fn segment_exists(shmid: i32) -> bool {
    // SAFETY: IPC_STAT writes into the zeroed shmid_ds we own.
    unsafe {
        let mut stat: libc::shmid_ds = std::mem::zeroed();
        libc::shmctl(shmid, libc::IPC_STAT, &mut stat) == 0
    }
}

/// A SIGKILLed postmaster leaves its System V segment in the kernel and,
/// with `posix` dynamic shared memory, its segments in /dev/shm: thousands
/// of killed test servers exhausted `kernel.shmmni` and no server started.
/// The harness keeps the dynamic segments in the folder and has the kernel
/// free the System V one with the server's last process: a kill alone,
/// with the handle still alive, leaves nothing; so does a restart.
#[test]
fn fault_a_killed_server_leaves_no_shared_memory_behind() {
    let server = PgServer::start();
    assert_eq!(
        server.sql("SELECT current_setting('dynamic_shared_memory_type')"),
        "mmap"
    );
    let data = server.dir().join("data");
    let in_folder = std::fs::read_dir(data.join("pg_dynshmem"))
        .expect("pg_dynshmem")
        .count();
    assert!(in_folder > 0, "the dynamic segments are in the data folder");
    for _ in 0..2 {
        let shmid = server
            .shared_memory_segment()
            .expect("a segment id on line 7 of postmaster.pid");
        assert!(segment_exists(shmid), "the running server's segment");
        server.kill();
        assert!(
            !segment_exists(shmid),
            "segment {shmid} outlived its server"
        );
        server.restart();
        assert_eq!(server.sql("SELECT 1"), "1");
    }
}

#[test]
fn fault_paused_server_answers_nothing_until_resumed() {
    let server = PgServer::start();
    let logs = server.logs();
    let conn = Conn::open(&server.url(), &logs);
    assert_eq!(conn.value("SELECT 1"), "1");
    server.pause();
    // Lower bounds: a stopped server answers neither an open connection
    // nor a new one, however long we wait; 300 ms stands for "long".
    let quiet = Duration::from_millis(300);
    assert!(
        conn.try_value("SELECT 2", quiet).is_none(),
        "a paused server answered\n{}",
        logs.tail()
    );
    assert!(server.try_sql("SELECT 3", quiet).is_err());
    server.resume();
    assert_eq!(conn.value("SELECT 4"), "4");
    assert!(server.is_accepting());
}

/// Client `a` runs a transaction, `b` opens one and keeps it, `a` runs
/// another; returns the backend pids `(a first, b, a second)`. The pool of
/// role [`PG_USER`] is empty before (the harness probes as the superuser),
/// so after `a`'s first transaction it holds one idle server connection.
fn interleave(bouncer: &PgBouncer) -> (i32, i32, i32) {
    let logs = bouncer.logs();
    let a = Conn::open(&bouncer.url_as(PG_USER), &logs);
    let b = Conn::open(&bouncer.url_as(PG_USER), &logs);
    let a_first = a.backend_pid();
    b.value("BEGIN");
    let b_pid = b.backend_pid();
    let a_second = a.backend_pid();
    b.value("COMMIT");
    (a_first, b_pid, a_second)
}

#[test]
fn transaction_pooling_changes_the_backend_between_transactions() {
    let bouncer = PgBouncer::start(PgServer::shared(), PoolMode::Transaction);
    let (a_first, b_pid, a_second) = interleave(&bouncer);
    assert_eq!(b_pid, a_first, "b got the one idle server connection");
    assert_ne!(
        a_second, a_first,
        "one client connection, two backends: the pooling failure"
    );
}

#[test]
fn session_pooling_keeps_the_backend_of_a_client() {
    let bouncer = PgBouncer::start(PgServer::shared(), PoolMode::Session);
    let (a_first, b_pid, a_second) = interleave(&bouncer);
    assert_eq!(a_second, a_first);
    assert_ne!(b_pid, a_first);
}

#[test]
fn transaction_pooling_loses_session_state() {
    let server = PgServer::shared();
    let bouncer = PgBouncer::start(server, PoolMode::Transaction);
    let logs = bouncer.logs().merged(&server.logs());
    let a = Conn::open(&bouncer.url_as(PG_USER), &logs);
    let b = Conn::open(&bouncer.url_as(PG_USER), &logs);
    let direct = Conn::open(&server.url(), &logs);

    // A session advisory lock stays with the backend, not the client.
    assert_eq!(a.value("SELECT pg_try_advisory_lock(7001, 1)"), "t");
    let locker = a.backend_pid();
    b.value("BEGIN");
    assert_eq!(b.backend_pid(), locker);
    assert_eq!(
        a.value("SELECT pg_advisory_unlock(7001, 1)"),
        "f",
        "a's unlock ran on another backend"
    );
    b.value("COMMIT");
    assert_eq!(
        direct.value(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = 7001 AND objid = 1"
        ),
        locker.to_string(),
        "the lock stays with the backend a first ran on"
    );

    // A prepared statement too (pgbouncer 1.18 does not track them).
    let statement = block_on_timeout(
        scale(Duration::from_secs(10)),
        a.client.prepare("SELECT pg_backend_pid()"),
    )
    .expect("an answer")
    .expect("prepare");
    b.value("BEGIN");
    let lost = block_on_timeout(
        scale(Duration::from_secs(10)),
        a.client.query(&statement, &[]),
    )
    .expect("an answer")
    .expect_err("a prepared statement on another backend");
    b.value("COMMIT");
    assert_eq!(
        lost.code(),
        Some(&tokio_postgres::error::SqlState::INVALID_SQL_STATEMENT_NAME),
        "{lost:?}"
    );

    // And LISTEN: the notification goes to the backend, which pgbouncer
    // holds idle with no client to forward it to.
    let listener = Conn::open(&server.url(), &logs);
    listener.value("LISTEN harness_pooled");
    a.value("LISTEN harness_pooled");
    direct.value("NOTIFY harness_pooled, 'hello'");
    let upper = scale(Duration::from_secs(10));
    assert_eq!(listener.notes.recv_timeout(upper).as_deref(), Ok("hello"));
    // An observation window, not synchronization: a direct listener had it
    // at once.
    assert!(
        a.notes.recv_timeout(Duration::from_millis(500)).is_err(),
        "a pooled LISTEN got the notification"
    );
}

#[test]
fn fault_pgbouncer_reconnects_after_the_server_restarts() {
    let server = PgServer::start();
    let bouncer = PgBouncer::start(&server, PoolMode::Transaction);
    let logs = bouncer.logs().merged(&server.logs());
    let conn = Conn::open(&bouncer.url(), &logs);
    let before = conn.backend_pid();
    server.kill();
    server.restart();
    // The first query may meet the dead server connection; pgbouncer then
    // drops it and the client sees an error, or it answers from a new one.
    wait_until_with(
        "a query through pgbouncer answers from a new backend",
        Duration::from_secs(20),
        || {
            conn.try_value("SELECT pg_backend_pid()", scale(Duration::from_secs(2)))
                .and_then(Result::ok)
                .is_some_and(|pid| pid != before.to_string())
        },
        || logs.tail(),
    );
}
