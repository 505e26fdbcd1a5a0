//! The keeper: a small process between `recipes` and CMD that outlives a
//! SIGKILL of `recipes` and ends CMD's whole process tree.
//!
//! `recipes` starts it (its own binary again, with [`ARG`]) holding one end
//! of a socket pair whose other end only `recipes` holds. The keeper is a
//! child subreaper (`PR_SET_CHILD_SUBREAPER`), starts CMD as its child —
//! in CMD's cgroup when `recipes` made one ([`crate::cgroup`]) — and so
//! stays the ancestor of every process CMD starts, orphans and `setsid`
//! children included. It signals and kills that tree when told to
//! ([`Order`]), reports CMD's exit and the tree's end ([`Report`]), and
//! when its socket reads end of file — `recipes` exited or was killed;
//! the kernel closes its end either way — it kills the tree, reaps it and
//! exits. It runs in its own process group, so a signal to `recipes`'
//! group does not reach it.

use std::ffi::{CString, OsString};
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::Command;

use crate::cgroup::OwnCgroup;
use crate::keeper_protocol::{Order, Report};
use crate::tree;

/// The first argument that makes `recipes` run as the keeper.
pub const ARG: &str = "--recipes-internal-keeper";

/// The keeper's arguments after [`ARG`]: the socket's fd, whether CMD gets
/// the terminal, CMD's cgroup (`-`: none), `--`, CMD.
pub fn args(
    fd: RawFd,
    foreground: bool,
    cgroup: Option<&OwnCgroup>,
    argv: &[OsString],
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        ARG.into(),
        fd.to_string().into(),
        if foreground { "1" } else { "0" }.into(),
        cgroup.map_or_else(|| "-".into(), |c| c.dir().as_os_str().to_owned()),
        "--".into(),
    ];
    args.extend_from_slice(argv);
    args
}

/// Run as the keeper (`args` after the program name); the exit status.
pub fn main(args: &[OsString]) -> i32 {
    let [_, fd, foreground, cgroup, dashes, argv @ ..] = args else {
        return 64;
    };
    let Some(fd) = fd.to_str().and_then(|s| s.parse::<RawFd>().ok()) else {
        return 64;
    };
    if dashes != "--" || argv.is_empty() {
        return 64;
    }
    // SAFETY: `recipes` passed us this fd, open and ours alone.
    let sock = unsafe { UnixStream::from_raw_fd(fd) };
    let mut cgroup = (cgroup != "-").then(|| OwnCgroup::at(PathBuf::from(cgroup)));
    let Ok(sfd) = setup(fd) else {
        let _ = (&sock).write_all(Report::Failed(libc::EAGAIN).line().as_bytes());
        return 71;
    };
    let mut keeper = Keeper {
        sock,
        sfd,
        me: std::process::id() as libc::pid_t,
        cmd: 0,
        status: None,
        exited_sent: false,
        empty_sent: false,
        cgroup: None,
    };
    match start_cmd(argv, foreground == "1", &mut cgroup) {
        Ok(pid) => {
            keeper.cmd = pid;
            keeper.cgroup = cgroup;
            keeper.send(&Report::Started(pid));
        }
        Err(e) => {
            keeper.send(&Report::Failed(e.raw_os_error().unwrap_or(libc::ENOEXEC)));
            return 0;
        }
    }
    keeper.serve();
    0
}

/// Close-on-exec for the socket (CMD must not hold it), subreaper, SIGCHLD
/// through a signalfd. The forwarded signals stay blocked, as inherited.
fn setup(fd: RawFd) -> io::Result<RawFd> {
    // SAFETY: plain calls on our own fd, process and a local signal set.
    unsafe {
        if libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) != 0
            || libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0
        {
            return Err(io::Error::last_os_error());
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [
            libc::SIGCHLD,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGTTOU,
        ] {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        let sfd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if sfd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(sfd)
    }
}

/// Start CMD in `cgroup`; if it cannot join it, without (the subreaper
/// still finds its tree) and the cgroup goes.
fn start_cmd(
    argv: &[OsString],
    foreground: bool,
    cgroup: &mut Option<OwnCgroup>,
) -> io::Result<libc::pid_t> {
    let joined = cgroup.as_ref().and_then(OwnCgroup::procs_path);
    match spawn(argv, foreground, joined) {
        Err(_) if cgroup.is_some() => {
            if let Some(c) = cgroup.take() {
                let _ = c.remove();
            }
            spawn(argv, foreground, None)
        }
        other => other,
    }
}

/// The signals this process ignores, which CMD would inherit across exec;
/// but not SIGHUP: an ignored SIGHUP is `nohup`'s request, kept for CMD.
fn ignored_signals() -> Vec<libc::c_int> {
    (1..=libc::SIGRTMAX())
        .filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP && s != libc::SIGHUP)
        .filter(|&s| {
            // SAFETY: queries the disposition into a zeroed struct.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                libc::sigaction(s, std::ptr::null(), &mut old) == 0
                    && old.sa_sigaction == libc::SIG_IGN
            }
        })
        .collect()
}

fn spawn(argv: &[OsString], foreground: bool, join: Option<CString>) -> io::Result<libc::pid_t> {
    let ignored = ignored_signals();
    // SAFETY: getpid has no preconditions.
    let keeper = unsafe { libc::getpid() };
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    // SAFETY: only async-signal-safe calls between fork and exec, on data
    // allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // Its own group, so a terminal's Ctrl-C reaches CMD directly.
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if foreground {
                // SIGTTOU is still blocked (inherited), so this works even
                // though our new group is not yet the foreground one.
                libc::tcsetpgrp(0, libc::getpid());
            }
            if let Some(procs) = &join {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if written != 1 {
                    return Err(io::Error::last_os_error());
                }
            }
            // If the keeper is killed, CMD itself does not run on.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != keeper {
                libc::raise(libc::SIGKILL);
            }
            // What `&` in a script ignores (SIGINT, SIGQUIT) must reach CMD.
            for &s in &ignored {
                libc::signal(s, libc::SIG_DFL);
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let pid = child.id() as libc::pid_t;
    // SAFETY: plain calls on the child's pid; errors (the child already
    // did it, or already exec'd) are harmless.
    unsafe {
        libc::setpgid(pid, pid);
        if foreground {
            libc::tcsetpgrp(0, pid);
        }
    }
    // Reaped by `Keeper::reap` (waitpid(-1)), not through `child`.
    drop(child);
    Ok(pid)
}

/// The keeper's state while CMD's tree lives.
struct Keeper {
    sock: UnixStream,
    sfd: RawFd,
    me: libc::pid_t,
    cmd: libc::pid_t,
    /// CMD's wait status once reaped.
    status: Option<libc::c_int>,
    exited_sent: bool,
    empty_sent: bool,
    cgroup: Option<OwnCgroup>,
}

impl Keeper {
    fn send(&mut self, report: &Report) {
        // `recipes` may be gone; end of file on the socket says so.
        let _ = self.sock.write_all(report.line().as_bytes());
    }

    /// Orders until end of file; then kill the tree and go.
    fn serve(&mut self) {
        let mut pending = Vec::new();
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: self.sock.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.sfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds.
            if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
                continue; // EINTR
            }
            if fds[1].revents != 0 {
                self.drain_sigchld();
                self.reap();
            }
            if fds[0].revents == 0 {
                continue;
            }
            let mut chunk = [0u8; 256];
            match self.sock.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => pending.extend_from_slice(&chunk[..n]),
            }
            while let Some(nl) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=nl).collect();
                match Order::parse(&String::from_utf8_lossy(&line)) {
                    Some(Order::Signal(sig)) => self.signal(sig),
                    Some(Order::Kill) => self.kill_tree(),
                    None => {}
                }
            }
        }
        if !self.empty_sent {
            let _ = writeln!(
                io::stderr(),
                "recipes: recipes is gone while CMD (pid {}) or processes it started ran; \
                 killing them",
                self.cmd
            );
        }
        self.kill_tree();
        if let Some(cgroup) = &self.cgroup {
            // Emptied just now; the kernel may take a moment to say so.
            for _ in 0..100 {
                if cgroup.remove().is_ok() {
                    break;
                }
                self.wait_sigchld(10);
            }
        }
    }

    /// Send `sig` to every process of the tree.
    fn signal(&self, sig: libc::c_int) {
        let found = tree::descendants(self.me);
        tree::signal(&found, sig);
        if let Some(cgroup) = &self.cgroup {
            cgroup.signal_except(&found, sig);
        }
    }

    /// SIGKILL the tree until the keeper has no child left: every process
    /// CMD started is below us, so then none is left.
    fn kill_tree(&mut self) {
        loop {
            if let Some(cgroup) = &self.cgroup {
                cgroup.kill();
            }
            tree::signal(&tree::descendants(self.me), libc::SIGKILL);
            if self.reap() {
                return;
            }
            self.wait_sigchld(10);
        }
    }

    /// Reap every child that ended and report; `true` when none is left.
    fn reap(&mut self) -> bool {
        let none_left = loop {
            let mut status = 0;
            // SAFETY: a valid out pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid > 0 {
                if pid == self.cmd {
                    self.status = Some(status);
                }
                continue;
            }
            break pid < 0; // ECHILD; 0: children still run
        };
        if let Some(status) = self.status {
            if !self.exited_sent {
                self.exited_sent = true;
                self.empty_sent = none_left;
                self.send(&Report::Exited {
                    status,
                    alone: none_left,
                });
            } else if none_left && !self.empty_sent {
                self.empty_sent = true;
                self.send(&Report::Empty);
            }
        }
        none_left
    }

    fn wait_sigchld(&self, ms: libc::c_int) {
        let mut fd = libc::pollfd {
            fd: self.sfd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe {
            libc::poll(&mut fd, 1, ms);
        }
        self.drain_sigchld();
    }

    fn drain_sigchld(&self) {
        let mut info = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
        // SAFETY: reads into a buffer of its own size; the fd is
        // non-blocking.
        while unsafe { libc::read(self.sfd, info.as_mut_ptr().cast(), info.len()) } > 0 {}
    }
}
