//! `recipes` over mutual TLS on every store: `--cacert --cert --key` (and
//! `RECIPES_CACERT`, `RECIPES_CERT`, `RECIPES_KEY`) lock NAME and run CMD
//! with its fence; without a client certificate the server's refusal is
//! exit 78 (EX_CONFIG) with a message that names the flag to pass, and
//! CMD does not run.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{recipes, run, Scene};
use integration::pg_server::PG_TLS_USER;
use integration::{
    scale, EtcdConfig, EtcdServer, PgConfig, PgServer, RedisConfig, RedisServer, TestPki, ZkConfig,
    ZkServer,
};

/// Lock `/cli-tls/lock` over `store` (its flag and address) with the
/// good client certificate as flags, then with the CA only from the
/// environment (refused); `ran` is where CMD writes its fence.
fn lock_over_tls(store: [&str; 2], scene: &Scene) {
    let pki = TestPki::shared();
    let ran = scene.file("fence");
    let cmd = format!("echo \"$RECIPES_FENCE\" > {}", ran.display());
    let path = |p: &Path| p.display().to_string();
    let lock = ["lock", "/cli-tls/lock", "--", "sh", "-c", &cmd];
    let (status, stderr) = run(recipes()
        .args(store)
        .args([
            "--cacert",
            &path(&pki.ca),
            "--cert",
            &path(&pki.client.cert),
            "--key",
            &path(&pki.client.key),
        ])
        .args(lock));
    assert!(status.success(), "{}: {status:?}: {stderr}", store[0]);
    let fence = std::fs::read_to_string(&ran).expect("CMD ran and wrote its fence");
    assert!(
        fence.trim().parse::<u64>().is_ok_and(|f| f > 0),
        "fence {fence:?}"
    );

    std::fs::remove_file(&ran).expect("remove the fence file");
    // A short TTL, hence connect timeout: a client that retries the
    // refused handshake until its timeout is diagnosed at half of it.
    let ttl = format!("{}ms", scale(Duration::from_secs(3)).as_millis());
    let began = Instant::now();
    let (status, stderr) = run(recipes()
        .args(store)
        .args(["--ttl", &ttl])
        .env("RECIPES_CACERT", &pki.ca)
        .args(lock));
    eprintln!("{}: refused in {:?}", store[0], began.elapsed());
    assert_eq!(status.code(), Some(78), "{}: {stderr}", store[0]);
    assert!(stderr.contains("--cert"), "{}: {stderr}", store[0]);
    assert!(!ran.exists(), "CMD ran without a client certificate");
}

/// A server of each store over mutual TLS, by name: its flag and the
/// address clients use.
macro_rules! locks_over_tls {
    ($($test:ident: $label:literal => |$tls:ident| $server:expr, $flag:literal, $addr:expr;)*) => {$(
        #[test]
        fn $test() {
            let scene = Scene::new($label);
            let $tls = TestPki::shared().server_tls(true);
            let server = $server;
            lock_over_tls([$flag, &$addr(&server)], &scene);
        }
    )*};
}

locks_over_tls! {
    etcd_locks_over_mutual_tls: "tls-etcd" =>
        |tls| EtcdServer::start_with(EtcdConfig::default().with_tls(tls)),
        "--etcd", |s: &EtcdServer| s.client_addr().to_string();
    redis_locks_over_mutual_tls: "tls-redis" =>
        |tls| RedisServer::start_with(RedisConfig { tls: Some(tls), ..RedisConfig::default() }),
        "--redis", |s: &RedisServer| s.addr().to_string();
    pg_locks_over_mutual_tls: "tls-pg" =>
        |tls| PgServer::start_with(PgConfig::default().with_tls(tls)),
        "--pg", |s: &PgServer| s.url_as(PG_TLS_USER);
    zk_locks_over_mutual_tls: "tls-zk" =>
        |tls| ZkServer::start_with(ZkConfig::default().with_tls(tls)),
        "--zk", |s: &ZkServer| s.secure_addr().to_string();
}

#[test]
fn cert_without_cacert_is_a_usage_error() {
    let pki = TestPki::shared();
    let (status, stderr) = run(recipes()
        .args(["--etcd", "127.0.0.1:1", "--cert"])
        .arg(&pki.client.cert)
        .args(["lock", "/x", "--", "true"]));
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("--cacert"), "{stderr}");
}
