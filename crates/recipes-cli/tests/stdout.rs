//! A stdout that cannot be written — a closed pipe (`| head -0`: EPIPE,
//! Rust ignores SIGPIPE) or a full disk (`> /dev/full`: ENOSPC) — ends
//! every command that prints with exit 74 and a message on stderr, never a
//! panic; a watch ends too instead of printing into nothing for ever.

mod common;

use std::fs::OpenOptions;
use std::process::{Child, Stdio};

use common::*;

/// What stdout is: a full disk, or a pipe whose reader is gone.
fn sinks() -> [(&'static str, Stdio); 2] {
    let full = OpenOptions::new().write(true).open("/dev/full").unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    [("/dev/full", full.into()), ("a closed pipe", writer.into())]
}

fn spawn(args: &[String], stdout: Stdio) -> Child {
    recipes()
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `recipes ARGS` with each sink as stdout exits 74, says why, and does
/// not panic.
fn fails_cleanly(args: &[String]) {
    for (sink, stdout) in sinks() {
        let mut child = spawn(args, stdout);
        let _guard = KillOnPanic(vec![child.id()]);
        let status = wait_exit(&mut child);
        let stderr = stderr_of(&mut child);
        assert_eq!(status.code(), Some(74), "{args:?} into {sink}: {stderr}");
        assert!(
            stderr.contains("cannot write the output to stdout"),
            "{args:?} into {sink}: {stderr}"
        );
        assert!(
            !stderr.contains("panicked"),
            "{args:?} into {sink}: {stderr}"
        );
    }
}

fn on_store(store: Store, args: &[&str]) -> Vec<String> {
    let mut all = store.flag();
    all.extend(args.iter().map(|a| (*a).to_owned()));
    all
}

fn plain(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

#[test]
fn stdout_unwritable_help_and_version() {
    fails_cleanly(&plain(&["--help"]));
    fails_cleanly(&plain(&["status", "--help"]));
    fails_cleanly(&plain(&["--version"]));
}

#[test]
fn stdout_unwritable_completions_and_man() {
    fails_cleanly(&plain(&["completions", "bash"]));
    fails_cleanly(&plain(&["man"]));
}

#[test]
fn stdout_unwritable_status() {
    let scene = Scene::new("stdout-status");
    fails_cleanly(&on_store(Store::Etcd, &["status", &scene.name]));
    fails_cleanly(&on_store(Store::Etcd, &["status", &scene.name, "--json"]));
}

#[test]
fn stdout_unwritable_status_watch() {
    let scene = Scene::new("stdout-status-watch");
    fails_cleanly(&on_store(
        Store::Etcd,
        &["status", &scene.name, "--watch", "--json"],
    ));
}

#[test]
fn stdout_unwritable_count() {
    let scene = Scene::new("stdout-count");
    fails_cleanly(&on_store(Store::Etcd, &["count", "get", &scene.name]));
    fails_cleanly(&on_store(Store::Etcd, &["count", "add", &scene.name, "2"]));
    // The add itself was made: only its output was lost.
    assert_eq!(stdout_ok(Store::Etcd, &["count", "get", &scene.name]), "4");
}

#[test]
fn stdout_unwritable_members() {
    let scene = Scene::new("stdout-members");
    fails_cleanly(&on_store(Store::Etcd, &["members", &scene.name, "--json"]));
    fails_cleanly(&on_store(
        Store::Etcd,
        &["members", &scene.name, "--json", "--watch"],
    ));
}

#[test]
fn stdout_unwritable_doctor() {
    let scene = Scene::new("stdout-doctor");
    let prefix = format!("{}/", scene.name);
    fails_cleanly(&on_store(Store::Etcd, &["doctor", "--prefix", &prefix]));
}
