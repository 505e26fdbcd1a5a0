//! How a `recipes` run ends: SIGTERM while waiting leaves nothing in the
//! store; run interactively, CMD gets the terminal and Ctrl-C; a release
//! that fails keeps CMD's status; a TTL the server caps still runs CMD.

mod common;

use std::fs;
use std::io::Write as _;
use std::process::Stdio;

use common::*;
use integration::env::command_without_recipes_env;
use integration::{wait_until, Proxy};

/// SIGTERM to a `recipes` still waiting for NAME: it exits 128+15 without
/// running CMD, and its queued node or key is gone by the time it has
/// exited, long before its 20 s TTL could have removed it (closing the
/// session deletes it at once, even while a campaign waits in the
/// background).
fn sigterm_while_waiting_leaves_nothing_behind(store: Store, sub: &str) {
    let scene = Scene::new("waiting");
    let (mut holder, _) = start_holder(
        with_store(store, "5s"),
        &[sub, &scene.name],
        &scene,
        "exec sleep 30",
    );
    let ran = scene.file("ran");
    let mut waiter = with_store(store, "20s")
        .args([sub, &scene.name, "--", "touch", ran.to_str().unwrap()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = |store: Store| {
        let out = with_store(store, "5s")
            .args(["status", &scene.name, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    wait_until("status shows the waiter", RUN_BOUND, || {
        !status(store).contains("\"waiters\":[]")
    });
    signal(&waiter, libc::SIGTERM);
    assert_eq!(wait_exit(&mut waiter).code(), Some(128 + libc::SIGTERM));
    let after = status(store);
    assert!(
        after.contains("\"waiters\":[]"),
        "the waiter's node or key outlived it: {after}"
    );
    assert!(!ran.exists(), "CMD ran without the {sub}");
    signal(&holder, libc::SIGTERM);
    wait_exit(&mut holder);
}

#[test]
fn sigterm_while_waiting_leaves_nothing_behind_lock_zk() {
    sigterm_while_waiting_leaves_nothing_behind(Store::Zk, "lock");
}

#[test]
fn sigterm_while_waiting_leaves_nothing_behind_elect_zk() {
    sigterm_while_waiting_leaves_nothing_behind(Store::Zk, "elect");
}

#[test]
fn sigterm_while_waiting_leaves_nothing_behind_lock_etcd() {
    sigterm_while_waiting_leaves_nothing_behind(Store::Etcd, "lock");
}

#[test]
fn sigterm_while_waiting_leaves_nothing_behind_lock_redis() {
    sigterm_while_waiting_leaves_nothing_behind(Store::Redis, "lock");
}

#[test]
fn sigterm_while_waiting_leaves_nothing_behind_elect_etcd() {
    sigterm_while_waiting_leaves_nothing_behind(Store::Etcd, "elect");
}

#[test]
fn sigterm_while_waiting_leaves_nothing_behind_elect_redis() {
    sigterm_while_waiting_leaves_nothing_behind(Store::Redis, "elect");
}

/// `pgrp tpgid` of the shell that runs this line: its process group and the
/// foreground process group of its terminal (fields 3 and 6 after the
/// command name in /proc/PID/stat).
const GROUP_AND_FOREGROUND: &str = "set -- $(sed 's/.*) //' /proc/$$/stat); echo \"$3 $6\"";

/// Two numbers written as `a b`, equal.
fn same_pair(line: &str) -> bool {
    let v: Vec<&str> = line.split_whitespace().collect();
    v.len() == 2 && v[0] == v[1]
}

/// Run interactively (script(1) gives `recipes` a terminal it is the
/// foreground of), CMD gets the terminal while it runs: it is the
/// foreground process group, it reads what is typed, and Ctrl-C reaches it
/// (CMD dies of SIGINT, `recipes` exits 130 and releases). Then `recipes`
/// has given the terminal back to the shell that started it.
#[test]
fn cmd_gets_the_terminal_when_run_interactively_zk() {
    let scene = Scene::new("terminal");
    let f = |name: &str| scene.file(name).display().to_string();
    let cmd = format!(
        "{GROUP_AND_FOREGROUND} > {group}.tmp && mv {group}.tmp {group}\n\
         read line && echo \"$line\" > {line}\n\
         exec sleep 30\n",
        group = f("cmd-group"),
        line = f("line"),
    );
    let zk = Store::Zk.flag();
    let (backend, hosts) = (&zk[0], &zk[1]);
    let run = format!(
        "'{BIN}' {backend} {hosts} lock {name} -- sh {cmd_sh}\n\
         echo $? > {exit}\n\
         {GROUP_AND_FOREGROUND} > {after}\n",
        name = scene.name,
        cmd_sh = f("cmd.sh"),
        exit = f("exit"),
        after = f("after"),
    );
    fs::write(scene.file("cmd.sh"), cmd).unwrap();
    fs::write(scene.file("run.sh"), run).unwrap();
    let mut terminal = command_without_recipes_env("script")
        .args([
            "-q",
            "-e",
            "-c",
            &format!("sh {}", f("run.sh")),
            "/dev/null",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start script(1) (package bsdutils)");
    let group = read_when_written(&scene.file("cmd-group"));
    assert!(
        same_pair(&group),
        "CMD is not the terminal's foreground group (pgrp tpgid: {group})"
    );
    let mut keys = terminal.stdin.take().unwrap();
    keys.write_all(b"typed\n").unwrap();
    keys.flush().unwrap();
    // A background group that reads its terminal is stopped (SIGTTIN).
    assert_eq!(read_when_written(&scene.file("line")), "typed\n");
    keys.write_all(b"\x03").unwrap(); // Ctrl-C
    keys.flush().unwrap();
    assert_eq!(
        read_when_written(&scene.file("exit")),
        format!("{}\n", 128 + libc::SIGINT)
    );
    let after = read_when_written(&scene.file("after"));
    assert!(
        same_pair(&after),
        "the shell did not get the terminal back (pgrp tpgid: {after})"
    );
    drop(keys);
    let status = wait_exit(&mut terminal);
    assert!(status.success(), "script(1): {status:?}");
}

/// CMD ends while the store cannot be reached, so the release fails: CMD's
/// own status stands, and a warning says the lease ends by itself.
fn release_failure_keeps_cmds_status(store: Store) {
    let scene = Scene::new("release-fails");
    let proxy = Proxy::start(store.addr());
    let go = scene.file("go");
    let (mut holder, _) = start_holder(
        through(&proxy, store, "3s"),
        &["lock", &scene.name],
        &scene,
        &format!(
            "while [ ! -e {} ]; do sleep 0.05; done; exit 3",
            go.display()
        ),
    );
    proxy.blackhole();
    fs::write(&go, "").unwrap();
    let status = wait_exit(&mut holder);
    let stderr = stderr_of(&mut holder);
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("warning: release failed"), "{stderr}");
}

#[test]
fn release_failure_keeps_cmds_status_zk() {
    release_failure_keeps_cmds_status(Store::Zk);
}

#[test]
fn release_failure_keeps_cmds_status_etcd() {
    release_failure_keeps_cmds_status(Store::Etcd);
}

#[test]
fn release_failure_keeps_cmds_status_redis() {
    release_failure_keeps_cmds_status(Store::Redis);
}

/// Asking for more than the server grants (the shared ZooKeeper caps
/// sessions at 20 s) is refused at connect (issue 27: a holder would lose
/// its lock sooner than it planned), with exit 64, saying which setting to
/// change, and CMD never runs.
#[test]
fn a_ttl_the_server_caps_is_refused_before_cmd_runs_zk() {
    let scene = Scene::new("capped");
    let out = scene.file("fence");
    let script = format!("echo \"$RECIPES_FENCE\" > {}", out.display());
    let mut cmd = with_store(Store::Zk, "5m");
    cmd.args([
        "lock",
        &scene.name,
        "--grace",
        "90s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let (status, stderr) = run(&mut cmd);
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("maxSessionTimeout"), "{stderr}");
    assert!(!out.exists(), "CMD ran: {stderr}");
}

#[test]
fn sigterm_while_waiting_leaves_nothing_behind_lock_pg() {
    sigterm_while_waiting_leaves_nothing_behind(Store::Pg, "lock");
}
