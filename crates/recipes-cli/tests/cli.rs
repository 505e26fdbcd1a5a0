//! The `recipes` binary against real ZooKeeper, etcd, PostgreSQL and Redis
//! servers: usage errors and exit statuses, which backend a flag or the
//! environment picks, CMD's environment, a conflict's status and SIGTERM
//! forwarded to CMD. (Holding: `holding.rs`; how a run ends: `endings.rs`;
//! faults: `faults.rs`.)

mod common;

use std::fs;

use common::*;
use integration::ZkServer;

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

#[test]
fn environment_reaches_cmd_pg() {
    environment_reaches_cmd(Store::Pg);
}

#[test]
fn conflict_exits_75_and_sigterm_is_forwarded_pg() {
    conflict_exits_75_and_sigterm_is_forwarded(Store::Pg);
}
