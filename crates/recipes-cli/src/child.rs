//! CMD as a child process: its own process group, the terminal's foreground
//! while `recipes` runs interactively, a parent-death signal, and an
//! unblocked signal mask.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};

use crossbeam_channel::Receiver;

use crate::exit;

/// A running CMD.
#[derive(Debug)]
pub struct RunningCmd {
    pid: libc::pid_t,
    foreground: bool,
    /// Delivers CMD's exit status once (from a thread that waits for it).
    pub exited: Receiver<io::Result<ExitStatus>>,
}

/// Whether `recipes` runs in the foreground of a terminal on stdin; then CMD
/// gets the terminal for the time it runs.
fn in_terminal_foreground() -> bool {
    // SAFETY: plain queries on fd 0 and our own process group.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Start `argv` with `env` added (and `removed` taken out of the
/// environment it inherits).
///
/// Call it from the main thread: the parent-death signal fires when the
/// *thread* that forked exits, and the main thread lives as long as
/// `recipes` does.
///
/// # Errors
///
/// When CMD cannot be started (not found, not executable).
pub fn spawn(
    argv: &[OsString],
    env: &[(&str, String)],
    removed: &[&str],
) -> io::Result<RunningCmd> {
    let foreground = in_terminal_foreground();
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    for name in removed {
        cmd.env_remove(name);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Our own group, so loss and forwarded signals reach everything
            // CMD started, and a terminal's Ctrl-C reaches CMD directly.
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if foreground {
                // SIGTTOU is still blocked (inherited), so this works even
                // though our new group is not yet the foreground one.
                libc::tcsetpgrp(0, libc::getpid());
            }
            // If `recipes` is killed, CMD must not run on without the lock.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // `recipes` may have died before the prctl took effect.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut child: Child = cmd.spawn()?;
    let pid = child.id() as libc::pid_t;
    // SAFETY: plain calls on the child's pid; errors (the child already
    // did it, or already exec'd) are harmless.
    unsafe {
        libc::setpgid(pid, pid);
        if foreground {
            libc::tcsetpgrp(0, pid);
        }
    }
    let (tx, exited) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("recipes-wait-cmd".into())
        .spawn(move || {
            let _ = tx.send(child.wait());
        })?;
    Ok(RunningCmd {
        pid,
        foreground,
        exited,
    })
}

impl RunningCmd {
    /// CMD's pid (also its process group id).
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Send `sig` to CMD's process group.
    pub fn signal_group(&self, sig: libc::c_int) {
        // SAFETY: kill has no memory preconditions.
        unsafe {
            libc::kill(-self.pid, sig);
        }
    }

    /// Take the terminal back after CMD is gone.
    pub fn restore_terminal(&self) {
        if self.foreground {
            // SAFETY: SIGTTOU is blocked in this thread, so a background
            // process may set the foreground group.
            unsafe {
                libc::tcsetpgrp(0, libc::getpgrp());
            }
        }
    }
}

/// CMD's status as an exit status of ours: its code, or 128+n for signal n.
pub fn exit_code(status: &io::Result<ExitStatus>) -> i32 {
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => code,
            (None, Some(sig)) => exit::for_signal(sig),
            (None, None) => exit::UNAVAILABLE,
        },
        Err(_) => exit::UNAVAILABLE,
    }
}

/// The exit status for a CMD that could not be started.
pub fn spawn_failure_code(err: &io::Error) -> i32 {
    match err.kind() {
        io::ErrorKind::NotFound => exit::NOT_FOUND,
        _ => exit::CANNOT_EXECUTE,
    }
}
