//! `recipes double-barrier NAME --count N -- CMD`: CMD runs only once N
//! members entered; a member alone gives up at `--wait` (exit 75, CMD
//! never run); a member whose leave does not see the others go within
//! `--wait` exits 75; on every store.

mod common;

use std::process::{Child, Stdio};

use common::*;
use integration::wait_until;

fn member(store: Store, scene: &Scene, count: &str, extra: &[&str], cmd: &str) -> Child {
    recipes()
        .args(store.flag())
        .args(["double-barrier", &scene.name, "--count", count])
        .args(extra)
        .args(["--", "sh", "-c", cmd])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn double_barrier_commands(store: Store) {
    let scene = Scene::new("double-barrier");
    // Alone, with a bound: not entered, CMD never runs.
    let alone = scene.file("alone");
    let mut lonely = member(
        store,
        &scene,
        "3",
        &["--wait", "300ms"],
        &format!("touch {}", alone.display()),
    );
    let status = wait_exit(&mut lonely);
    let stderr = stderr_of(&mut lonely);
    assert_eq!(status.code(), Some(75), "{stderr}");
    assert!(!alone.exists(), "CMD ran before the count was reached");

    // Three members: each CMD runs once all three are in; each sees the
    // others' markers only after they all entered, so every CMD writes.
    let mut members: Vec<Child> = (0..3)
        .map(|i| {
            let marker = scene.file(&format!("in-{i}"));
            member(
                store,
                &scene,
                "3",
                &[],
                &format!("touch {}", marker.display()),
            )
        })
        .collect();
    for (i, m) in members.iter_mut().enumerate() {
        let status = wait_exit(m);
        let stderr = stderr_of(m);
        assert_eq!(status.code(), Some(0), "member {i}: {stderr}");
        assert!(
            scene.file(&format!("in-{i}")).exists(),
            "member {i}'s CMD ran"
        );
    }

    // Two members: one leaves at once but the other's CMD runs on, so the
    // first's leave gives up at --wait (75); the second leaves alone (0).
    let slow_started = scene.file("slow-started");
    let slow_go = scene.file("slow-go");
    let mut quick = member(store, &scene, "2", &["--wait", "1s"], "true");
    let mut slow = member(
        store,
        &scene,
        "2",
        &[],
        &format!(
            "echo started > {}; while [ ! -e {} ]; do sleep 0.05; done",
            slow_started.display(),
            slow_go.display()
        ),
    );
    read_when_written(&slow_started);
    let status = wait_exit(&mut quick);
    let stderr = stderr_of(&mut quick);
    assert_eq!(status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("not every member left"), "{stderr}");
    std::fs::write(&slow_go, "go\n").unwrap();
    let status = wait_exit(&mut slow);
    assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut slow));
}

#[test]
fn double_barrier_commands_zk() {
    double_barrier_commands(Store::Zk);
}

#[test]
fn double_barrier_commands_etcd() {
    double_barrier_commands(Store::Etcd);
}

#[test]
fn double_barrier_commands_pg() {
    double_barrier_commands(Store::Pg);
}

#[test]
fn double_barrier_commands_redis() {
    double_barrier_commands(Store::Redis);
}

/// The processes whose parent is `pid`, zombies included (a child not
/// yet reaped).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// A member whose CMD ended waits in its leave for the other, whose CMD
/// runs on; SIGTERM ends that wait with 143, and what it had in the store
/// is gone: the other's leave then ends at once.
fn leave_ends_on_a_signal(store: Store) {
    let scene = Scene::new("double-barrier-leave-signal");
    let (stay_started, stay_go) = (scene.file("stay-started"), scene.file("stay-go"));
    let mut stay = member(
        store,
        &scene,
        "2",
        &[],
        &format!(
            "echo started > {}; while [ ! -e {} ]; do sleep 0.05; done",
            stay_started.display(),
            stay_go.display()
        ),
    );
    let ran = scene.file("quick-ran");
    let mut quick = member(
        store,
        &scene,
        "2",
        &[],
        &format!("echo ran > {}", ran.display()),
    );
    let _guard = KillOnPanic(vec![stay.id(), quick.id()]);
    read_when_written(&stay_started);
    read_when_written(&ran);
    // CMD's keeper was running when CMD wrote; once it is reaped, CMD's
    // run is over and `recipes` is in its leave (or about to be).
    wait_until("the quick member's keeper is reaped", RUN_BOUND, || {
        children_of(quick.id()).is_empty()
    });
    signal(&quick, libc::SIGTERM);
    let sent = std::time::Instant::now();
    let status = integration::wait_for(
        "the leave ends on SIGTERM",
        std::time::Duration::from_secs(10),
        || quick.try_wait().unwrap(),
    );
    let stderr = stderr_of(&mut quick);
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("SIGTERM"), "{stderr}");
    let took = sent.elapsed();
    std::fs::write(&stay_go, "go\n").unwrap();
    let status = wait_exit(&mut stay);
    assert_eq!(
        status.code(),
        Some(0),
        "the other member left (quick's exit took {took:?}): {}",
        stderr_of(&mut stay)
    );
}

#[test]
fn double_barrier_leave_ends_on_a_signal_zk() {
    leave_ends_on_a_signal(Store::Zk);
}

#[test]
fn double_barrier_leave_ends_on_a_signal_etcd() {
    leave_ends_on_a_signal(Store::Etcd);
}

#[test]
fn double_barrier_leave_ends_on_a_signal_pg() {
    leave_ends_on_a_signal(Store::Pg);
}

#[test]
fn double_barrier_leave_ends_on_a_signal_redis() {
    leave_ends_on_a_signal(Store::Redis);
}

#[test]
fn a_count_of_zero_is_a_usage_error() {
    let scene = Scene::new("double-barrier-zero");
    let (status, stderr) = run(recipes().args(Store::Zk.flag()).args([
        "double-barrier",
        &scene.name,
        "--count",
        "0",
        "--",
        "true",
    ]));
    assert_eq!(status.code(), Some(64), "{stderr}");
}
