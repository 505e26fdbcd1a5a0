//! `--user` with its password from `RECIPES_PASSWORD` or `--password-file`
//! against etcd with authentication on (a role read-write on `/app/`
//! only), ZooKeeper digest identities, a PostgreSQL role with a password
//! and a Redis ACL user: the right password works, a wrong one exits 77 at
//! connect, at once on every store, a key outside the role exits 77 naming it, and the password
//! never shows in anything `recipes` prints.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use integration::{scale, EtcdServer, PgServer, RedisConfig, RedisServer, ZkConfig, ZkServer};

/// How long a refused password may take on any store: the server says no
/// at once, so the refusal comes well within the connect timeout (10 s at
/// the default TTL) — a refusal that waited it out would be a store that
/// answers a wrong password like a closed port. Process start included.
const REFUSED_WITHIN: Duration = Duration::from_secs(3);

/// A wrong password is 77 within [`REFUSED_WITHIN`], and never printed.
fn refused_at_once(backend: &[&str], user: &str, name: &str) {
    let started = Instant::now();
    let (code, printed) = lock_as(backend, user, "wrong-pw-77", name);
    let took = started.elapsed();
    assert_eq!(code, Some(77), "a wrong password: {printed}");
    assert!(
        took < scale(REFUSED_WITHIN),
        "a wrong password took {took:?}: {printed}"
    );
    assert!(
        !printed.contains("wrong-pw-77"),
        "the password was printed: {printed}"
    );
}

const SECRET: &str = "s3cret-pw-941";
const NAME: &str = "/creds/nightly";

fn etcd_with_auth() -> EtcdServer {
    let server = EtcdServer::start();
    server.enable_app_auth(SECRET);
    server
}

/// `recipes --etcd … --user app lock NAME -- true`, the password in the
/// environment: status and everything printed.
fn lock_as_app(server: &EtcdServer, name: &str, password: &str) -> (Option<i32>, String) {
    lock_as(&["--etcd", &server.endpoints()[0]], "app", password, name)
}

#[test]
fn etcd_user_and_password_from_the_environment_or_a_file() {
    let server = etcd_with_auth();
    let (code, printed) = lock_as_app(&server, "/app/nightly", SECRET);
    assert_eq!(code, Some(0), "{printed}");

    refused_at_once(&["--etcd", &server.endpoints()[0]], "app", "/app/nightly");

    let (code, printed) = lock_as_app(&server, "/elsewhere/nightly", SECRET);
    assert_eq!(code, Some(77), "outside the role: {printed}");
    assert!(
        printed.contains("/elsewhere/nightly"),
        "names the key: {printed}"
    );
    assert!(
        !printed.contains(SECRET),
        "the password was printed: {printed}"
    );

    let scene = Scene::new("password-file");
    let file = scene.file("pw");
    std::fs::write(&file, format!("{SECRET}\n")).unwrap();
    let mut cmd = recipes();
    cmd.args(["--etcd", &server.endpoints()[0], "--user", "app"])
        .args(["--password-file", file.to_str().unwrap()])
        .args(["lock", "/app/nightly", "--", "true"]);
    assert_eq!(code_of(&mut cmd), 0);
}

#[test]
fn a_user_without_a_password_is_a_usage_error() {
    let mut cmd = recipes();
    cmd.args([
        "--etcd",
        "127.0.0.1:1",
        "--user",
        "app",
        "lock",
        "/app/x",
        "--",
        "true",
    ]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("RECIPES_PASSWORD"));
}

#[test]
fn zk_digest_identity() {
    let server = ZkServer::shared();
    let mut cmd = recipes();
    cmd.args(["--zk", &server.connect_string(), "--user", "app"])
        .env("RECIPES_PASSWORD", SECRET)
        .args(["lock", "/creds/nightly", "--", "true"]);
    let out = cmd.output().unwrap();
    let printed = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{printed}");
    assert!(!printed.contains(SECRET));
}

fn code_of(cmd: &mut Command) -> i32 {
    let out = cmd.output().unwrap();
    out.status.code().unwrap_or(-1)
}

/// `recipes <backend> --user USER lock NAME -- true`, the password in the
/// environment: status and everything printed.
fn lock_as(backend: &[&str], user: &str, password: &str, name: &str) -> (Option<i32>, String) {
    let mut cmd = recipes();
    cmd.args(backend)
        .args(["--user", user])
        .env("RECIPES_PASSWORD", password)
        .args(["lock", name, "--", "true"]);
    let out = cmd.output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), printed)
}

/// The right password works, a wrong one is 77 and never printed, nor
/// is the right one.
fn right_and_wrong(backend: &[&str], user: &str) {
    let (code, printed) = lock_as(backend, user, SECRET, NAME);
    assert_eq!(code, Some(0), "the right password: {printed}");
    assert!(
        !printed.contains(SECRET),
        "the password was printed: {printed}"
    );
    let mut status = recipes();
    status
        .args(backend)
        .args(["--user", user])
        .env("RECIPES_PASSWORD", SECRET);
    let out = status.args(["status", NAME, "--json"]).output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{printed}");
    assert!(
        !printed.contains(SECRET),
        "status printed the password: {printed}"
    );
    refused_at_once(backend, user, NAME);
}

#[test]
fn pg_role_and_password_from_the_environment() {
    let server = PgServer::start();
    server.add_password_role("app", SECRET);
    // The URL names no user: --user gives it, the environment its password.
    let url = format!("postgres://{}/recipes", server.addr());
    right_and_wrong(&["--pg", &url], "app");
}

#[test]
fn redis_acl_user_and_password_from_the_environment() {
    let server = RedisServer::start_with(RedisConfig {
        password: Some("default-pw-5".into()),
        ..RedisConfig::default()
    });
    let _: String = server.cmd(&[
        "ACL",
        "SETUSER",
        "app",
        "on",
        &format!(">{SECRET}"),
        "~*",
        "&*",
        "+@all",
    ]);
    let url = format!("redis://{}", server.addr());
    right_and_wrong(&["--redis", &url], "app");
    // `default` is the user of a server with only requirepass.
    let (code, printed) = lock_as(&["--redis", &url], "default", "default-pw-5", NAME);
    assert_eq!(code, Some(0), "{printed}");
}

#[test]
fn zk_sasl_user_and_password_from_the_environment() {
    let server = ZkServer::start_with(ZkConfig::default().with_sasl_user("app", SECRET));
    let hosts = server.connect_string();
    right_and_wrong(&["--zk", &hosts, "--zk-sasl"], "app");
}
