//! `recipes members NAME [--json] [--watch]` and `recipes join NAME -- CMD`:
//! a member while CMD runs and gone after, its data in the view, a taken
//! id refused with the usage status, a watch that prints each change.

mod common;

use std::process::Stdio;

use common::*;
use integration::wait_for;

fn group_commands(store: Store) {
    let scene = Scene::new("group");
    let name = scene.name.as_str();
    let empty = stdout_ok(store, &["members", name, "--json"]);
    assert!(empty.starts_with(r#"{"members":[],"version":"#), "{empty}");
    assert_eq!(stdout_ok(store, &["members", name]), "");

    let watch_out = scene.file("watch");
    let mut watcher = recipes()
        .args(store.flag())
        .args(["members", name, "--watch", "--json"])
        .stdout(std::fs::File::create(&watch_out).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the watch printed the empty group", RUN_BOUND, || {
        let printed = std::fs::read_to_string(&watch_out).unwrap_or_default();
        printed.contains(r#""members":[]"#).then_some(())
    });

    let join = ["join", name, "--id", "a", "--data", "addr a"];
    let (mut joined, wrote) = start_holder(with_store(store, "5s"), &join, &scene, "exec sleep 30");
    assert_eq!(wrote[1], format!("{name}/a"), "RECIPES_HOLDER: {wrote:?}");
    assert_eq!(stdout_ok(store, &["members", name]), "a addr a");
    let json = stdout_ok(store, &["members", "--json", name]);
    assert!(
        json.starts_with(r#"{"members":[{"id":"a","data":"addr a"}],"version":"#),
        "{json}"
    );

    // The id is taken: refused with the usage status, CMD never runs.
    let (status, stderr) =
        run(with_store(store, "5s").args(["--id", "a", "join", name, "--", "sh", "-c", "exit 3"]));
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("already in the group"), "{stderr}");
    assert_eq!(
        stdout_ok(store, &["members", name]),
        "a addr a",
        "nothing changed"
    );

    // CMD's end ends the membership.
    signal(&joined, libc::SIGTERM);
    wait_exit(&mut joined);
    assert_eq!(stdout_ok(store, &["members", name]), "");
    wait_for(
        "the watch printed the join and the leave",
        RUN_BOUND,
        || {
            let printed = std::fs::read_to_string(&watch_out).unwrap_or_default();
            let lines: Vec<&str> = printed.lines().collect();
            let (with_a, empty_after) = (
                lines
                    .iter()
                    .position(|l| l.contains(r#"{"id":"a","data":"addr a"}"#)),
                lines.iter().rposition(|l| l.contains(r#""members":[]"#)),
            );
            matches!((with_a, empty_after), (Some(a), Some(e)) if e > a).then_some(())
        },
    );
    signal(&watcher, libc::SIGTERM);
    let status = wait_exit(&mut watcher);
    assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut watcher));

    // Bad input: an empty id, a name that holds a lock.
    let (status, stderr) = run(recipes()
        .args(store.flag())
        .args(["--id", "", "join", name, "--", "true"]));
    assert_eq!(status.code(), Some(64), "{stderr}");
    let locked = Scene::new("group-lock");
    let (mut holder, _) = hold(store, "5s", &locked, &[]);
    let (status, stderr) = run(recipes().args(store.flag()).args(["members", &locked.name]));
    assert_eq!(status.code(), Some(64), "{stderr}");
    signal(&holder, libc::SIGTERM);
    wait_exit(&mut holder);
}

#[test]
fn group_commands_zk() {
    group_commands(Store::Zk);
}

#[test]
fn group_commands_etcd() {
    group_commands(Store::Etcd);
}

#[test]
fn group_commands_pg() {
    group_commands(Store::Pg);
}

#[test]
fn group_commands_redis() {
    group_commands(Store::Redis);
}
