//! SQL through `psql`, with a hard timeout: how the harness bootstraps and
//! probes PostgreSQL servers and pgbouncers without a client library (a
//! paused server accepts the connection and then says nothing, so every call
//! must be bounded).

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's `postgresql-15` package installs the server and its tools.
pub const PG_BIN_DIR: &str = "/usr/lib/postgresql/15/bin";

/// Runs `sql` (one or more `;`-separated statements, each committed on its
/// own) as `user` on database `dbname` at `addr` and returns psql's
/// unaligned, tuples-only output: one line per row, columns split by `|`.
///
/// # Errors
///
/// psql's error output when a statement fails or the connection is refused,
/// or a message when no answer comes within `timeout` (psql is then killed).
pub fn psql(
    addr: SocketAddr,
    user: &str,
    dbname: &str,
    sql: &str,
    timeout: Duration,
) -> Result<String, String> {
    let mut command = Command::new(format!("{PG_BIN_DIR}/psql"));
    command
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
        .arg(format!("--host={}", addr.ip()))
        .arg(format!("--port={}", addr.port()))
        .arg(format!("--username={user}"))
        .arg(format!("--dbname={dbname}"))
        .args(["-c", sql])
        // A whole number of seconds, at least 2 (libpq's minimum); the
        // deadline below is the real bound.
        .env("PGCONNECT_TIMEOUT", timeout.as_secs().max(2).to_string())
        // The harness reads plain, whatever TLS the server has.
        .env("PGSSLMODE", "disable")
        .env_remove("PGPASSWORD")
        .env_remove("PGSERVICE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run {PG_BIN_DIR}/psql: {e} (scripts/setup installs it)"))?;
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "psql {user}@{addr}/{dbname} got no answer within {timeout:?} to {sql:?}"
                ));
            }
            Err(e) => return Err(format!("psql: {e}")),
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if status.success() {
        Ok(out.trim_end().to_owned())
    } else {
        Err(format!(
            "psql {user}@{addr}/{dbname} {sql:?}: {status}: {}",
            err.trim_end()
        ))
    }
}

/// Reads a child's pipe to its end on a thread, so a full pipe never blocks
/// the child while we wait for it.
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    })
}
