//! `recipes lock --read / --write NAME` and several names at once: readers
//! share, a writer excludes them, a multi-lock gives CMD each name's fence,
//! the exit codes are the mutex's, and `status` shows readers and writers
//! in queue order.

mod common;

use std::process::{Child, Stdio};

use common::*;
use integration::wait_for;

fn stop(mut child: Child) {
    signal(&child, libc::SIGTERM);
    wait_exit(&mut child);
}

/// Two `--read` holders at once; a `--write --no-wait` beside them exits
/// 75; `status` lists both readers as holders; the writer gets in once
/// they are gone.
fn readers_share_and_a_writer_waits(store: Store) {
    let scene = Scene::new("rw");
    let first = Scene::new("rw-first");
    let (r1, line1) = start_holder(
        with_store(store, "5s"),
        &["lock", "--read", &scene.name],
        &first,
        "exec sleep 30",
    );
    let second = Scene::new("rw-second");
    let (r2, line2) = start_holder(
        with_store(store, "5s"),
        &["lock", "--read", &scene.name],
        &second,
        "exec sleep 30",
    );
    assert_eq!(line1.len(), 3, "pid holder fence: {line1:?}");
    assert_eq!(line2.len(), 3, "pid holder fence: {line2:?}");
    let conflict = code(with_store(store, "5s").args([
        "lock",
        "--write",
        &scene.name,
        "--no-wait",
        "--",
        "true",
    ]));
    assert_eq!(conflict, 75, "a writer beside two readers");
    // A writer, then a reader, queue behind the two readers: `status`
    // lists them in queue order, the reader behind the writer waiting.
    let queue = |side: &str| {
        with_store(store, "5s")
            .args(["lock", side, &scene.name, "--", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let roles = || -> Vec<String> {
        let text = stdout_ok(store, &["status", &scene.name]);
        let words = text
            .lines()
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>());
        let entries = words.filter(|w| matches!(w.first(), Some(&"holder" | &"waiter")));
        entries.map(|w| w.join(" ")).collect()
    };
    let mut writer = queue("--write");
    let _guard = KillOnPanic(vec![r1.id(), r2.id(), writer.id()]);
    wait_for("the writer queues", RUN_BOUND, || {
        (roles().len() == 3).then_some(())
    });
    let mut reader = queue("--read");
    let _guard2 = KillOnPanic(vec![reader.id()]);
    wait_for("the reader queues", RUN_BOUND, || {
        (roles().len() == 4).then_some(())
    });
    assert_eq!(
        roles(),
        [
            "holder reader",
            "holder reader",
            "waiter writer",
            "waiter reader"
        ],
        "status in queue order"
    );
    stop(r1);
    stop(r2);
    for child in [&mut writer, &mut reader] {
        let status = wait_exit(child);
        assert_eq!(status.code(), Some(0), "{}", stderr_of(child));
    }
    let (status, stderr) = run(with_store(store, "5s").args([
        "lock",
        "--write",
        &scene.name,
        "--no-wait",
        "--",
        "true",
    ]));
    assert_eq!(
        status.code(),
        Some(0),
        "the writer once the readers left: {stderr}"
    );
}

#[test]
fn readers_share_and_a_writer_waits_zk() {
    readers_share_and_a_writer_waits(Store::Zk);
}

#[test]
fn readers_share_and_a_writer_waits_etcd() {
    readers_share_and_a_writer_waits(Store::Etcd);
}

#[test]
fn readers_share_and_a_writer_waits_pg() {
    readers_share_and_a_writer_waits(Store::Pg);
}

#[test]
fn readers_share_and_a_writer_waits_pg_session() {
    readers_share_and_a_writer_waits(Store::PgSession);
}

#[test]
fn readers_share_and_a_writer_waits_redis() {
    readers_share_and_a_writer_waits(Store::Redis);
}

/// Several names: CMD gets RECIPES_LOCKS and each name's fence in
/// command-line order, RECIPES_FENCE the first's; one of them held
/// elsewhere makes `--no-wait` exit 75 and leaves the others free.
fn several_names_give_each_fence(store: Store) {
    let scene = Scene::new("multi");
    let (b, a, c) = (
        format!("{}-b", scene.name),
        format!("{}-a", scene.name),
        format!("{}-c", scene.name),
    );
    let out = scene.file("env");
    let script = format!(
        "echo \"$RECIPES_LOCKS $RECIPES_NAME $RECIPES_FENCE $RECIPES_NAME_1 $RECIPES_FENCE_1 \
         $RECIPES_NAME_2 $RECIPES_FENCE_2 $RECIPES_NAME_3 $RECIPES_FENCE_3\" > {}",
        out.display()
    );
    let (status, stderr) = run(with_store(store, "5s").args([
        "lock", &b, "--read", &a, "--write", &c, "--", "sh", "-c", &script,
    ]));
    assert_eq!(status.code(), Some(0), "{stderr}");
    let text = read_when_written(&out);
    let words: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(words.len(), 9, "{text}");
    assert_eq!(words[0], "3", "{text}");
    assert_eq!(
        (words[1], words[3], words[5], words[7]),
        (b.as_str(), b.as_str(), a.as_str(), c.as_str())
    );
    assert_eq!(
        words[2], words[4],
        "RECIPES_FENCE is the first name's: {text}"
    );
    for fence in [words[4], words[6], words[8]] {
        fence
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("a fence: {text}"));
    }
    // One name held elsewhere: nothing is taken, the others stay free.
    // (Each name keeps its recipe: PostgreSQL refuses a mutex on a name
    // that was a read-write lock's.)
    let holder = Scene::new("multi-holder");
    let write_c = ["lock", "--write", c.as_str()];
    let (held, _) = start_holder(with_store(store, "5s"), &write_c, &holder, "exec sleep 30");
    let both = [
        "lock",
        "--read",
        &a,
        "--write",
        &c,
        "--no-wait",
        "--",
        "true",
    ];
    assert_eq!(code(with_store(store, "5s").args(both)), 75);
    let read_a = ["lock", "--read", &a, "--no-wait", "--", "true"];
    let free = code(with_store(store, "5s").args(read_a));
    assert_eq!(free, 0, "the multi-lock gave back the free name");
    stop(held);
}

#[test]
fn several_names_give_each_fence_zk() {
    several_names_give_each_fence(Store::Zk);
}

#[test]
fn several_names_give_each_fence_etcd() {
    several_names_give_each_fence(Store::Etcd);
}

#[test]
fn several_names_give_each_fence_pg() {
    several_names_give_each_fence(Store::Pg);
}

#[test]
fn several_names_give_each_fence_pg_session() {
    several_names_give_each_fence(Store::PgSession);
}

#[test]
fn several_names_give_each_fence_redis() {
    several_names_give_each_fence(Store::Redis);
}

/// A name twice, read and write of one name, no name at all, names that
/// nest: usage errors before connecting (the store given is down: nothing
/// listens on its port).
#[test]
fn bad_lock_lists_are_usage_errors() {
    let thousand: Vec<String> = (0..1000).map(|i| format!("/many/{i}")).collect();
    let mut many = vec!["lock"];
    many.extend(thousand.iter().map(String::as_str));
    for args in [
        &["lock", "/x", "/x"][..],
        &["lock", "--read", "/x", "--write", "/x"],
        &["lock"],
        &["lock", "/x", "/x/y"],
        &many,
    ] {
        let mut cmd = recipes();
        cmd.args(["--redis", "redis://127.0.0.1:1", "--ttl", "5s"]);
        let (status, stderr) = run(cmd.args(args).args(["--", "true"]));
        assert!(
            matches!(status.code(), Some(64)),
            "{args:?}: {status:?} {stderr}"
        );
        assert!(!stderr.is_empty(), "{args:?}: no message");
    }
}

/// A `recipes lock` run by another's CMD gets its own lock's variables,
/// none of the outer multi-lock's (`RECIPES_FENCE_1` would be another
/// lock's fence, and `RECIPES_LOCKS` another count).
#[test]
fn a_nested_lock_inherits_no_outer_multi_lock_variables_zk() {
    let store = Store::Zk;
    let scene = Scene::new("nested");
    let (outer_a, outer_b, inner) = (
        format!("{}-a", scene.name),
        format!("{}-b", scene.name),
        format!("{}-inner", scene.name),
    );
    let out = scene.file("env");
    let inner_cmd = format!(
        "echo \"${{RECIPES_LOCKS:-none}} ${{RECIPES_FENCE_1:-none}} ${{RECIPES_NAME_2:-none}} \
         $RECIPES_NAME\" > {}",
        out.display()
    );
    let nested = format!(
        "{BIN} {} --ttl 5s lock {inner} -- sh -c '{inner_cmd}'",
        store.flag().join(" ")
    );
    let (status, stderr) =
        run(with_store(store, "5s").args(["lock", &outer_a, &outer_b, "--", "sh", "-c", &nested]));
    assert_eq!(status.code(), Some(0), "{stderr}");
    let text = read_when_written(&out);
    assert_eq!(text.trim(), format!("none none none {inner}"), "{text}");
}
