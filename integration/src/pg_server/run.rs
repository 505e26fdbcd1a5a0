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
        // Dynamic shared memory as files in the data folder (pg_dynshmem),
        // not in /dev/shm: a killed server's segments go with its folder.
        // With `posix` every SIGKILLed server left two files in /dev/shm.
        "-c".to_owned(),
        "dynamic_shared_memory_type=mmap".to_owned(),
    ]
}

/// Marks the System V segment of the postmaster of `data` for removal, so
/// the kernel frees it when the server's last process ends, however it
/// ends. PostgreSQL removes it itself only on a clean shutdown or a
/// restart in the same folder: every SIGKILLed test server (a fault test,
/// a test process that ended with its servers, the shared servers' keeper)
/// left one, and once `kernel.shmmni` (4,096) were left no server started
/// ("could not create shared memory segment: No space left on device").
/// A running server never looks its segment up again (its processes are
/// forks, attached already; a restart finds the segment gone or, still
/// attached, in use, as before). The segment is the one `postmaster.pid`
/// names, and only when the pid it records created it.
pub(super) fn remove_segment_at_exit(data: &Path) {
    let Some((postmaster, shmid)) = postmaster_segment(data) else {
        return; // a clean shutdown removed postmaster.pid, or no server ran
    };
    // SAFETY: shmctl with IPC_STAT writes into the zeroed shmid_ds we own;
    // IPC_RMID reads no buffer.
    unsafe {
        let mut stat: libc::shmid_ds = std::mem::zeroed();
        if libc::shmctl(shmid, libc::IPC_STAT, &mut stat) == 0 && stat.shm_cpid == postmaster {
            libc::shmctl(shmid, libc::IPC_RMID, std::ptr::null_mut());
        }
    }
}

/// The postmaster's pid and its System V segment's id, as `postmaster.pid`
/// in `data` records them (lines 1 and 7).
pub(super) fn postmaster_segment(data: &Path) -> Option<(libc::pid_t, libc::c_int)> {
    let text = std::fs::read_to_string(data.join("postmaster.pid")).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let postmaster = lines.first()?.trim().parse().ok()?;
    let shmid = lines.get(6)?.split_whitespace().nth(1)?.parse().ok()?;
    Some((postmaster, shmid))
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
