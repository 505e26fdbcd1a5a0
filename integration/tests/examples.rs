//! The runnable examples (`cargo run --example NAME`), each run once
//! against real servers: each exits by itself with status 0 and tells the
//! story it promises. The binaries come from the workspace build
//! (`cargo build --workspace --examples`, which `scripts/test` runs first).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use integration::env::command_without_recipes_env;
use integration::{wait_for, EtcdServer, PgServer, RedisServer, ZkServer};

/// Upper bound (scaled by the harness) for one example's run; the longest
/// runs about 15 s by design.
const RUN_BOUND: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug)]
enum Store {
    Zk,
    Etcd,
    Pg,
    Redis,
}

/// The built example `name`, next to this test's own binary.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo build --workspace --examples` first (scripts/test does)",
        path.display()
    );
    path
}

/// Run example `name` against `store`'s shared server; its stdout.
fn run(name: &str, store: Store) -> String {
    let mut cmd = command_without_recipes_env(example(name));
    match store {
        Store::Zk => cmd.env("RECIPES_ZK", ZkServer::shared().connect_string()),
        Store::Etcd => cmd.env(
            "RECIPES_ETCD",
            EtcdServer::shared().client_addr().to_string(),
        ),
        Store::Pg => cmd.env("RECIPES_PG", PgServer::shared().url()),
        Store::Redis => cmd.env("RECIPES_REDIS", RedisServer::shared().url()),
    };
    let out_path = std::env::temp_dir().join(format!(
        "recipes-example-{name}-{store:?}-{}.out",
        std::process::id()
    ));
    let out = std::fs::File::create(&out_path).unwrap();
    let err = out.try_clone().unwrap();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap();
    let status = wait_for(
        &format!("example {name} ({store:?}) exits"),
        RUN_BOUND,
        || child.try_wait().unwrap(),
    );
    let text = std::fs::read_to_string(&out_path).unwrap();
    let _ = std::fs::remove_file(&out_path);
    assert!(status.success(), "{name} ({store:?}): {status}\n{text}");
    text
}

fn says(text: &str, phrase: &str) {
    assert!(text.contains(phrase), "expected {phrase:?} in:\n{text}");
}

#[test]
fn zk_mutex_zk() {
    let out = run("zk_mutex", Store::Zk);
    says(&out, "with fence");
    says(&out, "releasing");
}

fn active_passive(store: Store) {
    let out = run("active_passive", store);
    says(&out, "ACTIVE now, with fence");
    says(&out, "write #1 accepted");
    says(&out, "leaving the election");
}

#[test]
fn active_passive_zk() {
    active_passive(Store::Zk);
}

#[test]
fn active_passive_etcd() {
    active_passive(Store::Etcd);
}

#[test]
fn active_passive_redis() {
    active_passive(Store::Redis);
}

fn cron_singleton(store: Store) {
    let out = run("cron_singleton", store);
    says(&out, ">>> running the job");
    says(&out, "recorded the run with a fenced write");
    says(&out, "less than 5s: skip");
}

#[test]
fn cron_singleton_zk() {
    cron_singleton(Store::Zk);
}

#[test]
fn cron_singleton_etcd() {
    cron_singleton(Store::Etcd);
}

#[test]
fn cron_singleton_redis() {
    cron_singleton(Store::Redis);
}

fn fenced_write(store: Store) {
    let out = run("fenced_write", store);
    says(&out, "resource: REJECTED A's write");
    says(&out, "store: REJECTED A's write");
    says(&out, "the stored value is \"written by B\"");
}

#[test]
fn fenced_write_zk() {
    fenced_write(Store::Zk);
}

#[test]
fn fenced_write_etcd() {
    fenced_write(Store::Etcd);
}

#[test]
fn fenced_write_redis() {
    fenced_write(Store::Redis);
}

fn semaphore_pool(store: Store) {
    let out = run("semaphore_pool", store);
    says(&out, "at most 2 workers ran at the same moment (limit 2)");
}

#[test]
fn semaphore_pool_zk() {
    semaphore_pool(Store::Zk);
}

#[test]
fn semaphore_pool_etcd() {
    semaphore_pool(Store::Etcd);
}

#[test]
fn semaphore_pool_redis() {
    semaphore_pool(Store::Redis);
}

fn election_observe(store: Store) {
    let out = run("election_observe", store);
    says(&out, "alice: won the election");
    says(&out, "with value \"alice: step 2\"");
    says(&out, "with value \"bob: taking over\"");
    says(&out, "bob: resigned");
}

#[test]
fn election_observe_zk() {
    election_observe(Store::Zk);
}

#[test]
fn election_observe_etcd() {
    election_observe(Store::Etcd);
}

#[test]
fn pg_fenced_transaction_pg() {
    let out = run("pg_fenced_transaction", Store::Pg);
    says(&out, "the database REJECTED A's transaction");
    says(&out, "the ledger says it was written by Some(\"B\")");
}

#[test]
fn election_observe_redis() {
    election_observe(Store::Redis);
}
