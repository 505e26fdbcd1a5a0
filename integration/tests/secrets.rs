//! Passwords never show: not in a builder's or a client's `Debug`, not in
//! any log record (every level, every target, captured while connecting,
//! locking, writing fenced and releasing), not in the error of a wrong
//! password — on every backend. (`recipes` output: the CLI's credentials
//! tests.)

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use integration::{EtcdServer, PgServer, RedisConfig, RedisServer, ZkServer};
use recipes_core::{Client, Error};

const SECRET: &str = "pw-7f3c-never-shown";
const WRONG: &str = "pw-wrong-0d1e";

/// Every log record of the process, as text.
struct Capture(Mutex<String>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let line = format!(
            "{} {}: {}\n",
            record.level(),
            record.target(),
            record.args()
        );
        self.0.lock().unwrap().push_str(&line);
    }
    fn flush(&self) {}
}

fn logs() -> &'static Capture {
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(String::new()))));
        log::set_logger(capture).expect("the only logger");
        log::set_max_level(log::LevelFilter::Trace);
        capture
    })
}

/// Connect with the right password (showing `Debug` of the builder and the
/// client), lock, write fenced, release; then with a wrong one, which must
/// be refused as `Unauthenticated`. Nothing shown or logged holds either.
fn never_shown<B: std::fmt::Debug, C: Client>(
    builder: impl Fn(&str) -> B,
    connect: impl Fn(B) -> recipes_core::Result<C>,
    name: &str,
) {
    right_never_shown(&builder, &connect, name, true);
}

/// [`never_shown`], the wrong password tried only when `refused`: a store
/// where any password is an identity (ZooKeeper's digest) takes it.
fn right_never_shown<B: std::fmt::Debug, C: Client>(
    builder: &impl Fn(&str) -> B,
    connect: &impl Fn(B) -> recipes_core::Result<C>,
    name: &str,
    refused: bool,
) {
    let logs = logs();
    let mut shown = format!("{:?}", builder(SECRET));
    let client = connect(builder(SECRET)).expect("the right password");
    shown += &format!("{client:?}");
    let guard = client.mutex(name).unwrap().lock().unwrap();
    shown += &format!("{guard:?}");
    guard.put(&format!("{name}-data"), b"x").unwrap();
    guard.release().unwrap();
    client.close().unwrap();
    if refused {
        match connect(builder(WRONG)) {
            Err(e @ Error::Unauthenticated { .. }) => shown += &format!("{e} {e:?}"),
            other => panic!("a wrong password: {other:?}"),
        }
    }
    let logged = logs.0.lock().unwrap().clone();
    assert!(!logged.is_empty(), "the logger captured nothing");
    for secret in [SECRET, WRONG] {
        assert!(!shown.contains(secret), "shown: {shown}");
        assert!(!logged.contains(secret), "logged:\n{logged}");
    }
}

#[test]
fn etcd_never_shows_the_password() {
    let server = EtcdServer::start();
    server.enable_app_auth(SECRET);
    let endpoint = server.endpoint();
    never_shown(
        |pw| recipes_etcd::EtcdClient::builder([endpoint.as_str()]).user("app", pw),
        |b| b.connect(),
        "/app/secrets",
    );
}

#[test]
fn pg_never_shows_the_password() {
    let server = PgServer::start();
    server.add_password_role("app", SECRET);
    let url = format!("postgres://{}/recipes", server.addr());
    never_shown(
        |pw| recipes_pg::PgClient::builder(url.as_str()).user("app", pw),
        |b| b.connect(),
        "/secrets/pg",
    );
    // A password in the URL is not shown either.
    let in_url = format!("postgres://app:{SECRET}@{}/recipes", server.addr());
    let client = recipes_pg::PgClient::connect(in_url.as_str()).unwrap();
    let shown = format!("{client:?}");
    assert!(!shown.contains(SECRET), "{shown}");
    client.close().unwrap();
}

#[test]
fn redis_never_shows_the_password() {
    let server = RedisServer::start_with(RedisConfig {
        password: Some(SECRET.into()),
        ..RedisConfig::default()
    });
    let url = format!("redis://{}", server.addr());
    never_shown(
        |pw| recipes_redis::RedisClient::builder(url.as_str()).user("default", pw),
        |b| b.connect(),
        "/secrets/redis",
    );
}

#[test]
fn zk_never_shows_the_digest_password() {
    // A digest identity takes any password (the ACL decides), so only the
    // right one's path is run here; SASL refuses a wrong one.
    let hosts = ZkServer::shared().connect_string();
    let name = format!("/recipes-secrets-{}", std::process::id());
    right_never_shown(
        &|pw| {
            recipes_zk::ZkClient::builder(hosts.as_str())
                .session_timeout(Duration::from_secs(5))
                .digest_auth("app", pw)
        },
        &|b| b.connect(),
        &name,
        false,
    );
}

#[test]
fn zk_sasl_never_shows_the_password() {
    let server =
        ZkServer::start_with(integration::ZkConfig::default().with_sasl_user("app", SECRET));
    let hosts = server.connect_string();
    never_shown(
        |pw| {
            recipes_zk::ZkClient::builder(hosts.as_str())
                .session_timeout(Duration::from_secs(5))
                .sasl_digest("app", pw)
        },
        |b| b.connect(),
        "/secrets/zk",
    );
}
