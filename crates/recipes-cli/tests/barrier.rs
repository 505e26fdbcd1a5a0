//! `recipes barrier set|remove|wait NAME`: a barrier never set lets a
//! waiter through at once (as Curator's), a raised one holds it until
//! removed or until `--wait` passes (exit 75), on every store.

mod common;

use std::process::Stdio;

use common::*;

fn barrier(store: Store, args: &[&str]) -> (std::process::ExitStatus, String) {
    run(recipes().args(store.flag()).arg("barrier").args(args))
}

fn barrier_commands(store: Store) {
    let scene = Scene::new("barrier");
    let name = scene.name.as_str();
    let (status, stderr) = barrier(store, &["wait", name]);
    assert_eq!(status.code(), Some(0), "never set: down at once: {stderr}");
    let (status, stderr) = barrier(store, &["set", name]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    let (status, stderr) = barrier(store, &["wait", name, "--wait", "300ms"]);
    assert_eq!(status.code(), Some(75), "still up: {stderr}");
    assert!(stderr.contains("still up"), "{stderr}");

    let mut waiter = recipes()
        .args(store.flag())
        .args(["barrier", "wait", name])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The waiter stays while the barrier is up (a timed look from another
    // process shows it up), then goes on once it is removed.
    let (status, _) = barrier(store, &["wait", name, "--wait", "200ms"]);
    assert_eq!(status.code(), Some(75));
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "the waiter went on early"
    );
    let (status, stderr) = barrier(store, &["remove", name]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(wait_exit(&mut waiter).code(), Some(0));
    let (status, stderr) = barrier(store, &["wait", name]);
    assert_eq!(status.code(), Some(0), "removed: {stderr}");
}

#[test]
fn barrier_commands_zk() {
    barrier_commands(Store::Zk);
}

#[test]
fn barrier_commands_etcd() {
    barrier_commands(Store::Etcd);
}

#[test]
fn barrier_commands_pg() {
    barrier_commands(Store::Pg);
}

#[test]
fn barrier_commands_redis() {
    barrier_commands(Store::Redis);
}

/// A wait on a raised barrier ends at a forwarded signal (Ctrl-C,
/// `timeout`, `systemctl stop`) with 128 + the signal, its session
/// closed. (Signals are blocked for the command's signal thread, whose
/// channel the barrier never read: only SIGKILL ended the wait.)
fn a_barrier_wait_ends_at_sigint(store: Store) {
    let scene = Scene::new("barrier-sigint");
    let name = scene.name.as_str();
    let (status, stderr) = barrier(store, &["set", name]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    let mut waiter = recipes()
        .args(store.flag())
        .args(["barrier", "wait", name])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let guard = KillOnPanic(vec![waiter.id()]);
    // Once the command blocks SIGINT for its signal thread (at start), the
    // signal is its to take, not the default action's.
    let status = format!("/proc/{}/status", waiter.id());
    integration::wait_until("recipes blocks SIGINT", RUN_BOUND, || {
        std::fs::read_to_string(&status).is_ok_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigBlk:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
                .is_some_and(|m| m & (1 << (libc::SIGINT - 1)) != 0)
        })
    });
    signal(&waiter, libc::SIGINT);
    assert_eq!(wait_exit(&mut waiter).code(), Some(130));
    drop(guard);
    let (status, stderr) = barrier(store, &["remove", name]);
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn a_barrier_wait_ends_at_sigint_zk() {
    a_barrier_wait_ends_at_sigint(Store::Zk);
}

#[test]
fn a_barrier_wait_ends_at_sigint_redis() {
    a_barrier_wait_ends_at_sigint(Store::Redis);
}
