//! Drives a worker: a client in its own OS process, spoken to over a line
//! protocol — our `worker` binary, or an interop peer (Curator, kazoo; see
//! `peers`).
//!
//! The protocol: the process prints `READY` once it can serve, then answers
//! each request line with one reply line, `OK [fields]` or `ERR <message>`.
//! Its stderr goes to a log file, whose tail every panic quotes.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::env::scale;
use crate::spawner::spawn_with_parent_death_signal;

/// A worker process: send a request line, get its reply line.
///
/// Pause it with [`pause`](Worker::pause) to simulate a holder stuck in a
/// long pause; its runtime, heartbeats and deadline thread stop with it.
/// Dropping it kills and reaps the process.
#[derive(Debug)]
pub struct Worker {
    name: String,
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr_log: PathBuf,
}

/// The path of the worker binary, built by cargo for this package's tests.
pub fn worker_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("CARGO_BIN_EXE_worker") {
        return PathBuf::from(p);
    }
    // Integration tests run from target/<profile>/deps; the binary is one up.
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    dir.join("worker")
}

impl Worker {
    /// Start a worker named `name` (used in messages and its log file under
    /// `log_dir`) and wait until it is ready.
    pub fn start(binary: &Path, name: &str, log_dir: &Path) -> Worker {
        let mut cmd = Command::new(binary);
        cmd.env("RUST_BACKTRACE", "1");
        Worker::spawn(name, cmd, log_dir.join(format!("worker-{name}.log")))
    }

    /// Start `command` (any program that speaks the line protocol) as a
    /// worker named `name`, its stderr written to `stderr_log`, and wait
    /// until it printed `READY`.
    ///
    /// # Panics
    ///
    /// When it cannot be started or is not ready within 10 s (scaled); the
    /// message quotes its log.
    pub fn spawn(name: &str, mut command: Command, stderr_log: PathBuf) -> Worker {
        let log = std::fs::File::create(&stderr_log).unwrap_or_else(|e| {
            panic!(
                "cannot create the log {} of {name}: {e}",
                stderr_log.display()
            )
        });
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log);
        let program = command.get_program().to_owned();
        let mut child = spawn_with_parent_death_signal(command).unwrap_or_else(|e| {
            panic!(
                "cannot start worker {name} ({}): {e}",
                Path::new(&program).display()
            )
        });
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = crossbeam_channel::unbounded();
        std::thread::Builder::new()
            .name(format!("worker-{name}-stdout"))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
            .expect("spawn worker reader thread");
        let mut w = Worker {
            name: name.to_owned(),
            child,
            stdin,
            lines,
            stderr_log,
        };
        let first = w.read_line(scale(Duration::from_secs(10)));
        assert_eq!(
            first,
            "READY",
            "worker {name} did not start{}",
            w.log_tail()
        );
        w
    }

    fn read_line(&mut self, timeout: Duration) -> String {
        match self.lines.recv_timeout(timeout) {
            Ok(l) => l,
            Err(e) => panic!(
                "worker {} gave no reply within {timeout:?} ({e}){}",
                self.name,
                self.log_tail()
            ),
        }
    }

    /// The last 50 lines of the worker's stderr log, for panic messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.stderr_log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(50).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!("\nworker {} stderr:\n{}", self.name, tail.join("\n"))
    }

    /// Send `request` and wait up to `timeout` (scaled) for its reply:
    /// `Ok(fields)` for `OK fields`, `Err(kind and message)` for `ERR …`.
    pub fn request(&mut self, request: &str, timeout: Duration) -> Result<String, String> {
        self.send(request);
        self.reply(timeout)
    }

    /// Send `request` without waiting for its reply (read it with
    /// [`reply`](Worker::reply) or [`try_reply`](Worker::try_reply)): for
    /// a request that blocks, such as a double barrier's enter.
    pub fn send(&mut self, request: &str) {
        writeln!(self.stdin, "{request}")
            .and_then(|()| self.stdin.flush())
            .unwrap_or_else(|e| panic!("worker {} is gone ({e}){}", self.name, self.log_tail()));
    }

    /// The reply to a request sent, if it came already.
    pub fn try_reply(&mut self) -> Option<Result<String, String>> {
        let reply = self.lines.try_recv().ok()?;
        Some(self.parse(reply))
    }

    /// Wait up to `timeout` (scaled) for the reply to a request sent.
    pub fn reply(&mut self, timeout: Duration) -> Result<String, String> {
        let reply = self.read_line(scale(timeout));
        self.parse(reply)
    }

    fn parse(&self, reply: String) -> Result<String, String> {
        if let Some(rest) = reply.strip_prefix("OK") {
            Ok(rest.trim().to_owned())
        } else if let Some(rest) = reply.strip_prefix("ERR ") {
            Err(rest.to_owned())
        } else {
            panic!("worker {} answered {reply:?}{}", self.name, self.log_tail())
        }
    }

    /// Like [`request`](Worker::request), panicking on an `ERR` reply.
    pub fn ok(&mut self, request: &str, timeout: Duration) -> String {
        match self.request(request, timeout) {
            Ok(fields) => fields,
            Err(e) => panic!(
                "worker {}: {request:?} failed: {e}{}",
                self.name,
                self.log_tail()
            ),
        }
    }

    /// The worker's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own unreaped child's pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, sig);
        }
    }

    /// Stop the process (SIGSTOP) and return once every thread of it, its
    /// deadline and heartbeat threads included, stands still.
    pub fn pause(&self) {
        crate::stop_and_wait(self.pid(), || self.log_tail());
    }

    /// Continue a paused process (SIGCONT) and return once it runs.
    pub fn resume(&self) {
        crate::continue_and_wait(self.pid(), || self.log_tail());
    }

    /// Kill the process (SIGKILL) and reap it.
    pub fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}
