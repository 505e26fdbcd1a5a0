//! `recipes` holding NAME: mutual exclusion with increasing fences, a
//! semaphore's permits, leadership running CMD, `status` showing holder and
//! waiter, and exclusion against other clients (an `etcdctl lock`, a
//! Curator holder).

mod common;

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use integration::{scale, wait_for, EtcdServer, ZkServer};

/// Contenders append `start <fence>` / `end <fence>` around a short
/// workload; the log must show no overlap and increasing fences.
fn never_two_at_once(store: Store) {
    let scene = Scene::new("exclusion");
    let log = scene.file("log");
    let script = format!(
        "echo \"start $RECIPES_FENCE\" >> {0}; sleep 0.05; echo \"end $RECIPES_FENCE\" >> {0}",
        log.display()
    );
    const CONTENDERS: usize = 4;
    const ROUNDS: usize = 3;
    let workers: Vec<_> = (0..CONTENDERS)
        .map(|_| {
            let (name, script, store) = (scene.name.clone(), script.clone(), store);
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let (status, stderr) =
                        run(with_store(store, "5s")
                            .args(["lock", &name, "--", "sh", "-c", &script]));
                    assert_eq!(status.code(), Some(0), "{stderr}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let text = fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * CONTENDERS * ROUNDS, "{text}");
    let mut last = 0u64;
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("start ").expect(&text);
        let end = pair[1].strip_prefix("end ").expect(&text);
        assert_eq!(start, end, "overlap:\n{text}");
        let fence: u64 = start.parse().unwrap();
        assert!(fence > last, "fences not increasing:\n{text}");
        last = fence;
    }
}

#[test]
fn never_two_at_once_zk() {
    never_two_at_once(Store::Zk);
}

#[test]
fn never_two_at_once_etcd() {
    never_two_at_once(Store::Etcd);
}

#[test]
fn never_two_at_once_redis() {
    never_two_at_once(Store::Redis);
}

fn semaphore_permits(store: Store) {
    let scene = Scene::new("semaphore");
    let mut holders = Vec::new();
    for i in 0..2 {
        let ready = scene.file(&format!("ready{i}"));
        let script = format!(
            "echo \"${{RECIPES_FENCE:-none}} $RECIPES_PERMIT\" > {0}.tmp && mv {0}.tmp {0} && exec sleep 30",
            ready.display()
        );
        let child = with_store(store, "5s")
            .env("RECIPES_FENCE", "stale")
            .args(["semaphore", &scene.name, "--permits", "2", "--"])
            .args(["sh", "-c", &script])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let line = read_when_written(&ready);
        let mut parts = line.split_whitespace();
        assert_eq!(parts.next(), Some("none"), "a permit's CMD got a fence");
        assert!(parts.next().unwrap().starts_with(&scene.name));
        holders.push(child);
    }
    assert_eq!(
        code(with_store(store, "5s").args([
            "semaphore",
            &scene.name,
            "--permits",
            "2",
            "--no-wait",
            "--",
            "true"
        ])),
        75
    );
    for mut h in holders {
        signal(&h, libc::SIGTERM);
        assert_eq!(wait_exit(&mut h).code(), Some(128 + libc::SIGTERM));
    }
}

#[test]
fn semaphore_permits_zk() {
    semaphore_permits(Store::Zk);
}

#[test]
fn semaphore_permits_etcd() {
    semaphore_permits(Store::Etcd);
}

#[test]
fn semaphore_permits_redis() {
    semaphore_permits(Store::Redis);
}

fn elect_runs_cmd_while_leader(store: Store) {
    let scene = Scene::new("elect");
    let ready = scene.file("ready");
    let script = format!(
        "echo \"$RECIPES_FENCE\" > {0}.tmp && mv {0}.tmp {0} && exec sleep 30",
        ready.display()
    );
    let mut leader = with_store(store, "5s")
        .args([
            "--id",
            "first",
            "elect",
            &scene.name,
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let fence: u64 = read_when_written(&ready).trim().parse().unwrap();
    assert!(fence > 0);
    // --no-wait answers "not leader" as soon as the store shows another
    // leader: no fixed wait for a campaign that cannot win.
    let started = Instant::now();
    let status = code(with_store(store, "5s").args([
        "--id",
        "second",
        "elect",
        &scene.name,
        "--no-wait",
        "--",
        "true",
    ]));
    let took = started.elapsed();
    assert_eq!(status, 75);
    assert!(
        took < scale(Duration::from_secs(1)),
        "--no-wait took {took:?}"
    );
    signal(&leader, libc::SIGTERM);
    assert_eq!(wait_exit(&mut leader).code(), Some(128 + libc::SIGTERM));
    let out = scene.file("second");
    let script = format!("echo \"$RECIPES_FENCE\" > {}", out.display());
    assert_eq!(
        code(with_store(store, "5s").args([
            "--id",
            "second",
            "elect",
            &scene.name,
            "--wait",
            "10s",
            "--",
            "sh",
            "-c",
            &script
        ])),
        0
    );
    let second: u64 = fs::read_to_string(&out).unwrap().trim().parse().unwrap();
    assert!(second > fence, "{second} <= {fence}");
}

#[test]
fn elect_runs_cmd_while_leader_zk() {
    elect_runs_cmd_while_leader(Store::Zk);
}

#[test]
fn elect_runs_cmd_while_leader_etcd() {
    elect_runs_cmd_while_leader(Store::Etcd);
}

#[test]
fn elect_runs_cmd_while_leader_redis() {
    elect_runs_cmd_while_leader(Store::Redis);
}

fn status_shows_holder_and_waiter(store: Store) {
    let scene = Scene::new("status");
    let (mut holder, info) = hold(store, "5s", &scene, &[]);
    let mut waiter = with_store(store, "5s")
        .args(["lock", &scene.name, "--", "true"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let json = wait_for("status shows a waiter", RUN_BOUND, || {
        let out = with_store(store, "5s")
            .args(["status", &scene.name, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (!text.contains("\"waiters\":[]")).then_some(text)
    });
    assert!(
        json.contains(&format!("\"holders\":[{{\"holder\":\"{}\"", info[1])),
        "{json}"
    );
    // The holder's fence, where the store keeps it (etcd keeps none).
    if let Store::Zk | Store::Pg | Store::Redis = store {
        assert!(json.contains(&format!("\"fence\":{}", info[2])), "{json}");
    }
    signal(&holder, libc::SIGTERM);
    wait_exit(&mut holder);
    assert_eq!(wait_exit(&mut waiter).code(), Some(0));
    let out = with_store(store, "5s")
        .args(["status", &scene.name])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("free"));
}

#[test]
fn status_shows_holder_and_waiter_zk() {
    status_shows_holder_and_waiter(Store::Zk);
}

#[test]
fn status_shows_holder_and_waiter_etcd() {
    status_shows_holder_and_waiter(Store::Etcd);
}

#[test]
fn status_shows_holder_and_waiter_redis() {
    status_shows_holder_and_waiter(Store::Redis);
}

#[test]
fn lock_excludes_a_held_etcdctl_lock_etcd() {
    let scene = Scene::new("etcdctl");
    let server = EtcdServer::shared();
    let facts = server.facts();
    // etcdctl holds the lock while its command runs.
    let mut etcdctl = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", server.endpoint()))
        .args(["lock", "--ttl=2", &scene.name, "sleep", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start etcdctl lock");
    facts.wait_keys(
        &format!("{}/", scene.name),
        "etcdctl's key",
        Duration::from_secs(10),
        |k| k.len() == 1,
    );
    let held =
        code(with_store(Store::Etcd, "10s").args(["lock", &scene.name, "--no-wait", "--", "true"]));
    assert_eq!(held, 75, "ours must not acquire while etcdctl holds");
    let _ = etcdctl.kill();
    let _ = etcdctl.wait();
    // etcdctl's session lease ends 2 s after it was killed.
    let freed = code(with_store(Store::Etcd, "10s").args([
        "lock",
        &scene.name,
        "--wait",
        "30s",
        "--",
        "true",
    ]));
    assert_eq!(freed, 0, "ours acquires once etcdctl is gone");
}

#[test]
fn lock_excludes_a_curator_holder_zk() {
    let scene = Scene::new("curator");
    let connect = ZkServer::shared().connect_string();
    let mut curator = integration::peers::CuratorPeer::start(
        "holder",
        &connect,
        Duration::from_secs(10),
        &scene.dir,
    );
    assert!(
        curator.lock_for(&scene.name, Duration::from_secs(10)),
        "Curator acquires a free lock"
    );
    let held =
        code(with_store(Store::Zk, "10s").args(["lock", &scene.name, "--no-wait", "--", "true"]));
    assert_eq!(held, 75, "ours must not acquire while Curator holds");
    curator.release();
    let freed = code(with_store(Store::Zk, "10s").args([
        "lock",
        &scene.name,
        "--wait",
        "20s",
        "--",
        "true",
    ]));
    assert_eq!(freed, 0, "ours acquires once Curator released");
    curator.exit();
}

#[test]
fn never_two_at_once_pg() {
    never_two_at_once(Store::Pg);
}

#[test]
fn semaphore_permits_pg() {
    semaphore_permits(Store::Pg);
}

#[test]
fn elect_runs_cmd_while_leader_pg() {
    elect_runs_cmd_while_leader(Store::Pg);
}

#[test]
fn status_shows_holder_and_waiter_pg() {
    status_shows_holder_and_waiter(Store::Pg);
}

/// A session-mode holder (an advisory lock on a backend of its own) is
/// seen by `status` in the default lease mode, with its fence; the fences
/// of successive holders strictly increase (they follow the database
/// clock: large, not dense).
#[test]
fn status_shows_a_session_mode_holder_and_its_fence_pg() {
    let scene = Scene::new("status-session");
    let mut fences = Vec::new();
    for round in 0..2 {
        let (mut holder, info) = hold(Store::Pg, "5s", &scene, &["--pg-mode", "session"]);
        assert!(info[1].contains("/backend-"), "{info:?}");
        let out = with_store(Store::Pg, "5s")
            .args(["status", &scene.name, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let json = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            json.contains(&format!("\"holders\":[{{\"holder\":\"{}\"", info[1])),
            "round {round}: {info:?} {json}"
        );
        assert!(
            json.contains(&format!("\"fence\":{}", info[2])),
            "{info:?} {json}"
        );
        let out = with_store(Store::Pg, "5s")
            .args(["status", &scene.name])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.contains(&format!("fence={}", info[2])), "{text}");
        fences.push(info[2].parse::<u64>().unwrap());
        signal(&holder, libc::SIGTERM);
        wait_exit(&mut holder);
        // The next holder writes it anew.
        fs::remove_file(scene.file("ready")).unwrap();
    }
    assert!(fences[0] < fences[1], "{fences:?}");
}
