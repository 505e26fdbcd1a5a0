//! How a test server's `postgres` runs: its arguments and its process,
//! the same for a primary and a standby.

use std::path::Path;

use super::{os_user, PgConfig, PgServer};
use crate::ports::PortReservation;
use crate::process::ManagedProcess;
use crate::psql::PG_BIN_DIR;
use crate::test_dir::TestDir;

/// The server's arguments but TLS: its data folder, address, socket
/// folder, fsync, connections and log prefix.
pub(super) fn server_args(
    config: &PgConfig,
    port: &PortReservation,
    dir: &Path,
    data: &Path,
) -> Vec<String> {
    vec![
        "-D".to_owned(),
        data.display().to_string(),
        "-p".to_owned(),
        port.port().to_string(),
        "-c".to_owned(),
        format!("listen_addresses={}", port.addr().ip()),
        "-c".to_owned(),
        format!("unix_socket_directories={}", dir.display()),
        "-c".to_owned(),
        format!("fsync={}", if config.fsync { "on" } else { "off" }),
        "-c".to_owned(),
        format!("max_connections={}", config.max_connections),
        "-c".to_owned(),
        "log_line_prefix=%m [%p] %q%u@%d ".to_owned(),
    ]
}

impl PgServer {
    /// A server of `config` in `dir` (its `data` folder ready), run as
    /// [`PG_OS_USER`](super::PG_OS_USER) with `args`; not started.
    pub(super) fn unstarted(
        label: &str,
        config: PgConfig,
        port: PortReservation,
        dir: TestDir,
        args: Vec<String>,
    ) -> PgServer {
        let (uid, gid) = os_user();
        let (postgres, log) = (
            format!("{PG_BIN_DIR}/postgres"),
            dir.path().join("server.log"),
        );
        let process = ManagedProcess::new(label, postgres, args, dir.path(), log)
            .with_user(uid, gid)
            .with_process_tree()
            .with_env(
                config
                    .clock_rate
                    .map(crate::clock_shim::clock_rate_env)
                    .unwrap_or_default(),
            );
        PgServer {
            addr: port.addr(),
            config,
            process,
            _port: Some(port),
            dir,
        }
    }
}
