//! The `recipes` binary against real ZooKeeper, etcd and PostgreSQL servers: exit
//! statuses and their overrides, CMD's environment, mutual exclusion with
//! increasing fences, and what happens to CMD when the lease is lost or
//! `recipes` is killed.
//!
//! Tests named `fault_*` pause or kill the `recipes` process (never the
//! shared servers).

mod common;

use std::fs;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use integration::env::command_without_recipes_env;
use integration::{scale, wait_for, wait_until, EtcdServer, Proxy, ZkServer};

#[test]
fn usage_errors_exit_64() {
    // No backend.
    assert_eq!(code(recipes().args(["lock", "/x", "--", "true"])), 64);
    // Both backends from the environment.
    assert_eq!(
        code(
            recipes()
                .env("RECIPES_ZK", "127.0.0.1:1")
                .env("RECIPES_ETCD", "127.0.0.1:1")
                .args(["lock", "/x", "--", "true"])
        ),
        64
    );
    // Two as flags, one of them PostgreSQL's.
    assert_eq!(
        code(
            recipes()
                .args(["--pg", "postgres://h/db", "--etcd", "127.0.0.1:1"])
                .args(["lock", "/x", "--", "true"])
        ),
        64
    );
    // Both as flags.
    assert_eq!(
        code(recipes().args([
            "--zk",
            "127.0.0.1:1",
            "--etcd",
            "127.0.0.1:1",
            "lock",
            "/x",
            "--",
            "true"
        ])),
        64
    );
    // A duration without a unit, CMD without `--`, no CMD, zero permits.
    let zk = ["--zk", "127.0.0.1:1"];
    for args in [
        &["--ttl", "2", "lock", "/x", "--", "true"][..],
        &["lock", "/x", "true"],
        &["lock", "/x"],
        &["semaphore", "/x", "--permits", "0", "--", "true"],
        &["lock", "/x", "--wait", "1s", "--no-wait", "--", "true"],
        &["frobnicate"],
    ] {
        assert_eq!(code(recipes().args(zk).args(args)), 64, "{args:?}");
    }
    // Help is not an error, and shows an example.
    for sub in [&[][..], &["lock"], &["semaphore"], &["elect"], &["status"]] {
        let out = recipes().args(sub).arg("--help").output().unwrap();
        assert!(out.status.success(), "{sub:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("recipes --"),
            "{sub:?} --help shows no example"
        );
    }
}

#[test]
fn bad_name_is_a_usage_error_zk() {
    let zk = ZkServer::shared().connect_string();
    assert_eq!(
        code(recipes().args(["--zk", &zk, "lock", "no-slash", "--", "true"])),
        64
    );
}

/// One rule on both stores: an empty participant id is a usage error and
/// CMD does not run.
#[test]
fn elect_with_an_empty_id_is_a_usage_error_on_both_stores() {
    let zk = ZkServer::shared().connect_string();
    let etcd = integration::EtcdServer::shared().endpoints().join(",");
    for (flag, addr) in [("--zk", zk.as_str()), ("--etcd", etcd.as_str())] {
        let args = [
            flag,
            addr,
            "--id",
            "",
            "elect",
            "/cli-tests/empty-id",
            "--",
            "false",
        ];
        let (status, stderr) = run(recipes().args(args));
        assert_eq!(status.code(), Some(64), "{flag}: {stderr}");
        assert!(
            stderr.contains("id"),
            "{flag}: the message names the id: {stderr}"
        );
    }
}

/// A negative duration is a usage error that says so — never clap's tip to
/// pass it after `--`, which would make it part of CMD (issue 10, finding
/// 10).
#[test]
fn negative_durations_are_usage_errors_that_say_so() {
    let zk = ZkServer::shared().connect_string();
    for flag in ["--wait", "--grace", "--ttl"] {
        let args = [
            "--zk",
            &zk,
            "lock",
            "/cli-tests/negative",
            flag,
            "-5s",
            "--",
            "false",
        ];
        let (status, stderr) = run(recipes().args(args));
        assert_eq!(status.code(), Some(64), "{flag}: {stderr}");
        assert!(stderr.contains("negative"), "{flag}: {stderr}");
        assert!(!stderr.contains("-- -5s"), "{flag} suggests CMD: {stderr}");
    }
}

#[test]
fn unreachable_backend_exits_69() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let ran = std::env::temp_dir().join(format!("recipes-cli-69-{}", std::process::id()));
    for flag in ["--zk", "--etcd"] {
        let (status, stderr) = run(recipes().args([
            flag,
            &addr,
            "--ttl",
            "2s",
            "lock",
            "/cli-tests/unreachable",
            "--",
            "touch",
            ran.to_str().unwrap(),
        ]));
        assert_eq!(status.code(), Some(69), "{flag}: {stderr}");
        assert!(!ran.exists(), "CMD ran without a backend");
    }
}

#[test]
fn a_flag_beats_the_other_backends_environment_variable() {
    let scene = Scene::new("flag-wins");
    assert_eq!(
        code(
            recipes()
                .env("RECIPES_ETCD", "127.0.0.1:1")
                .args(["--zk", &ZkServer::shared().connect_string()])
                .args(["lock", &scene.name, "--", "true"])
        ),
        0
    );
    // And the environment alone works.
    assert_eq!(
        code(
            recipes()
                .env("RECIPES_ZK", ZkServer::shared().connect_string())
                .env("RECIPES_TTL", "3s")
                .args(["lock", &scene.name, "--", "true"])
        ),
        0
    );
    // --pg beats two other stores' variables; RECIPES_PG alone works.
    let pg = integration::PgServer::shared().url();
    assert_eq!(
        code(
            recipes()
                .env("RECIPES_ETCD", "127.0.0.1:1")
                .env("RECIPES_ZK", "127.0.0.1:1")
                .args(["--pg", &pg])
                .args(["lock", &scene.name, "--", "true"])
        ),
        0
    );
    assert_eq!(
        code(
            recipes()
                .env("RECIPES_PG", &pg)
                .args(["lock", &scene.name, "--", "true"])
        ),
        0
    );
}

fn environment_reaches_cmd(store: Store) {
    let scene = Scene::new("env");
    let out = scene.file("env");
    let script = format!(
        "echo \"${{RECIPES_FENCE:-none}}|$RECIPES_NAME|$RECIPES_HOLDER|${{RECIPES_PERMIT:-none}}\" > {}",
        out.display()
    );
    assert_eq!(
        code(
            with_store(store, "5s")
                .env("RECIPES_PERMIT", "stale")
                .args(["lock", &scene.name, "--", "sh", "-c", &script])
        ),
        0
    );
    let line = fs::read_to_string(&out).unwrap();
    let parts: Vec<&str> = line.trim().split('|').collect();
    let fence: u64 = parts[0]
        .parse()
        .unwrap_or_else(|_| panic!("fence in {line:?}"));
    assert!(fence > 0);
    assert_eq!(parts[1], scene.name);
    assert!(
        parts[2].starts_with(&format!("{}/", scene.name)),
        "holder {line:?}"
    );
    assert_eq!(parts[3], "none", "a lock's CMD got RECIPES_PERMIT");

    // CMD's status is ours; a signal that killed it is 128+n.
    assert_eq!(
        code(with_store(store, "5s").args(["lock", &scene.name, "--", "sh", "-c", "exit 3"])),
        3
    );
    assert_eq!(
        code(with_store(store, "5s").args([
            "lock",
            &scene.name,
            "--",
            "sh",
            "-c",
            "kill -TERM $$"
        ])),
        128 + libc::SIGTERM
    );
    assert_eq!(
        code(with_store(store, "5s").args(["lock", &scene.name, "--", "/nonexistent/cmd"])),
        127
    );
    let not_executable = scene.file("not-executable");
    fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    assert_eq!(
        code(with_store(store, "5s").args([
            "lock",
            &scene.name,
            "--",
            not_executable.to_str().unwrap()
        ])),
        126
    );
}

#[test]
fn environment_reaches_cmd_zk() {
    environment_reaches_cmd(Store::Zk);
}

#[test]
fn environment_reaches_cmd_etcd() {
    environment_reaches_cmd(Store::Etcd);
}

#[test]
fn environment_reaches_cmd_redis() {
    environment_reaches_cmd(Store::Redis);
}

fn conflict_exits_75_and_sigterm_is_forwarded(store: Store) {
    let scene = Scene::new("conflict");
    let (mut holder, _) = hold(store, "5s", &scene, &[]);
    let ran = scene.file("ran");
    let touch = ["--", "touch", ran.to_str().unwrap()];
    assert_eq!(
        code(
            with_store(store, "5s")
                .args(["lock", &scene.name, "--no-wait"])
                .args(touch)
        ),
        75
    );
    assert_eq!(
        code(
            with_store(store, "5s")
                .args([
                    "lock",
                    &scene.name,
                    "--wait",
                    "300ms",
                    "--conflict-exit-code",
                    "9"
                ])
                .args(touch)
        ),
        9
    );
    assert!(!ran.exists(), "CMD ran without the lock");
    // SIGTERM to `recipes` reaches CMD (sleep dies of it), then the lock
    // is released.
    signal(&holder, libc::SIGTERM);
    let status = wait_exit(&mut holder);
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert_eq!(
        code(
            with_store(store, "5s")
                .args(["lock", &scene.name, "--no-wait"])
                .args(touch)
        ),
        0
    );
    assert!(ran.exists());
}

#[test]
fn conflict_exits_75_and_sigterm_is_forwarded_zk() {
    conflict_exits_75_and_sigterm_is_forwarded(Store::Zk);
}

#[test]
fn conflict_exits_75_and_sigterm_is_forwarded_etcd() {
    conflict_exits_75_and_sigterm_is_forwarded(Store::Etcd);
}

#[test]
fn conflict_exits_75_and_sigterm_is_forwarded_redis() {
    conflict_exits_75_and_sigterm_is_forwarded(Store::Redis);
}

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
    if let Store::Zk = store {
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

/// SIGSTOP `recipes` past its TTL; once the store has dropped its holder
/// node/key, SIGCONT: CMD is killed and `recipes` exits 76 (or the
/// override).
fn fault_lease_lost_kills_cmd(store: Store, extra: &[&str], expect: i32) {
    let scene = Scene::new("lost");
    let (mut holder, info) = hold(store, "2s", &scene, extra);
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
    let [backend, hosts] = Store::Zk.flag();
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
/// sessions at 20 s) still runs CMD: the SIGTERM window follows the granted
/// timeout, not the requested one.
#[test]
fn a_ttl_the_server_caps_still_runs_cmd_zk() {
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
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(fs::read_to_string(&out)
        .unwrap()
        .trim()
        .parse::<u64>()
        .is_ok());
}

#[test]
fn environment_reaches_cmd_pg() {
    environment_reaches_cmd(Store::Pg);
}

#[test]
fn conflict_exits_75_and_sigterm_is_forwarded_pg() {
    conflict_exits_75_and_sigterm_is_forwarded(Store::Pg);
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

#[test]
fn sigterm_while_waiting_leaves_nothing_behind_lock_pg() {
    sigterm_while_waiting_leaves_nothing_behind(Store::Pg, "lock");
}
