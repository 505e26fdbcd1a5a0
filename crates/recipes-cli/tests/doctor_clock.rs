//! `recipes doctor`'s clock-rate check on real servers whose wall clock
//! runs 5 % fast (50,000 ppm, a hundred times what the lease deadlines
//! allow), set up with the harness's clock shim (`integration::clock_shim`,
//! preloaded into the server's processes): the check fails, says by how
//! much and what to fix, and the doctor exits 2: Redis (`TIME`),
//! PostgreSQL (`clock_timestamp()`) and ZooKeeper (a node's mtime, the
//! JVM's clock). etcd is a static Go binary the shim cannot reach (its
//! check reads a lease's remaining TTL); doctor.rs shows every store's
//! healthy clock passing.

mod common;

use common::doctor::{doctor, level};
use integration::{PgConfig, PgServer, RedisConfig, RedisServer, ZkConfig, ZkServer};

/// Five per cent fast.
const RATE: f64 = 1.05;

fn assert_clock_fails(store: &[String]) {
    let (code, out, err) = doctor(store, "10s", &[]);
    assert_eq!(
        code, 2,
        "a failed check exits 2\nstdout:\n{out}\nstderr:\n{err}"
    );
    assert_eq!(level(&out, "clock-rate"), Some("fail"), "{out}");
    let line = out
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("clock-rate"))
        .expect("a clock-rate line");
    // Measured over two seconds: +50,000 ppm, give or take the reads.
    let ppm: f64 = line
        .split("ran ")
        .nth(1)
        .and_then(|rest| rest.split(" ppm").next())
        .and_then(|n| n.trim_start_matches('+').parse().ok())
        .unwrap_or_else(|| panic!("the line says by how much: {line}"));
    assert!(
        (40_000.0..60_000.0).contains(&ppm),
        "the server's clock ran {ppm} ppm fast, set to 50,000: {line}"
    );
    assert!(line.contains("NTP"), "says what to fix: {line}");
    // Every other check still ran: the doctor's own lock was taken and
    // given back.
    assert_eq!(level(&out, "lock"), Some("ok"), "{out}");
}

#[test]
fn doctor_redis_clock_running_fast_fails() {
    let server = RedisServer::start_with(RedisConfig {
        clock_rate: Some(RATE),
        ..RedisConfig::default()
    });
    assert_clock_fails(&["--redis".into(), server.url()]);
}

#[test]
fn doctor_pg_clock_running_fast_fails_in_both_modes() {
    let server = PgServer::start_with(PgConfig::default().with_clock_rate(RATE));
    assert_clock_fails(&["--pg".into(), server.url()]);
    assert_clock_fails(&[
        "--pg".into(),
        server.url(),
        "--pg-mode".into(),
        "session".into(),
    ]);
}

#[test]
fn doctor_zk_clock_running_fast_fails() {
    let server = ZkServer::start_with(ZkConfig::default().with_clock_rate(RATE));
    assert_clock_fails(&["--zk".into(), server.connect_string()]);
}
