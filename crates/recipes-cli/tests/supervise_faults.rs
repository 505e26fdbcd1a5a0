//! CMD's tree in the corners a review found (each test failed before its
//! fix): a process whose main thread ended while its other threads run
//! (`/proc` says zombie), a keeper SIGKILLed while `recipes` stops what CMD
//! left running, CMD's exit and the loss of the lease seen at once, and a
//! stderr nobody reads.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::*;
use integration::wait_until;

/// How CMD's tree is contained.
#[derive(Clone, Copy, Debug)]
enum Tree {
    /// The default: a cgroup v2 of CMD's own.
    Cgroup,
    /// `RECIPES_CGROUP=off`: the keeper process as subreaper.
    Subreaper,
}

/// `recipes` on ZooKeeper, TTL 5 s, containing CMD's tree as `tree` says.
fn with_tree(tree: Tree) -> Command {
    let mut cmd = with_store(Store::Zk, "5s");
    if let Tree::Subreaper = tree {
        cmd.env("RECIPES_CGROUP", "off");
    }
    cmd
}

/// A program whose main thread calls `pthread_exit` while a second thread
/// appends a line to the file `argv[1]` every 20 ms; with a second
/// argument it ignores SIGTERM. `/proc` shows it as a zombie (state `Z`)
/// with two threads, and it runs on.
const HEADLESS_C: &str = r#"
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static const char *path;

static void *beat(void *unused) {
    (void)unused;
    for (;;) {
        FILE *f = fopen(path, "a");
        if (f) {
            fputs("beat\n", f);
            fclose(f);
        }
        usleep(20000);
    }
    return NULL;
}

int main(int argc, char **argv) {
    path = argv[1];
    if (argc > 2) {
        signal(SIGTERM, SIG_IGN);
    }
    pthread_t t;
    pthread_create(&t, NULL, beat, NULL);
    pthread_exit(NULL);
}
"#;

/// [`HEADLESS_C`] compiled into `scene` with the machine's `cc`.
fn headless(scene: &Scene) -> PathBuf {
    let src = scene.file("headless.c");
    let bin = scene.file("headless");
    fs::write(&src, HEADLESS_C).unwrap();
    let out = Command::new("cc")
        .arg("-pthread")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("these tests need a C compiler: cc");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// Field 3 (state) and 20 (threads) of `/proc/PID/stat`.
fn state_and_threads(pid: u32) -> Option<(char, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some((
        fields.first()?.chars().next()?,
        fields.get(17)?.parse().ok()?,
    ))
}

/// `recipes lock` (with `extra`) under `RECIPES_CGROUP=off` running
/// [`headless`] (ignoring SIGTERM if `deaf`), once its main thread has
/// ended and its other thread writes: the holder, the ready line's words
/// and the headless program's pid (with a guard that kills it and the
/// holder if the test fails).
fn holder_of_headless(
    scene: &Scene,
    extra: &[&str],
    deaf: bool,
) -> (std::process::Child, Vec<String>, u32, KillOnPanic) {
    let bin = headless(scene);
    let beats = scene.file("beats");
    let base = with_tree(Tree::Subreaper);
    let mut sub = vec!["lock", scene.name.as_str()];
    sub.extend_from_slice(extra);
    let (holder, info) = start_holder(
        base,
        &sub,
        scene,
        &format!(
            "exec {} {}{}",
            bin.display(),
            beats.display(),
            if deaf { " deaf" } else { "" }
        ),
    );
    let pid: u32 = info[0].parse().unwrap();
    // The program first, so its keeper can reap it and go.
    let guard = KillOnPanic(vec![pid, holder.id()]);
    wait_until("the headless program beats", RUN_BOUND, || {
        fs::read_to_string(&beats).is_ok_and(|s| s.contains('\n'))
    });
    wait_until(
        "the program's main thread ended, its other thread runs",
        RUN_BOUND,
        || state_and_threads(pid).is_some_and(|(state, threads)| state == 'Z' && threads > 1),
    );
    (holder, info, pid, guard)
}

/// Once `recipes` exited, its keeper has reaped the whole tree: no
/// `/proc` entry is left for `pid`.
fn assert_reaped(pid: u32) {
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the headless program (pid {pid}) outlived recipes: {:?}",
        state_and_threads(pid)
    );
}

/// SIGTERM to `recipes` (subreaper mode) reaches a CMD whose main thread
/// ended: it dies, and `recipes` exits 143. Before the fix the `/proc`
/// walk took it for a zombie and never signalled it; `recipes` waited for
/// ever while it wrote on.
#[test]
fn fault_forwarded_sigterm_reaches_a_process_whose_main_thread_ended_subreaper_zk() {
    let scene = Scene::new("headless-term");
    let (mut holder, _, pid, _guard) = holder_of_headless(&scene, &[], false);
    signal(&holder, libc::SIGTERM);
    let status = wait_exit(&mut holder);
    assert_reaped(pid);
    let stderr = stderr_of(&mut holder);
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{stderr}");
}

/// The lease is lost (the holder's node deleted) while CMD, whose main
/// thread ended, ignores SIGTERM: the keeper's SIGKILL reaches it,
/// `recipes` exits 76 with nothing left. Before the fix the keeper never
/// signalled it and waited for it for ever.
#[test]
fn fault_a_loss_kills_a_process_whose_main_thread_ended_subreaper_zk() {
    let scene = Scene::new("headless-loss");
    let (mut holder, info, pid, _guard) = holder_of_headless(&scene, &["--grace", "1s"], true);
    Store::Zk.delete(&info[1]);
    let status = wait_exit(&mut holder);
    assert_reaped(pid);
    let stderr = stderr_of(&mut holder);
    assert_eq!(status.code(), Some(76), "{stderr}");
    assert!(stderr.contains("sending SIGKILL"), "{stderr}");
}

/// `base` with the subcommand `sub` running the shell code `script` as
/// CMD, its stderr written to the file `stderr` of `scene` (read while it
/// runs).
fn spawn_logged(mut base: Command, sub: &[&str], scene: &Scene, script: &str) -> Child {
    let log = fs::File::create(scene.file("stderr")).unwrap();
    base.args(sub)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// The keeper: the child of `recipes` (pid `parent`) whose first argument
/// is `--recipes-internal-keeper`.
fn keeper_of(parent: u32) -> Option<u32> {
    fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|&pid| {
            integration::process_tree::parent_of(pid) == Some(parent)
                && fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    c.split(|&b| b == 0).nth(1) == Some(b"--recipes-internal-keeper")
                })
        })
}

/// CMD starts a writer that calls `setsid` and ignores SIGTERM, then (once
/// the writer's trap is set) exits 0; `recipes` (grace 300 s) stops what CMD left running, and meanwhile
/// CMD's keeper alone is SIGKILLed. `recipes` kills the writer itself,
/// exits 71, and the writer is gone by then. Before the fix it took the
/// keeper's death for the tree's end: it released and exited 0 while the
/// writer ran on.
fn fault_a_keeper_killed_while_stopping_leaves_nothing(tree: Tree) {
    let scene = Scene::new("keeper-killed-stopping");
    let writer_pid = scene.file("writer");
    let script = format!(
        "setsid sh -c 'trap \"\" TERM; echo $$ > {p}.tmp && mv {p}.tmp {p}; \
         while :; do date +%s.%N >> {w}; sleep 0.05; done' & \
         while [ ! -e {p} ]; do sleep 0.01; done; exit 0",
        p = writer_pid.display(),
        w = scene.file("w").display()
    );
    let mut holder = spawn_logged(
        with_tree(tree),
        &["lock", &scene.name, "--grace", "300s"],
        &scene,
        &script,
    );
    let writer: u32 = read_when_written(&writer_pid).trim().parse().unwrap();
    let _guard = KillOnPanic(vec![writer, holder.id()]);
    let stderr = scene.file("stderr");
    wait_until("recipes stops what CMD left running", RUN_BOUND, || {
        fs::read_to_string(&stderr).is_ok_and(|s| s.contains("left processes running"))
    });
    let keeper = keeper_of(holder.id()).expect("the keeper runs while the writer does");
    // SAFETY: kill has no memory preconditions.
    unsafe {
        libc::kill(keeper as libc::pid_t, libc::SIGKILL);
    }
    let status = wait_exit(&mut holder);
    assert!(
        process_gone(writer),
        "CMD's writer (pid {writer}) outlived its killed keeper and recipes"
    );
    let stderr = fs::read_to_string(&stderr).unwrap();
    assert_eq!(status.code(), Some(71), "{stderr}");
}

#[test]
fn fault_a_keeper_killed_while_stopping_leaves_nothing_zk() {
    fault_a_keeper_killed_while_stopping_leaves_nothing(Tree::Cgroup);
}

#[test]
fn fault_a_keeper_killed_while_stopping_leaves_nothing_subreaper_zk() {
    fault_a_keeper_killed_while_stopping_leaves_nothing(Tree::Subreaper);
}

/// CMD's exit and the loss of the lease, seen at once: `recipes` is
/// stopped (SIGSTOP) while CMD runs; CMD exits 0 meanwhile, the store
/// expires the session and drops the holder; `recipes` is continued. Its
/// exit is 76, never CMD's 0 (which says CMD ran to its end under the
/// lock). Before the fix `recipes` picked either event: 0 about as often
/// as 76.
fn fault_cmds_exit_and_the_loss_seen_together_exit_76(store: Store) {
    let scene = Scene::new("exit-and-loss");
    let go = scene.file("go");
    let (mut holder, info) = start_holder(
        with_store(store, "3s"),
        &["lock", &scene.name],
        &scene,
        &format!(
            "while [ ! -e {} ]; do sleep 0.02; done; exit 0",
            go.display()
        ),
    );
    let cmd: u32 = info[0].parse().unwrap();
    let _guard = KillOnPanic(vec![cmd, holder.id()]);
    signal(&holder, libc::SIGSTOP);
    fs::write(&go, "").unwrap();
    wait_until("CMD exited (the keeper reaped it)", RUN_BOUND, || {
        !Path::new(&format!("/proc/{cmd}")).exists()
    });
    store.wait_gone(&info[1]);
    signal(&holder, libc::SIGCONT);
    let status = wait_exit(&mut holder);
    let stderr = stderr_of(&mut holder);
    assert_eq!(status.code(), Some(76), "{stderr}");
}

#[test]
fn fault_cmds_exit_and_the_loss_seen_together_exit_76_zk() {
    fault_cmds_exit_and_the_loss_seen_together_exit_76(Store::Zk);
}

#[test]
fn fault_cmds_exit_and_the_loss_seen_together_exit_76_etcd() {
    fault_cmds_exit_and_the_loss_seen_together_exit_76(Store::Etcd);
}

/// A pipe whose read end is closed: a write to the other end fails with
/// EPIPE (the test harness, like Rust, ignores SIGPIPE).
fn unread_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds were just made and are ours alone.
    let (read, write) = unsafe {
        use std::os::fd::FromRawFd as _;
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    drop(read);
    Stdio::from(write)
}

/// `recipes` whose stderr nobody reads (`2>&1 | true` after `true` has
/// gone): CMD exits 0 leaving a child that ignores SIGTERM, and the
/// message saying it is stopped cannot be written. `recipes` still stops
/// the child (grace 1 s, then SIGKILL) and exits 0, CMD's status. Before
/// the fix the message panicked: exit 101, the lock's guard dropped as it
/// unwound, before the keeper had killed the child.
#[test]
fn fault_an_unwritable_stderr_does_not_stop_recipes_zk() {
    let scene = Scene::new("stderr-gone");
    let child_pid = scene.file("child");
    let script = format!(
        "(trap '' TERM; exec sleep 30) & echo $! > {p}.tmp && mv {p}.tmp {p}; exit 0",
        p = child_pid.display()
    );
    let mut holder = with_store(Store::Zk, "5s")
        .args([
            "lock",
            &scene.name,
            "--grace",
            "1s",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdout(Stdio::null())
        .stderr(unread_pipe())
        .spawn()
        .unwrap();
    let child: u32 = read_when_written(&child_pid).trim().parse().unwrap();
    let _guard = KillOnPanic(vec![child, holder.id()]);
    let status = wait_exit(&mut holder);
    assert!(
        process_gone(child),
        "CMD's child (pid {child}) outlived recipes"
    );
    assert_eq!(status.code(), Some(0), "recipes: {status:?}");
}
