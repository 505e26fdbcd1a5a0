//! Spawning children that die with the test process.
//!
//! Every server gets `PR_SET_PDEATHSIG = SIGKILL`, so a test run that is
//! killed or aborts leaves no server behind. The signal fires when the
//! *thread* that forked the child exits, not the process — and test threads
//! of `cargo test` end after each test, while a shared server must outlive
//! the test that started it. So all children are forked by one long-lived
//! spawner thread, started on first use and never stopped: the signal fires
//! exactly when the process ends.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::OnceLock;

use crossbeam_channel::{bounded, unbounded, Sender};

type SpawnJob = (Command, Sender<io::Result<Child>>);

/// Spawns `command` from the spawner thread with a parent-death signal.
///
/// # Errors
///
/// The spawn error (program not found, pre-exec failure).
pub fn spawn_with_parent_death_signal(mut command: Command) -> io::Result<Child> {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure only makes async-signal-safe system calls
    // (prctl, getppid) and builds errors without allocating.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl; then the
            // signal will never come.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let (reply_tx, reply_rx) = bounded(1);
    spawner()
        .send((command, reply_tx))
        .map_err(|_| io::Error::other("spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("spawner thread dropped the request"))?
}

fn spawner() -> &'static Sender<SpawnJob> {
    static SPAWNER: OnceLock<Sender<SpawnJob>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = unbounded::<SpawnJob>();
        std::thread::Builder::new()
            .name("integration-spawner".to_owned())
            .spawn(move || {
                // Lives as long as the process: the static sender never drops.
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("cannot start the integration spawner thread");
        tx
    })
}
