//! `recipes doctor` over TLS: the expiry of the certificate each server
//! shows in its handshake (a warning within 30 days, a failure once
//! expired), on real servers given a certificate that expires in 10 days,
//! one that expired in 2020, and one that does not, on every store.

mod common;

use std::process::Stdio;

use common::recipes;
use integration::pg_server::PG_TLS_USER;
use integration::{
    EtcdConfig, EtcdServer, PgConfig, PgServer, RedisConfig, RedisServer, TestPki, ZkConfig,
    ZkServer,
};

/// Run `recipes STORE --cacert .. --cert .. --key .. doctor EXTRA`: exit
/// status and stdout (stderr in the panic messages).
fn doctor_tls(store: [&str; 2], extra: &[&str]) -> (i32, String) {
    let pki = TestPki::shared();
    let out = recipes()
        .args(store)
        .arg("--cacert")
        .arg(&pki.ca)
        .arg("--cert")
        .arg(&pki.client.cert)
        .arg("--key")
        .arg(&pki.client.key)
        .args(["--ttl", "10s", "doctor"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("recipes runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (
        out.status.code().expect("recipes exits"),
        format!("{stdout}\nstderr:\n{stderr}"),
    )
}

/// The line of the check `name`.
fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no {name} line: {out}"))
}

#[test]
fn doctor_tls_certificate_expiring_within_30_days_warns() {
    let pki = TestPki::shared();
    let tls = pki.server_tls_with(&pki.expiring_server, false);
    let server = RedisServer::start_with(RedisConfig {
        aof: Some("everysec"),
        tls: Some(tls),
        ..RedisConfig::default()
    });
    let addr = server.addr().to_string();
    let (code, out) = doctor_tls(["--redis", &addr], &[]);
    assert_eq!(code, 0, "a warning alone exits 0: {out}");
    let expiry = line(&out, "tls-expiry");
    assert!(expiry.starts_with("warn"), "{out}");
    // Made to expire 10 days from now: 9 or 10 whole days are left.
    assert!(
        expiry.contains("(in 9 days)") || expiry.contains("(in 10 days)"),
        "{expiry}"
    );
    assert!(expiry.contains("renew the server certificate"), "{expiry}");
    assert!(line(&out, "lock").starts_with("ok"), "{out}");
    let (strict, out) = doctor_tls(["--redis", &addr], &["--strict"]);
    assert_eq!(strict, 1, "{out}");
}

#[test]
fn doctor_tls_pg_certificate_far_from_expiry_is_ok() {
    // PostgreSQL opens TLS after its SSLRequest: the check speaks it too.
    let tls = TestPki::shared().server_tls(true);
    let server = PgServer::start_with(PgConfig::default().with_tls(tls));
    let (code, out) = doctor_tls(["--pg", &server.url_as(PG_TLS_USER)], &["--strict"]);
    assert_eq!(code, 0, "{out}");
    let expiry = line(&out, "tls-expiry");
    assert!(expiry.starts_with("ok"), "{out}");
    assert!(expiry.contains("expires on 2124-01-01"), "{expiry}");
}

#[test]
fn doctor_tls_etcd_certificate_far_from_expiry_is_ok() {
    let tls = TestPki::shared().server_tls(true);
    let server = EtcdServer::start_with(EtcdConfig::default().with_tls(tls));
    let (_, out) = doctor_tls(["--etcd", &server.client_addr().to_string()], &[]);
    let expiry = line(&out, "tls-expiry");
    assert!(expiry.starts_with("ok"), "{out}");
    assert!(expiry.contains("expires on 2124-01-01"), "{expiry}");
}

#[test]
fn doctor_tls_zk_certificate_far_from_expiry_is_ok() {
    let tls = TestPki::shared().server_tls(true);
    let server = ZkServer::start_with(ZkConfig::default().with_tls(tls));
    let (code, out) = doctor_tls(["--zk", &server.secure_addr().to_string()], &["--strict"]);
    assert_eq!(code, 0, "{out}");
    let expiry = line(&out, "tls-expiry");
    assert!(expiry.starts_with("ok"), "{out}");
    assert!(expiry.contains("expires on 2124-01-01"), "{expiry}");
}

#[test]
fn doctor_tls_expired_certificate_fails_and_says_so_when_the_connect_fails() {
    let pki = TestPki::shared();
    let tls = pki.server_tls_with(&pki.expired_server, false);
    let server = RedisServer::start_with(RedisConfig {
        aof: Some("everysec"),
        tls: Some(tls),
        ..RedisConfig::default()
    });
    let (code, out) = doctor_tls(["--redis", &server.addr().to_string()], &[]);
    assert_eq!(code, 2, "{out}");
    assert!(line(&out, "connect").starts_with("fail"), "{out}");
    let expiry = line(&out, "tls-expiry");
    assert!(expiry.starts_with("fail"), "{out}");
    assert!(expiry.contains("expired on 2020-01-01"), "{expiry}");
}
