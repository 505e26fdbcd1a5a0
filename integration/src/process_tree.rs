//! A server that forks workers, seen as one process: PostgreSQL's postmaster
//! and the backends it forks
//! ([`ManagedProcess::with_process_tree`](crate::ManagedProcess::with_process_tree)).
//!
//! Stopping only the postmaster would leave every backend answering its
//! client; killing only the postmaster leaves backends that exit a moment
//! later and hold the shared memory a restart needs. A process group would
//! not do: every PostgreSQL child calls `setsid()`. So the tree is found in
//! `/proc` by parent pid, each process named by pid and start time.
//!
//! Pids stay ours while we signal them: the root is an unreaped child of
//! the harness, and the root is stopped before its descendants are listed,
//! so it reaps none of them (and forks no new ones) meanwhile.

use std::time::Duration;

use crate::process::{is_running, is_stopped, send_signal, thread_states, wait_thread_states};

/// One process: its pid and its start time (clock ticks after boot), so a
/// reused pid is not taken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeMember {
    /// The pid.
    pub pid: u32,
    start_time: u64,
}

impl TreeMember {
    /// Whether it still runs (a zombie does not: it holds no sockets and no
    /// shared memory).
    pub fn is_alive(&self) -> bool {
        stat(self.pid).is_some_and(|s| s.start_time == self.start_time && s.state != 'Z')
    }
}

struct Stat {
    state: char,
    ppid: u32,
    start_time: u64,
}

/// The fields we need from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name (which may hold spaces and parentheses):
    // state (field 3), ppid (4), …, starttime (22).
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// The parent pid of `pid`, if it still exists.
pub fn parent_of(pid: u32) -> Option<u32> {
    stat(pid).map(|s| s.ppid)
}

/// Every live descendant of `root` (not `root` itself), found by parent pid.
pub fn descendants(root: u32) -> Vec<TreeMember> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let all: Vec<(u32, Stat)> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .collect();
    let mut found = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for (pid, s) in &all {
            if s.ppid == parent && s.state != 'Z' {
                found.push(TreeMember {
                    pid: *pid,
                    start_time: s.start_time,
                });
                parents.push(*pid);
            }
        }
    }
    found
}

fn tree_thread_states(root: u32, members: &[TreeMember]) -> Vec<char> {
    std::iter::once(root)
        .chain(members.iter().filter(|m| m.is_alive()).map(|m| m.pid))
        .flat_map(thread_states)
        .collect()
}

/// Stops `root` and then every descendant with SIGSTOP and returns once
/// every thread of them is stopped. `root` must be an unreaped child of this
/// process. `context` is appended to the panic message.
///
/// # Panics
///
/// When some thread is not stopped within 5 s (scaled).
pub fn stop_tree_and_wait(root: u32, context: impl FnOnce() -> String) {
    crate::process::stop_and_wait(root, String::new);
    let members = descendants(root);
    for member in &members {
        send_signal(member.pid, libc::SIGSTOP);
    }
    wait_thread_states(
        &format!("process tree of {root}"),
        || tree_thread_states(root, &members),
        "stopped",
        is_stopped,
        context,
    );
}

/// Continues every descendant of a stopped `root` and then `root` with
/// SIGCONT, and returns once none of their threads is stopped. Same
/// contract as [`stop_tree_and_wait`].
///
/// # Panics
///
/// When some thread is still stopped after 5 s (scaled).
pub fn continue_tree_and_wait(root: u32, context: impl FnOnce() -> String) {
    let members = descendants(root);
    for member in &members {
        send_signal(member.pid, libc::SIGCONT);
    }
    send_signal(root, libc::SIGCONT);
    wait_thread_states(
        &format!("process tree of {root}"),
        || tree_thread_states(root, &members),
        "running",
        is_running,
        context,
    );
}

/// Stops `root`, then kills every descendant with SIGKILL and returns them,
/// so the caller can kill and reap `root` and then
/// [`wait_gone`] for them.
pub(crate) fn kill_descendants(root: u32) -> Vec<TreeMember> {
    send_signal(root, libc::SIGSTOP);
    let members = descendants(root);
    for member in &members {
        send_signal(member.pid, libc::SIGKILL);
    }
    members
}

/// Waits until none of `members` runs.
///
/// # Panics
///
/// When one still runs after 5 s (scaled).
pub(crate) fn wait_gone(members: &[TreeMember], context: impl FnOnce() -> String) {
    let alive = || -> Vec<u32> {
        members
            .iter()
            .filter(|m| m.is_alive())
            .map(|m| m.pid)
            .collect()
    };
    crate::wait::wait_until_with(
        "every process of the tree is gone",
        Duration::from_secs(5),
        || alive().is_empty(),
        || format!("left: {:?}; {}", alive(), context()),
    );
}
