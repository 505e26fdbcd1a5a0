//! CMD, as `recipes` sees it: started by the keeper (`keeper.rs`) in its
//! own process group — and its own cgroup where one can be made — holding
//! the terminal while `recipes` runs interactively. `recipes` signals and
//! kills CMD's whole tree through the keeper and hears from it when CMD
//! exits and when the last process of the tree is gone.

use std::ffi::OsString;
use std::io::{self, BufRead as _, BufReader, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Child, Command, ExitStatus};

use crossbeam_channel::Receiver;

use crate::cgroup::OwnCgroup;
use crate::exit;
use crate::keeper;
use crate::keeper_protocol::{Order, Report};
use crate::tree;

/// A running CMD and its keeper.
#[derive(Debug)]
pub struct RunningCmd {
    pid: libc::pid_t,
    foreground: bool,
    orders: UnixStream,
    keeper: Child,
    cgroup: Option<OwnCgroup>,
    /// The keeper's reports after `Started`; disconnected once the keeper
    /// is gone.
    pub reports: Receiver<Report>,
}

/// Why CMD did not start.
#[derive(Debug)]
pub enum SpawnError {
    /// CMD itself could not be executed.
    Cmd(io::Error),
    /// The keeper could not be started or died at once.
    Keeper(io::Error),
}

/// Whether `recipes` runs in the foreground of a terminal on stdin; then CMD
/// gets the terminal for the time it runs.
fn in_terminal_foreground() -> bool {
    // SAFETY: plain queries on fd 0 and our own process group.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Start `argv` under a keeper, with `env` added (and `removed` taken out
/// of the environment it inherits).
///
/// # Errors
///
/// When CMD cannot be started (not found, not executable), or the keeper
/// cannot.
pub fn spawn(
    argv: &[OsString],
    env: &[(String, String)],
    removed: &[&str],
) -> Result<RunningCmd, SpawnError> {
    let foreground = in_terminal_foreground();
    let (orders, theirs) = UnixStream::pair().map_err(SpawnError::Keeper)?;
    let cgroup = OwnCgroup::create();
    let fd = theirs.as_raw_fd();
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0("recipes")
        .args(keeper::args(fd, foreground, cgroup.as_ref(), argv));
    for name in removed {
        cmd.env_remove(name);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Out of our process group: a signal to it (a shell's
            // `kill -9 %1`) must not take the keeper along.
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The keeper's end of the socket survives exec; ours does not.
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // `recipes` is a subreaper too: should the keeper die, what CMD
    // started becomes ours, not init's, and `contain_without_keeper` finds
    // and kills it before the lease is given up.
    // SAFETY: prctl with these arguments has no memory preconditions.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let spawned = cmd.spawn();
    drop(theirs);
    let mut keeper = match spawned {
        Ok(k) => k,
        Err(e) => {
            if let Some(c) = &cgroup {
                let _ = c.remove();
            }
            return Err(SpawnError::Keeper(e));
        }
    };
    let (tx, reports) = crossbeam_channel::unbounded();
    let reader = orders.try_clone().map_err(SpawnError::Keeper)?;
    std::thread::Builder::new()
        .name("recipes-keeper".into())
        .spawn(move || {
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { return };
                if let Some(report) = Report::parse(&line) {
                    if tx.send(report).is_err() {
                        return;
                    }
                }
            }
        })
        .map_err(SpawnError::Keeper)?;
    match reports.recv() {
        Ok(Report::Started(pid)) => Ok(RunningCmd {
            pid,
            foreground,
            orders,
            keeper,
            cgroup,
            reports,
        }),
        Ok(Report::Failed(errno)) => {
            let _ = keeper.wait();
            if let Some(c) = &cgroup {
                let _ = c.remove();
            }
            Err(SpawnError::Cmd(io::Error::from_raw_os_error(errno)))
        }
        Ok(other) => Err(SpawnError::Keeper(io::Error::other(format!(
            "the keeper said {other:?} first"
        )))),
        Err(_) => {
            let status = keeper.wait();
            Err(SpawnError::Keeper(io::Error::other(format!(
                "the keeper ended at once ({status:?})"
            ))))
        }
    }
}

impl RunningCmd {
    /// CMD's pid (also its process group id).
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Send `sig` to CMD and every process it started.
    pub fn signal_tree(&self, sig: libc::c_int) {
        self.order(Order::Signal(sig));
    }

    /// SIGKILL CMD and every process it started; [`RunningCmd::reports`]
    /// says when none is left.
    pub fn kill_tree(&self) {
        self.order(Order::Kill);
    }

    fn order(&self, order: Order) {
        // A keeper that is gone killed the tree as it went (or was killed;
        // then `contain_without_keeper`).
        let _ = (&self.orders).write_all(order.line().as_bytes());
    }

    /// The keeper died while the tree may live (it was SIGKILLed): CMD
    /// itself got its parent-death signal; kill what is left in CMD's
    /// cgroup, if it has one, and every process below `recipes` — the
    /// orphans of the keeper's tree, which came to us as its subreaper —
    /// reaping them, until none is left.
    pub fn contain_without_keeper(&self) {
        if let Some(cgroup) = &self.cgroup {
            cgroup.kill();
        }
        let me = std::process::id() as libc::pid_t;
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let left = tree::descendants(me);
            tree::signal(&left, libc::SIGKILL);
            reap_orphans();
            if left.is_empty() {
                return;
            }
            if std::time::Instant::now() > until {
                say!(
                    "recipes: {} process(es) CMD started survive SIGKILL: {left:?}",
                    left.len()
                );
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
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

    /// Let the keeper go (the tree is gone) and wait for it; remove the
    /// cgroup if the keeper could not.
    pub fn finish(self) {
        let RunningCmd {
            orders,
            mut keeper,
            cgroup,
            ..
        } = self;
        // The reader thread holds a clone: shut the socket, not just our fd.
        let _ = orders.shutdown(std::net::Shutdown::Both);
        let _ = keeper.wait();
        if let Some(c) = cgroup {
            let _ = c.remove();
        }
    }
}

/// Reap every child that has exited: after the keeper died, orphans of its
/// tree are ours to wait for (the keeper itself too; `finish` copes).
fn reap_orphans() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only to `status`.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
    }
}

/// CMD's exit status as an exit status of ours: its code, or 128+n for
/// signal n.
pub fn exit_code(wait_status: libc::c_int) -> i32 {
    let status = ExitStatus::from_raw(wait_status);
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => exit::for_signal(sig),
        (None, None) => exit::UNAVAILABLE,
    }
}

/// The exit status for a CMD that could not be started.
pub fn spawn_failure_code(err: &SpawnError) -> i32 {
    match err {
        SpawnError::Cmd(e) if e.kind() == io::ErrorKind::NotFound => exit::NOT_FOUND,
        SpawnError::Cmd(_) => exit::CANNOT_EXECUTE,
        SpawnError::Keeper(_) => exit::OS_ERROR,
    }
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpawnError::Cmd(e) => write!(f, "{e}"),
            SpawnError::Keeper(e) => write!(f, "cannot start its keeper process: {e}"),
        }
    }
}
