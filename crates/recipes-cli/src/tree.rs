//! The processes below one process, read from `/proc`: what the keeper
//! signals and kills. As a subreaper the keeper stays the ancestor of
//! everything CMD starts, also of orphans and of children that called
//! `setsid`, so this walk finds them all.
//!
//! A pid read here can be reaped by its parent in the tree and given to
//! another process before the signal goes out; [`signal`] holds each
//! process by a pidfd and signals it only if the pid still has the start
//! time the walk read. The keeper's own children cannot be reaped
//! meanwhile (only the keeper reaps them, on the same thread); their
//! children, CMD's among them, can.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::io::AsRawFd;

/// A process the walk found: its pid, and when it started (field 22 of
/// `/proc/PID/stat`, clock ticks after boot), which tells it from a later
/// process given the same pid once it was reaped by its parent (CMD, or
/// any process of the tree, may reap its own children at any time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Its pid.
    pub pid: libc::pid_t,
    started: u64,
}

impl Found {
    /// The process that has `pid` now; `None` when there is none.
    pub fn now(pid: libc::pid_t) -> Option<Found> {
        let (_, _, _, started) = stat_fields(pid)?;
        Some(Found { pid, started })
    }

    /// Whether `pid` is still this process (alive, or a zombie not yet
    /// reaped).
    fn is_current(&self) -> bool {
        Found::now(self.pid).is_some_and(|now| now.started == self.started)
    }
}

/// The live processes below `root`, parents before their children. A
/// zombie is left out unless threads of it still run: a process whose main
/// thread ended (`pthread_exit`) reads `Z` while its other threads go on,
/// and must still be signalled (its pid is not reused until it is reaped).
pub fn descendants(root: libc::pid_t) -> Vec<Found> {
    let mut children: HashMap<libc::pid_t, Vec<Found>> = HashMap::new();
    let mut zombies = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if let Some((state, ppid, threads, started)) = stat_fields(pid) {
            children
                .entry(ppid)
                .or_default()
                .push(Found { pid, started });
            if state == 'Z' && threads <= 1 {
                zombies.push(pid);
            }
        }
    }
    let mut found = Vec::new();
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        for &child in children.get(&parent).into_iter().flatten() {
            found.push(child);
            next.push(child.pid);
        }
    }
    found.retain(|p| !zombies.contains(&p.pid));
    found
}

/// Field 3 (state), 4 (parent), 20 (number of threads) and 22 (start
/// time) of `/proc/PID/stat`; the command name before them is in
/// parentheses and may hold anything.
fn stat_fields(pid: libc::pid_t) -> Option<(char, libc::pid_t, u64, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    // Fields 5 to 19 lie between; field 20 is the 16th after the parent.
    let threads = rest.nth(15)?.parse().ok()?;
    let started = rest.nth(1)?.parse().ok()?;
    Some((state, ppid, threads, started))
}

/// Send `sig` to each of `found` that is still the process the walk saw.
pub fn signal(found: &[Found], sig: libc::c_int) {
    for f in found {
        signal_checked(f.pid, sig, || f.is_current());
    }
}

/// Send `sig` to `pid` if `ours()`, asked once a pidfd holds the process:
/// a pidfd names one process, never a later one given the same pid, so
/// when `pid` still passes the check after the pidfd was opened, the
/// signal reaches the process checked (or nobody, if it died since).
/// Without pidfds (before Linux 5.3, or refused by a seccomp filter) the
/// check comes just before `kill`, which leaves a window of microseconds
/// for a reuse of the pid.
pub fn signal_checked(pid: libc::pid_t, sig: libc::c_int, ours: impl Fn() -> bool) {
    signal_through(pidfd_open, pid, sig, ours);
}

/// [`signal_checked`] with `open` for `pidfd_open`.
fn signal_through(
    open: fn(libc::pid_t) -> io::Result<OwnedFd>,
    pid: libc::pid_t,
    sig: libc::c_int,
    ours: impl Fn() -> bool,
) {
    match open(pid) {
        Ok(fd) => {
            if ours() {
                pidfd_send_signal(&fd, sig);
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
        Err(_) => {
            if ours() {
                // SAFETY: kill has no memory preconditions.
                unsafe {
                    libc::kill(pid, sig);
                }
            }
        }
    }
}

fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd was just returned to us and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

fn pidfd_send_signal(fd: &OwnedFd, sig: libc::c_int) {
    // SAFETY: a valid pidfd, no siginfo (as kill), no flags.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Child, Command};

    use super::*;

    #[test]
    fn a_grandchild_is_a_descendant() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        let me = std::process::id() as libc::pid_t;
        let sh = child.id() as libc::pid_t;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let below_sh = loop {
            let below_sh = descendants(sh);
            if !below_sh.is_empty() || std::time::Instant::now() > deadline {
                break below_sh;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let below_me = descendants(me);
        signal(&below_sh, libc::SIGKILL);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(below_sh.len(), 1, "sh's sleep: {below_sh:?}");
        let pids: Vec<_> = below_me.iter().map(|f| f.pid).collect();
        assert!(
            pids.contains(&sh) && pids.contains(&below_sh[0].pid),
            "{below_me:?}"
        );
    }

    fn sleeper() -> Child {
        Command::new("sleep").arg("30").spawn().unwrap()
    }

    /// `SIGKILL` to `stale`, then `SIGTERM` to `child`: `child` ends by
    /// `SIGTERM` only if the first did not reach it (a fatal signal, once
    /// sent, is what the process dies of). Without pidfds when `!pidfd`.
    fn reached_by_stale_kill(stale: Found, mut child: Child, pidfd: bool) -> bool {
        if pidfd {
            signal(&[stale], libc::SIGKILL);
        } else {
            let none = |_| Err(io::Error::from_raw_os_error(libc::ENOSYS));
            signal_through(none, stale.pid, libc::SIGKILL, || stale.is_current());
        }
        // SAFETY: kill has no memory preconditions.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        child.wait().unwrap().signal() == Some(libc::SIGKILL)
    }

    #[test]
    fn a_process_started_at_another_time_is_not_signalled() {
        for pidfd in [true, false] {
            let child = sleeper();
            let now = Found::now(child.id() as libc::pid_t).expect("the sleep runs");
            let other = Found {
                started: now.started + 1,
                ..now
            };
            assert!(!reached_by_stale_kill(other, child, pidfd), "{pidfd}");
            let child = sleeper();
            let now = Found::now(child.id() as libc::pid_t).expect("the sleep runs");
            assert!(reached_by_stale_kill(now, child, pidfd), "itself: {pidfd}");
        }
    }

    /// A process as a walk saw it, reaped, and another process given its
    /// pid in a later clock tick (in the same one the two are not told
    /// apart; without steering, reusing a pid takes pid_max forks). The
    /// pid is steered with `ns_last_pid` (as CRIU does), in a pid
    /// namespace of the test's own, so that no other process's pids are
    /// touched.
    fn reused_pid() -> (Found, Child) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            let mut first = sleeper();
            let pid = first.id() as libc::pid_t;
            let seen = Found::now(pid).expect("the first sleep runs");
            first.kill().unwrap();
            first.wait().unwrap();
            for _ in 0..100 {
                fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
                    .expect("ns_last_pid is writable in our own pid namespace");
                let mut child = sleeper();
                let started = Found::now(pid).map(|f| f.started);
                if child.id() as libc::pid_t == pid && started != Some(seen.started) {
                    return (seen, child);
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        panic!("no process was given a reaped pid within 30 s");
    }

    /// Run by [`a_reused_pid_is_not_signalled`] as pid 1 of a pid
    /// namespace of its own; does nothing elsewhere.
    #[test]
    #[ignore = "run in a pid namespace of its own by a_reused_pid_is_not_signalled"]
    fn reused_pid_in_own_namespace() {
        if std::process::id() != 1 {
            eprintln!("not in a pid namespace of its own: not steering pids");
            return;
        }
        let (seen, second) = reused_pid();
        assert!(!reached_by_stale_kill(seen, second, true));
        let (seen, second) = reused_pid();
        assert!(!reached_by_stale_kill(seen, second, false), "no pidfd");
        println!("pid {} reused, not signalled", seen.pid);
    }

    /// A pid the walk saw, reaped and given to another process before the
    /// signal: that process is not signalled. In a pid namespace of its
    /// own (`unshare`, root); skipped where that is refused.
    #[test]
    fn a_reused_pid_is_not_signalled() {
        let exe = std::env::current_exe().unwrap();
        let name = "tree::tests::reused_pid_in_own_namespace";
        let out = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc"])
            .arg(exe)
            .args([name, "--exact", "--ignored", "--nocapture"])
            .output();
        let out = match out {
            Ok(out) => out,
            Err(e) => return eprintln!("skipped: no unshare ({e})"),
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && stderr.starts_with("unshare:") {
            return eprintln!("skipped: no pid namespace of our own ({stderr})");
        }
        assert!(out.status.success(), "{stdout}{stderr}");
        assert!(stdout.contains("reused, not signalled"), "{stdout}{stderr}");
    }
}
