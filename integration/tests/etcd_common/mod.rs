//! Helpers the etcd test binaries share: clients, unique names, key reads.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;

use integration::runtime::block_on;
use integration::{EtcdFacts, EtcdServer};
use recipes_core::{BootInstant, Client as _, FencingToken};
use recipes_etcd::etcd_client::TxnOp;
use recipes_etcd::{EtcdClient, EtcdKey, LeaderInfo, MutexGuard, Semaphore, SemaphorePermit};

/// A TTL short enough for expiry tests, long enough for a loaded machine.
pub const SHORT_TTL: Duration = Duration::from_secs(2);

/// Range RPCs the server has been sent (reads; a transaction's reads are
/// not among them).
pub fn range_rpcs(server: &EtcdServer) -> f64 {
    server.metric(
        "grpc_server_started_total{grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"}",
    )
}

/// A client of `server` with the default 10 s TTL.
pub fn connect(server: &EtcdServer) -> EtcdClient {
    connect_with_ttl(server, Duration::from_secs(10))
}

/// A client of `server` with lease `ttl`; a failure quotes the server log.
pub fn connect_with_ttl(server: &EtcdServer, ttl: Duration) -> EtcdClient {
    EtcdClient::builder(server.endpoints())
        .ttl(ttl)
        .connect()
        .unwrap_or_else(|e| {
            panic!(
                "connect to {:?}: {e}\n{}",
                server.endpoints(),
                server.log_tail()
            )
        })
}

/// `<prefix><test>-<pid>-<n>`: a name no other test (or run) uses.
fn unique(prefix: &str, test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}{test}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A lock name no other test uses.
pub fn lock_name(test: &str) -> String {
    unique("/recipes-test/", test)
}

/// An election name no other test uses.
pub fn election_name(test: &str) -> String {
    unique("/recipes-test/election/", test)
}

/// A semaphore name no other test uses.
pub fn sem_name(test: &str) -> String {
    unique("/recipes-test/sem-", test)
}

/// The keys exactly under `name/`.
pub fn keys(facts: &EtcdFacts, name: &str) -> Vec<String> {
    facts.keys_with_prefix(&format!("{name}/"))
}

/// Wait until exactly `n` keys are under `name/`; returns them.
pub fn wait_keys(facts: &EtcdFacts, name: &str, n: usize) -> Vec<String> {
    facts.wait_keys(
        &format!("{name}/"),
        &format!("number {n}"),
        Duration::from_secs(10),
        |k| k.len() == n,
    )
}

/// A fenced put through `key`'s transaction; the revision of the write.
pub fn fenced_put(key: &EtcdKey, at: &str, value: &str) -> i64 {
    let resp = key.txn(vec![TxnOp::put(at, value, None)]).unwrap();
    resp.header().unwrap().revision()
}

/// The store's current revision, as a read's header says.
pub fn store_revision(facts: &EtcdFacts) -> i64 {
    let mut client = facts.client();
    block_on(async move { client.get("/", None).await })
        .expect("read the store revision")
        .header()
        .expect("a header")
        .revision()
}

/// What a waiter thread returns: its guard, token and when it acquired.
pub type Waited = recipes_core::Result<(FencingToken, BootInstant, MutexGuard)>;

/// `client` starts waiting for `name` (held by someone else) in a thread;
/// returns once the waiter's key is in etcd, behind the holder's.
pub fn queue_waiter(facts: &EtcdFacts, client: &EtcdClient, name: &str) -> JoinHandle<Waited> {
    let m = client.mutex(name).unwrap();
    let waiter = std::thread::spawn(move || m.lock().map(|g| (g.token(), BootInstant::now(), g)));
    wait_keys(facts, name, 2);
    assert!(!waiter.is_finished(), "waits while the lock is held");
    waiter
}

/// Run `etcdctl` against `server` and insist it succeeds.
pub fn etcdctl(server: &EtcdServer, args: &[&str]) -> String {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", server.endpoint()))
        .args(args)
        .output()
        .expect("run etcdctl");
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Upper bound (scaled) for anything that should happen at once.
pub const SOON: Duration = Duration::from_secs(10);

/// A client's contender key of `name`: `<name>/<lease hex>`.
pub fn key_of(client: &EtcdClient, name: &str) -> String {
    format!("{name}/{:x}", client.session_id().unwrap())
}

/// A key's (create_revision, mod_revision, value), as etcd says now.
pub fn read_key(facts: &EtcdFacts, key: &str) -> Option<(i64, i64, Vec<u8>)> {
    let mut client = facts.client();
    let key = key.to_owned();
    let resp = block_on(async move { client.get(key, None).await }).expect("read a key");
    resp.kvs()
        .first()
        .map(|kv| (kv.create_revision(), kv.mod_revision(), kv.value().to_vec()))
}

/// What an observer reports for `holder` with `value`.
pub fn info(holder: &str, value: &[u8]) -> LeaderInfo {
    LeaderInfo {
        holder: holder.to_owned(),
        value: value.to_vec(),
    }
}

/// Upper bound (scaled) for anything that should happen promptly.
pub const PROMPTLY: Duration = Duration::from_secs(10);

/// The permit keys of the semaphore `name`.
pub fn lease_keys(facts: &EtcdFacts, name: &str) -> Vec<String> {
    facts.keys_with_prefix(&format!("{name}/leases/"))
}

/// Waits until the permit keys are exactly `expected` (in any order).
pub fn wait_lease_keys(facts: &EtcdFacts, name: &str, expected: &[&str]) {
    let mut want: Vec<String> = expected.iter().map(|k| k.to_string()).collect();
    want.sort();
    facts.wait_keys(
        &format!("{name}/leases/"),
        &format!("are {want:?}"),
        PROMPTLY,
        |k| k == want.as_slice(),
    );
}

/// Waits until `name` has `n` permit keys; returns them.
pub fn wait_lease_count(facts: &EtcdFacts, name: &str, n: usize) -> Vec<String> {
    facts.wait_keys(
        &format!("{name}/leases/"),
        &format!("number {n}"),
        PROMPTLY,
        |k| k.len() == n,
    )
}

/// Waits until `name`'s internal mutex has `n` keys; returns them.
pub fn wait_lock_count(facts: &EtcdFacts, name: &str, n: usize) -> Vec<String> {
    facts.wait_keys(
        &format!("{name}/locks/"),
        &format!("number {n}"),
        PROMPTLY,
        |k| k.len() == n,
    )
}

/// Deletes `key` behind its holder's back.
pub fn delete_key(facts: &EtcdFacts, key: &str) {
    let mut raw = facts.client();
    let key = key.to_owned();
    block_on(async move { raw.delete(key, None).await }).expect("delete a key");
}

/// Puts `key` as another program would.
pub fn put_key(facts: &EtcdFacts, key: &str, value: &str) {
    let mut raw = facts.client();
    let (key, value) = (key.to_owned(), value.to_owned());
    block_on(async move { raw.put(key, value, None).await }).expect("put a key");
}

/// A permit acquired in a thread, and when.
pub type PermitWaited = recipes_core::Result<(BootInstant, SemaphorePermit)>;

/// `sem.acquire()` in a thread.
pub fn spawn_waiter(sem: Semaphore) -> JoinHandle<PermitWaited> {
    std::thread::spawn(move || sem.acquire().map(|p| (BootInstant::now(), p)))
}

/// Runs `f`, printing how long it took.
pub fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let r = f();
    println!("{what}: {:?}", started.elapsed());
    r
}

/// A running `etcdctl` (API v3, against `server`) and the lines it
/// prints, read on a thread; killed and reaped when dropped.
pub struct EtcdctlChild {
    pub child: Child,
    pub lines: crossbeam_channel::Receiver<String>,
}

impl EtcdctlChild {
    pub fn spawn(server: &EtcdServer, args: &[&str]) -> EtcdctlChild {
        let mut child = Command::new("/usr/bin/etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", server.endpoint()))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run etcdctl");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        EtcdctlChild { child, lines }
    }
}

impl Drop for EtcdctlChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
