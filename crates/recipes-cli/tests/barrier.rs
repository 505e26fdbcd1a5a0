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
