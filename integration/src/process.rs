//! One child process of the harness: spawned with a parent-death signal,
//! logging to a file, killable, pausable, restartable, reaped on drop.
//! Optionally run as another user (servers that refuse root) and handled
//! with its whole process tree (servers that fork workers), see [`crate::process_tree`].

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::logs::ServerLogs;
use crate::spawner::spawn_with_parent_death_signal;

/// A child process owned by the harness.
///
/// stdout and stderr are appended to one log file, which survives restarts.
/// Signals are only sent while the child is unreaped, so a reused pid is
/// never hit. Dropping it kills (SIGKILL) and reaps the process.
#[derive(Debug)]
pub struct ManagedProcess {
    label: String,
    program: PathBuf,
    args: Vec<OsString>,
    cwd: PathBuf,
    log: PathBuf,
    /// `(uid, gid)` the child runs as; `None`: ours.
    user: Option<(u32, u32)>,
    /// Variables added to the child's environment.
    env: Vec<(OsString, OsString)>,
    /// Whether the child's descendants are killed, stopped and continued
    /// with it.
    tree: bool,
    /// Whether the child outlives this process (a server shared by the
    /// test processes of a nextest run, see [`crate::run_shared`]).
    detached: bool,
    /// The pid of a process another test process started, which this
    /// handle only names (it never signals it).
    adopted: Option<u32>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The running (or exited but unreaped) child.
    child: Option<Child>,
    /// How the last child ended by itself, once reaped.
    exited: Option<ExitStatus>,
}

impl ManagedProcess {
    /// Describes a process; nothing runs until [`start`](Self::start).
    pub fn new(
        label: impl Into<String>,
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
        cwd: impl Into<PathBuf>,
        log: impl Into<PathBuf>,
    ) -> ManagedProcess {
        ManagedProcess {
            label: label.into(),
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            cwd: cwd.into(),
            log: log.into(),
            user: None,
            env: Vec::new(),
            tree: false,
            detached: crate::run_shared::starting(),
            adopted: None,
            state: Mutex::new(State {
                child: None,
                exited: None,
            }),
        }
    }

    /// A handle of a server process that another test process of this
    /// nextest run started (see [`crate::run_shared`]): it names the
    /// process and its log; `kill`, `pause`, `resume` and `signal` do
    /// nothing, and dropping it leaves the process running.
    pub(crate) fn adopted(label: &str, log: &Path, pid: Option<u32>) -> ManagedProcess {
        let cwd = log.parent().unwrap_or(log).to_owned();
        let mut process = ManagedProcess::new(label, "", Vec::<OsString>::new(), cwd, log);
        process.detached = false;
        process.adopted = pid;
        process
    }

    /// Runs the child as `uid`/`gid` (with no supplementary groups). The
    /// credentials change before the parent-death signal is set, which a
    /// change of credentials would clear.
    pub fn with_user(mut self, uid: u32, gid: u32) -> ManagedProcess {
        self.user = Some((uid, gid));
        self
    }

    /// Adds `vars` to the child's environment.
    pub fn with_env(
        mut self,
        vars: impl IntoIterator<Item = (impl Into<OsString>, impl Into<OsString>)>,
    ) -> ManagedProcess {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Handles the child with its descendants: [`kill`](Self::kill),
    /// [`pause`](Self::pause), [`resume`](Self::resume) then reach every
    /// process it forked, and `kill` returns once all of them are gone.
    pub fn with_process_tree(mut self) -> ManagedProcess {
        self.tree = true;
        self
    }

    /// Spawns the process. A process still running from an earlier start is
    /// killed first.
    ///
    /// # Errors
    ///
    /// When the log cannot be opened or the program cannot be spawned.
    pub fn start(&self) -> io::Result<u32> {
        let mut state = self.state.lock();
        if let Some(old) = state.child.take() {
            self.kill_and_reap(old);
        }
        state.exited = None;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        writeln!(
            log,
            "=== [harness] starting {}: {} {:?}",
            self.label,
            self.program.display(),
            self.args
        )?;
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .current_dir(&self.cwd)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some((uid, gid)) = self.user {
            command.uid(uid).gid(gid);
        }
        let child = if self.detached {
            crate::run_shared::detach(&mut command);
            command.spawn()?
        } else {
            spawn_with_parent_death_signal(command)?
        };
        let pid = child.id();
        state.child = Some(child);
        Ok(pid)
    }

    /// The name used in messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The log, for panic messages.
    pub fn logs(&self) -> ServerLogs {
        ServerLogs::single(self.label.clone(), self.log.clone())
    }

    /// The pid of the running (possibly paused) process; `None` when none
    /// was started, it was killed, or it exited by itself. For a server
    /// another test process started, its pid.
    pub fn pid(&self) -> Option<u32> {
        let mut state = self.state.lock();
        state.reap_if_exited();
        state.child.as_ref().map(Child::id).or(self.adopted)
    }

    /// `Some(status)` when the last process exited by itself (it is then
    /// reaped); `None` while it runs, after [`kill`](Self::kill), or when
    /// none was started.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        let mut state = self.state.lock();
        state.reap_if_exited();
        state.exited
    }

    /// Kills the process with SIGKILL and reaps it. A no-op when none runs.
    pub fn kill(&self) {
        if let Some(child) = self.state.lock().child.take() {
            self.kill_and_reap(child);
        }
    }

    /// Stops the process with SIGSTOP: it keeps its sockets open and answers
    /// nothing, like a process stuck in a long GC pause. Returns once every
    /// thread is stopped; see [`stop_and_wait`].
    ///
    /// # Panics
    ///
    /// When the threads are not all stopped within 5 s (scaled).
    pub fn pause(&self) {
        let state = self.state.lock();
        if let Some(child) = state.child.as_ref() {
            let context = || format!("{}\n{}", self.label, self.logs().tail());
            if self.tree {
                crate::process_tree::stop_tree_and_wait(child.id(), context);
            } else {
                stop_and_wait(child.id(), context);
            }
        }
    }

    /// Continues a paused process with SIGCONT. Returns once no thread is
    /// stopped any more; see [`continue_and_wait`].
    ///
    /// # Panics
    ///
    /// When some thread is still stopped after 5 s (scaled).
    pub fn resume(&self) {
        let state = self.state.lock();
        if let Some(child) = state.child.as_ref() {
            let context = || format!("{}\n{}", self.label, self.logs().tail());
            if self.tree {
                crate::process_tree::continue_tree_and_wait(child.id(), context);
            } else {
                continue_and_wait(child.id(), context);
            }
        }
    }

    /// Sends `signal` to the process, if one runs.
    pub fn signal(&self, signal: libc::c_int) {
        let state = self.state.lock();
        if let Some(child) = state.child.as_ref() {
            // The child is not reaped while we hold it, so its pid is ours.
            send_signal(child.id(), signal);
        }
    }
}

impl ManagedProcess {
    fn kill_and_reap(&self, child: Child) {
        if !self.tree {
            kill_and_reap(child);
            return;
        }
        let descendants = crate::process_tree::kill_descendants(child.id());
        kill_and_reap(child);
        crate::process_tree::wait_gone(&descendants, || {
            format!("{}\n{}", self.label, self.logs().tail())
        });
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

impl State {
    fn reap_if_exited(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                self.exited = Some(status);
            }
        }
    }
}

/// Sends SIGSTOP to `pid` and returns once every thread of it is stopped.
///
/// SIGSTOP is delivered asynchronously: the kernel wakes one thread to start
/// the group stop and the others run on until they notice. Measured on a
/// loaded 2-core machine, a JVM answered a request sent right after
/// `kill(SIGSTOP)` returned; hence the wait on `/proc/<pid>/task/*/stat`.
///
/// `pid` must be an unreaped child of this process (so it cannot have been
/// reused). `context` is appended to the panic message.
///
/// # Panics
///
/// When the threads are not all stopped within 5 s (scaled).
pub fn stop_and_wait(pid: u32, context: impl FnOnce() -> String) {
    send_signal(pid, libc::SIGSTOP);
    wait_thread_states(
        &format!("pid {pid}"),
        || thread_states(pid),
        "stopped",
        is_stopped,
        context,
    );
}

/// Sends SIGCONT to `pid` and returns once none of its threads is stopped.
/// Same contract as [`stop_and_wait`].
///
/// # Panics
///
/// When some thread is still stopped after 5 s (scaled).
pub fn continue_and_wait(pid: u32, context: impl FnOnce() -> String) {
    send_signal(pid, libc::SIGCONT);
    wait_thread_states(
        &format!("pid {pid}"),
        || thread_states(pid),
        "running",
        is_running,
        context,
    );
}

pub(crate) fn send_signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) with a pid and a signal touches no memory; the caller
    // guarantees the pid is its unreaped child.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// A thread state that counts as stopped (or gone).
pub(crate) fn is_stopped(state: char) -> bool {
    matches!(state, 'T' | 'Z' | 'X')
}

/// A thread state that counts as no longer stopped.
pub(crate) fn is_running(state: char) -> bool {
    state != 'T'
}

/// Waits until every state `states()` lists satisfies `wanted`; `who` and
/// `desc` name the processes and the state in the panic message.
pub(crate) fn wait_thread_states(
    who: &str,
    states: impl Fn() -> Vec<char>,
    desc: &str,
    wanted: impl Fn(char) -> bool,
    context: impl FnOnce() -> String,
) {
    let limit = crate::env::scale(Duration::from_secs(5));
    let start = Instant::now();
    loop {
        // A vanished process has nothing left to wait for.
        let states = states();
        if states.iter().all(|&state| wanted(state)) {
            return;
        }
        if start.elapsed() > limit {
            panic!(
                "{who} not {desc} after {:?}: thread states {states:?}; {}",
                start.elapsed(),
                context()
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The state letter of every thread of `pid` (`R`, `S`, `D`, `T`, …).
pub(crate) fn thread_states(pid: u32) -> Vec<char> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            // The command name may contain spaces and parentheses; the state
            // follows the last ')'.
            stat.rsplit_once(')')?.1.trim_start().chars().next()
        })
        .collect()
}

fn kill_and_reap(mut child: Child) {
    // The child is unreaped, so the pid is ours.
    send_signal(child.id(), libc::SIGKILL);
    let _ = child.wait();
}
