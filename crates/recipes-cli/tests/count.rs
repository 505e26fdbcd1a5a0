//! `recipes count get|set|add NAME`: the shared counter from the shell, a
//! negative delta as written, `--json`, and a name that holds a lock
//! refused with the usage status.

mod common;

use common::*;

fn count_commands(store: Store) {
    let scene = Scene::new("count");
    let name = scene.name.as_str();
    assert_eq!(stdout_ok(store, &["count", "get", name]), "0");
    assert_eq!(
        stdout_ok(store, &["count", "get", name, "--json"]),
        r#"{"value":0,"version":0}"#
    );
    assert_eq!(
        stdout_ok(store, &["count", "set", name, "10"]),
        "1",
        "the version"
    );
    assert_eq!(stdout_ok(store, &["count", "add", name, "-3"]), "7");
    assert_eq!(stdout_ok(store, &["count", "add", name, "5"]), "12");
    assert_eq!(
        stdout_ok(store, &["count", "get", "--json", name]),
        r#"{"value":12,"version":3}"#
    );
    // Past the 32-bit range: refused, the counter unchanged.
    let (status, stderr) =
        run(recipes()
            .args(store.flag())
            .args(["count", "add", name, "2147483647"]));
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("64-bit"), "{stderr}");
    assert_eq!(stdout_ok(store, &["count", "get", name]), "12");
    // A name that holds a lock is not a counter.
    let locked = Scene::new("count-lock");
    let (holder, _) = hold(store, "5s", &locked, &[]);
    let (status, stderr) = run(recipes()
        .args(store.flag())
        .args(["count", "get", &locked.name]));
    assert_eq!(status.code(), Some(64), "{stderr}");
    signal(&holder, libc::SIGTERM);
    let mut holder = holder;
    wait_exit(&mut holder);
}

#[test]
fn count_commands_zk() {
    count_commands(Store::Zk);
}

#[test]
fn count_commands_etcd() {
    count_commands(Store::Etcd);
}

#[test]
fn count_commands_pg() {
    count_commands(Store::Pg);
}

#[test]
fn count_commands_redis() {
    count_commands(Store::Redis);
}
