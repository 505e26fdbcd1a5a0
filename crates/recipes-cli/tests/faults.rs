//! `recipes` under faults (tests named `fault_*` pause, partition or kill
//! the `recipes` process, never the shared servers): a lost lease kills CMD
//! (exit 76 or the override), SIGKILL of `recipes` kills CMD, and a
//! partitioned holder's CMD is stopped before anyone else can hold NAME.

mod common;

use std::fs;
use std::process::Child;

use common::*;
use integration::{wait_until, Proxy};

/// SIGSTOP `recipes` past its TTL; once the store has dropped its holder
/// node/key, SIGCONT: CMD is killed and `recipes` exits 76 (or the
/// override).
fn fault_lease_lost_kills_cmd(store: Store, extra: &[&str], expect: i32) {
    let scene = Scene::new("lost");
    let (holder, info) = hold(store, "2s", &scene, extra);
    paused_past_the_lease_kills_cmd(store, holder, &info, expect);
}

/// SIGSTOP the `recipes` `holder` (its CMD wrote `info`: pid, holder) until
/// the store dropped its holder, SIGCONT: CMD is killed, `recipes` exits
/// `expect` saying the lease was lost.
fn paused_past_the_lease_kills_cmd(store: Store, mut holder: Child, info: &[String], expect: i32) {
    let cmd_pid: u32 = info[0].parse().unwrap();
    signal(&holder, libc::SIGSTOP);
    store.wait_gone(&info[1]);
    signal(&holder, libc::SIGCONT);
    let status = wait_exit(&mut holder);
    let stderr = stderr_of(&mut holder);
    assert_eq!(status.code(), Some(expect), "{stderr}");
    assert!(stderr.contains("lease lost"), "{stderr}");
    assert!(process_gone(cmd_pid), "CMD still runs after the loss");
}

#[test]
fn fault_lease_lost_kills_cmd_zk() {
    fault_lease_lost_kills_cmd(Store::Zk, &[], 76);
}

#[test]
fn fault_lease_lost_kills_cmd_etcd() {
    fault_lease_lost_kills_cmd(Store::Etcd, &[], 76);
}

#[test]
fn fault_lease_lost_kills_cmd_redis() {
    fault_lease_lost_kills_cmd(Store::Redis, &[], 76);
}

#[test]
fn fault_lease_lost_exit_code_override_zk() {
    fault_lease_lost_kills_cmd(Store::Zk, &["--lost-exit-code", "42"], 42);
}

/// As [`fault_lease_lost_kills_cmd`], for `recipes lock` over a read lock
/// (`--read NAME`) or a multi-lock of two names: the lost lease (one
/// session, so every part of a multi-lock goes; the first name's holder
/// is waited for) kills CMD and `recipes` exits 76.
fn fault_lease_lost_kills_cmd_of(store: Store, multi: bool) {
    let scene = Scene::new(if multi { "lost-multi" } else { "lost-read" });
    let second = format!("{}-second", scene.name);
    let sub = match multi {
        true => vec!["lock", scene.name.as_str(), second.as_str()],
        false => vec!["lock", "--read", scene.name.as_str()],
    };
    let (holder, info) = start_holder(with_store(store, "2s"), &sub, &scene, "exec sleep 30");
    paused_past_the_lease_kills_cmd(store, holder, &info, 76);
}

#[test]
fn fault_lease_lost_kills_cmd_of_a_reader_zk() {
    fault_lease_lost_kills_cmd_of(Store::Zk, false);
}

#[test]
fn fault_lease_lost_kills_cmd_of_a_multi_lock_etcd() {
    fault_lease_lost_kills_cmd_of(Store::Etcd, true);
}

fn fault_sigkill_of_recipes_kills_cmd(store: Store) {
    let scene = Scene::new("sigkill");
    let (mut holder, info) = hold(store, "5s", &scene, &[]);
    let cmd_pid: u32 = info[0].parse().unwrap();
    assert!(!process_gone(cmd_pid));
    signal(&holder, libc::SIGKILL);
    holder.wait().unwrap();
    wait_until("CMD is gone after recipes was killed", RUN_BOUND, || {
        process_gone(cmd_pid)
    });
}

#[test]
fn fault_sigkill_of_recipes_kills_cmd_zk() {
    fault_sigkill_of_recipes_kills_cmd(Store::Zk);
}

#[test]
fn fault_sigkill_of_recipes_kills_cmd_etcd() {
    fault_sigkill_of_recipes_kills_cmd(Store::Etcd);
}

#[test]
fn fault_sigkill_of_recipes_kills_cmd_redis() {
    fault_sigkill_of_recipes_kills_cmd(Store::Redis);
}

/// A holder cut off from the store (its traffic black-holed: no reply and
/// no error tells it the lease ended) runs a CMD whose every process
/// ignores SIGTERM, with a grace far longer than the TTL. Only the kill
/// before the lease's earliest server-side expiry can stop CMD in time:
/// when another `recipes lock` holds NAME, no process of the first CMD's
/// group may still run.
fn fault_partitioned_holder_is_killed_before_takeover(store: Store) {
    let scene = Scene::new("partition");
    let proxy = Proxy::start(store.addr());
    let (mut holder, info) = start_holder(
        through(&proxy, store, "3s"),
        &["lock", &scene.name, "--grace", "300s"],
        &scene,
        // An ignored signal stays ignored across exec: `sleep` ignores it too.
        "trap '' TERM; while :; do sleep 1; done",
    );
    let group = &info[0];
    proxy.blackhole();
    // Runs under the lock once the store gave it away: lists the live
    // (not zombie) processes of the first CMD's process group.
    let survivors = scene.file("survivors");
    let check = format!(
        "for f in /proc/[0-9]*/stat; do \
           set -- $(sed 's/.*) //' \"$f\" 2>/dev/null); \
           if [ \"$1\" != Z ] && [ \"$3\" = {group} ]; then echo \"${{f%/stat}}\"; fi; \
         done > {}",
        survivors.display()
    );
    let taken = code(with_store(store, "3s").args([
        "lock",
        &scene.name,
        "--wait",
        "60s",
        "--",
        "sh",
        "-c",
        &check,
    ]));
    assert_eq!(taken, 0, "the other holder acquires once the lease ended");
    let left = fs::read_to_string(&survivors).unwrap();
    assert!(
        left.is_empty(),
        "the partitioned holder's CMD still ran when another acquired: {left}"
    );
    let status = wait_exit(&mut holder);
    let stderr = stderr_of(&mut holder);
    assert_eq!(status.code(), Some(76), "{stderr}");
    assert!(
        stderr.contains("CMD still running; sending SIGKILL"),
        "{stderr}"
    );
}

/// A cut-off holder whose CMD stops cleanly on SIGTERM gets the chance:
/// SIGTERM comes while the lease is at risk (before it is lost), CMD's
/// handler runs, and no SIGKILL is needed. (TTL 5 s: a 1 s window.)
fn fault_partitioned_holder_gets_sigterm_before_the_kill(store: Store) {
    let scene = Scene::new("partition-term");
    let proxy = Proxy::start(store.addr());
    let clean = scene.file("clean");
    let (mut holder, _) = start_holder(
        through(&proxy, store, "5s"),
        &["lock", &scene.name, "--grace", "300s"],
        &scene,
        &format!(
            "trap 'echo stopped > {}; exit 0' TERM; while :; do sleep 1; done",
            clean.display()
        ),
    );
    proxy.blackhole();
    let status = wait_exit(&mut holder);
    let stderr = stderr_of(&mut holder);
    assert_eq!(status.code(), Some(76), "{stderr}");
    assert!(stderr.contains("lease at risk"), "{stderr}");
    assert!(!stderr.contains("sending SIGKILL"), "{stderr}");
    assert_eq!(fs::read_to_string(&clean).unwrap(), "stopped\n");
}

#[test]
fn fault_partitioned_holder_gets_sigterm_before_the_kill_zk() {
    fault_partitioned_holder_gets_sigterm_before_the_kill(Store::Zk);
}

#[test]
fn fault_partitioned_holder_gets_sigterm_before_the_kill_etcd() {
    fault_partitioned_holder_gets_sigterm_before_the_kill(Store::Etcd);
}

#[test]
fn fault_partitioned_holder_gets_sigterm_before_the_kill_redis() {
    fault_partitioned_holder_gets_sigterm_before_the_kill(Store::Redis);
}

#[test]
fn fault_partitioned_holder_is_killed_before_takeover_zk() {
    fault_partitioned_holder_is_killed_before_takeover(Store::Zk);
}

#[test]
fn fault_partitioned_holder_is_killed_before_takeover_etcd() {
    fault_partitioned_holder_is_killed_before_takeover(Store::Etcd);
}

#[test]
fn fault_partitioned_holder_is_killed_before_takeover_redis() {
    fault_partitioned_holder_is_killed_before_takeover(Store::Redis);
}

#[test]
fn fault_sigkill_of_recipes_kills_cmd_pg() {
    fault_sigkill_of_recipes_kills_cmd(Store::Pg);
}

#[test]
fn fault_partitioned_holder_gets_sigterm_before_the_kill_pg() {
    fault_partitioned_holder_gets_sigterm_before_the_kill(Store::Pg);
}

#[test]
fn fault_partitioned_holder_is_killed_before_takeover_pg() {
    fault_partitioned_holder_is_killed_before_takeover(Store::Pg);
}

#[test]
fn fault_lease_lost_kills_cmd_pg() {
    fault_lease_lost_kills_cmd(Store::Pg, &[], 76);
}

/// Losing one name of a multi-lock (the second name's node deleted by
/// hand) kills CMD, and `recipes` exits 76 saying which name's lease was
/// lost.
#[test]
fn fault_one_lost_name_of_a_multi_lock_kills_cmd_and_is_named_zk() {
    let store = Store::Zk;
    let scene = Scene::new("lost-one");
    let second = format!("{}-second", scene.name);
    let written = scene.file("second");
    let then = format!(
        "echo \"$RECIPES_HOLDER_2\" > {0}.tmp && mv {0}.tmp {0} && exec sleep 30",
        written.display()
    );
    let sub = ["lock", scene.name.as_str(), second.as_str()];
    let (mut holder, _) = start_holder(with_store(store, "10s"), &sub, &scene, &then);
    store.delete(read_when_written(&written).trim());
    assert_eq!(wait_exit(&mut holder).code(), Some(76));
    let stderr = stderr_of(&mut holder);
    assert!(
        stderr.contains(&format!("(the lock on {second})")),
        "{stderr}"
    );
}
