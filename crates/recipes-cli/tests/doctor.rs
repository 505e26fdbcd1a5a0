//! `recipes doctor` on real servers set up with each hazard it flags, and
//! on a healthy setup of each store, which passes clean (`--strict` exits
//! 0). Also `recipes completions` and `recipes man`.

mod common;

use std::time::Duration;

use common::doctor::{doctor, level};
use common::{recipes, Store};
use integration::{
    EtcdServer, PgBouncer, PgServer, PoolMode, Proxy, RedisConfig, RedisServer, ZkConfig, ZkServer,
};

/// A healthy setup: no check warns or fails, `--strict` exits 0, the
/// doctor's lock was taken and nothing was left.
fn assert_clean(store: &[String], ttl: &str) -> String {
    let (code, out, err) = doctor(store, ttl, &["--strict"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    for l in out.lines().skip(1) {
        assert!(
            !l.starts_with("warn") && !l.starts_with("fail"),
            "a healthy store warned or failed: {l}\n{out}"
        );
    }
    assert_eq!(level(&out, "lock"), Some("ok"), "{out}");
    assert!(out.contains("nothing left"), "{out}");
    assert_eq!(level(&out, "granted-ttl"), Some("ok"), "{out}");
    assert_eq!(level(&out, "round-trip"), Some("ok"), "{out}");
    out
}

#[test]
fn doctor_redis_healthy_passes_clean_and_leaves_no_key() {
    let server = RedisServer::start_with(RedisConfig {
        aof: Some("everysec"),
        ..RedisConfig::default()
    });
    let out = assert_clean(&["--redis".into(), server.url()], "10s");
    assert_eq!(level(&out, "maxmemory-policy"), Some("ok"), "{out}");
    assert_eq!(level(&out, "appendonly"), Some("ok"), "{out}");
    assert_eq!(level(&out, "appendfsync"), Some("ok"), "{out}");
    assert_eq!(level(&out, "replicas"), Some("ok"), "{out}");
    assert_eq!(level(&out, "cluster"), Some("ok"), "{out}");
    assert_eq!(level(&out, "clock-rate"), Some("ok"), "{out}");
    // Only the counters a released lock keeps by design (fences and
    // session ids never go back): no session, hold or queue key.
    let left = server.keys("*");
    let kept = ["{recipes}:fence:/recipes-doctor/lock", "{recipes}:sessions"];
    assert!(
        left.iter().all(|k| kept.contains(&k.as_str())),
        "left: {left:?}"
    );
}

#[test]
fn doctor_redis_evicting_policy_fails_in_the_librarys_words() {
    let server = RedisServer::start();
    let _: String = server.cmd(&["CONFIG", "SET", "maxmemory", "2mb"]);
    let _: String = server.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let (code, out, err) = doctor(&["--redis".into(), server.url()], "10s", &[]);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(level(&out, "connect"), Some("fail"), "{out}");
    // The library refuses the server at connect, with the same function's
    // words the doctor prints.
    let refused = recipes_redis::RedisClient::connect(server.url())
        .expect_err("an evicting server is refused at connect");
    let words = recipes_redis::eviction_hazard("allkeys-lru", "X").expect("a hazard");
    let core = words
        .split("X")
        .nth(1)
        .expect("the words after the address");
    assert!(refused.to_string().contains(core), "{refused}");
    assert!(out.contains(core), "{out}");
    assert!(
        server.keys("*").is_empty(),
        "the refused connect wrote nothing"
    );
}

#[test]
fn doctor_redis_without_aof_warns_and_strict_exits_1() {
    let server = RedisServer::shared();
    let store = ["--redis".into(), server.url()];
    let (code, out, err) = doctor(&store, "10s", &[]);
    assert_eq!(code, 0, "a warning alone exits 0: {out}\n{err}");
    assert_eq!(level(&out, "appendonly"), Some("warn"), "{out}");
    assert!(out.contains("appendonly yes"), "says what to change: {out}");
    let (strict, out, _) = doctor(&store, "10s", &["--strict", "--json"]);
    assert_eq!(strict, 1, "{out}");
    assert!(out.starts_with("{\"store\":"), "{out}");
    assert!(
        out.contains("{\"check\":\"appendonly\",\"level\":\"warn\""),
        "{out}"
    );
}

#[test]
fn doctor_redis_appendfsync_no_warns() {
    let server = RedisServer::shared_with(RedisConfig {
        aof: Some("no"),
        ..RedisConfig::default()
    });
    let (code, out, err) = doctor(&["--redis".into(), server.url()], "10s", &["--strict"]);
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(level(&out, "appendonly"), Some("ok"), "{out}");
    assert_eq!(level(&out, "appendfsync"), Some("warn"), "{out}");
    assert!(
        out.contains("appendfsync everysec"),
        "says what to set: {out}"
    );
}

#[test]
fn doctor_redis_replicas_without_min_replicas_to_write_warn() {
    let primary = RedisServer::start_with(RedisConfig {
        aof: Some("everysec"),
        ..RedisConfig::default()
    });
    let _replica = RedisServer::start_with(RedisConfig {
        replica_of: Some(primary.addr()),
        ..RedisConfig::default()
    });
    integration::wait_until("the replica is in sync", Duration::from_secs(20), || {
        let info: String = primary.cmd(&["INFO", "replication"]);
        info.contains("connected_slaves:1") && info.contains("state=online")
    });
    let store = ["--redis".into(), primary.url()];
    let (code, out, err) = doctor(&store, "10s", &["--strict"]);
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(level(&out, "replicas"), Some("warn"), "{out}");
    assert!(out.contains("set min-replicas-to-write 1"), "{out}");
    let _: String = primary.cmd(&["CONFIG", "SET", "min-replicas-to-write", "1"]);
    let out = assert_clean(&store, "10s");
    assert!(out.contains("1 replicas, min-replicas-to-write 1"), "{out}");
}

#[test]
fn doctor_redis_cluster_mode_fails_with_the_reason() {
    let server = RedisServer::start_with(RedisConfig {
        extra_args: ["--cluster-enabled", "yes"].map(String::from).to_vec(),
        ..RedisConfig::default()
    });
    let (code, out, err) = doctor(&["--redis".into(), server.url()], "10s", &[]);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    // The library refuses the node at connect, in the doctor's words.
    let words = recipes_redis::cluster_hazard("X");
    let reason = words
        .split("X")
        .nth(1)
        .expect("the words after the address");
    assert!(out.contains(reason), "gives the reason: {out}");
    let refused = recipes_redis::RedisClient::connect(server.url())
        .expect_err("a cluster node is refused at connect");
    assert!(refused.to_string().contains(reason), "{refused}");
}

#[test]
fn doctor_ttl_close_to_the_round_trip_warns() {
    let server = RedisServer::shared();
    let proxy = Proxy::start(server.addr());
    // Every reply 150 ms late: p99 >= 150 ms, and 10 x p99 > the 1 s TTL.
    proxy.set_delay(Duration::from_millis(150));
    let store = Store::Redis.flag_via(&proxy);
    let (code, out, err) = doctor(&store, "1s", &["--strict"]);
    let round_trip = level(&out, "round-trip");
    assert!(
        matches!(round_trip, Some("warn" | "fail")),
        "{out}\nstderr:\n{err}"
    );
    assert!(out.contains("raise --ttl to at least"), "{out}");
    assert_ne!(code, 0, "{out}");
}

#[test]
fn doctor_zk_max_session_timeout_below_the_ttl_fails() {
    let server = ZkServer::start_with(
        ZkConfig::default()
            .with_session_timeouts(Duration::from_millis(400), Duration::from_secs(4)),
    );
    let (code, out, err) = doctor(&["--zk".into(), server.connect_string()], "10s", &[]);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    // The library refuses the short grant at connect, in the words of
    // core's granted_ttl_hazard; the four-letter words say why.
    assert_eq!(level(&out, "connect"), Some("fail"), "{out}");
    assert!(out.contains("below the 10s asked for"), "{out}");
    assert_eq!(level(&out, "session-timeouts"), Some("fail"), "{out}");
    assert!(out.contains("raise maxSessionTimeout to at least"), "{out}");
    // The library's refusal, in the same words.
    let refused = recipes_zk::ZkClient::builder(server.connect_string())
        .session_timeout(Duration::from_secs(10))
        .connect()
        .expect_err("a grant below the asked TTL is refused");
    assert!(
        matches!(refused, recipes_core::Error::InvalidArgument(_)),
        "{refused:?}"
    );
    let words = recipes_core::store::granted_ttl_hazard(
        "ZooKeeper",
        Duration::from_secs(10),
        Duration::from_secs(4),
    )
    .expect("a hazard");
    assert!(refused.to_string().contains(&words), "{refused}");
    assert!(out.contains(&words), "{out}");
}

#[test]
fn doctor_zk_healthy_passes_clean() {
    let server = ZkServer::shared();
    let out = assert_clean(&Store::Zk.flag(), "10s");
    for check in ["session-timeouts", "ensemble", "mntr", "clock-rate"] {
        assert_eq!(level(&out, check), Some("ok"), "{check}: {out}");
    }
    // The clock node is deleted; its container parent empty.
    let clock = server.facts().children("/recipes-doctor");
    assert!(
        clock.iter().all(|c| !c.starts_with("clock")),
        "left: {clock:?}"
    );
}

#[test]
fn doctor_zk_four_letter_words_not_allowed_says_which_setting() {
    let server = ZkServer::start_with(ZkConfig::default().with_four_letter_words("srvr,ruok"));
    let (code, out, err) = doctor(
        &["--zk".into(), server.connect_string()],
        "10s",
        &["--strict"],
    );
    assert_eq!(code, 0, "a skip is no warning: {out}\n{err}");
    for check in ["session-timeouts", "mntr"] {
        assert_eq!(level(&out, check), Some("skip"), "{check}: {out}");
    }
    assert!(out.contains("does not allow conf"), "{out}");
    assert!(out.contains("does not allow mntr"), "{out}");
    assert!(
        out.contains("4lw.commands.whitelist=srvr,conf,mntr"),
        "{out}"
    );
}

#[test]
fn doctor_pgbouncer_transaction_mode_with_session_mode_fails() {
    let bouncer = PgBouncer::shared(PoolMode::Transaction);
    let store = [
        "--pg".into(),
        bouncer.url(),
        "--pg-mode".into(),
        "session".into(),
    ];
    let (code, out, err) = doctor(&store, "10s", &[]);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(level(&out, "connect"), Some("fail"), "{out}");
    assert!(
        out.contains("transaction"),
        "names the pooler's mode: {out}"
    );
}

#[test]
fn doctor_pg_healthy_passes_clean_in_both_modes() {
    let server = PgServer::shared();
    let out = assert_clean(&["--pg".into(), server.url()], "10s");
    assert_eq!(level(&out, "schema"), Some("ok"), "{out}");
    assert_eq!(level(&out, "clock-rate"), Some("ok"), "{out}");
    // Session mode with the server's keepalives brought within the TTL
    // for this connection (2 + 1 x 3 = 5 s).
    let url = format!(
        "{}?options=-c%20tcp_keepalives_idle%3D2%20-c%20tcp_keepalives_interval%3D1\
         %20-c%20tcp_keepalives_count%3D3",
        server.url()
    );
    let session = ["--pg".into(), url, "--pg-mode".into(), "session".into()];
    let out = assert_clean(&session, "10s");
    assert_eq!(level(&out, "tcp_keepalives"), Some("ok"), "{out}");
}

#[test]
fn doctor_pg_synchronous_commit_off_and_a_short_idle_transaction_timeout_warn() {
    // The role's settings as a session sees them, set through the URL.
    let url = format!(
        "{}?options=-c%20synchronous_commit%3Doff\
         %20-c%20idle_in_transaction_session_timeout%3D2000",
        PgServer::shared().url()
    );
    let (code, out, err) = doctor(&["--pg".into(), url], "10s", &["--strict"]);
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(level(&out, "synchronous_commit"), Some("warn"), "{out}");
    assert!(out.contains("set synchronous_commit = on"), "{out}");
    assert_eq!(level(&out, "idle_in_transaction"), Some("warn"), "{out}");
    assert!(out.contains("raise it above the TTL"), "{out}");
}

/// A primary with a streaming standby: replicated asynchronously, a
/// failover may lose the last fence bumps (a warning); with the standby
/// named in `synchronous_standby_names` it passes; the standby itself is
/// a failure (in recovery, it refuses every write).
#[test]
fn doctor_pg_async_standby_warns_a_sync_one_passes_and_the_standby_fails() {
    let primary = PgServer::start();
    let standby = primary.standby();
    let at = |server: &PgServer| vec!["--pg".to_owned(), server.url()];
    let (code, out, err) = doctor(&at(&primary), "10s", &["--strict"]);
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(level(&out, "replication"), Some("warn"), "{out}");
    assert!(out.contains("replicated asynchronously"), "{out}");
    assert!(out.contains("set synchronous_standby_names"), "{out}");
    primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'");
    primary.sql("SELECT pg_reload_conf()");
    let (code, out, err) = doctor(&at(&primary), "10s", &[]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(level(&out, "replication"), Some("ok"), "{out}");
    assert!(out.contains("synchronous_standby_names '*'"), "{out}");
    let (code, out, err) = doctor(&at(&standby), "10s", &[]);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(level(&out, "connect"), Some("fail"), "{out}");
    assert!(out.contains("standby in recovery"), "{out}");
    assert!(out.contains("connect to the primary"), "{out}");
    // The library refuses it at connect in the same words.
    let refused = recipes_pg::PgClient::connect(standby.url())
        .expect_err("a standby refuses the session's write");
    assert!(
        matches!(refused, recipes_core::Error::InvalidArgument(_)),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("connect to the primary"),
        "{refused}"
    );
}

#[test]
fn doctor_pg_role_without_rights_on_the_schema_fails_naming_them() {
    let server = PgServer::shared();
    // The schema exists (made by a role that may), the role has no right.
    let owner = recipes_pg::PgClient::connect(server.url()).expect("the superuser connects");
    recipes_core::Client::close(owner).expect("closes");
    let sql = "DO $$ BEGIN CREATE ROLE doctor_no_rights LOGIN; \
               EXCEPTION WHEN duplicate_object THEN NULL; END $$";
    integration::psql::psql(
        server.addr(),
        "postgres",
        "recipes",
        sql,
        Duration::from_secs(10),
    )
    .expect("the role is made");
    let store = ["--pg".into(), server.url_as("doctor_no_rights")];
    let (code, out, err) = doctor(&store, "10s", &[]);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    // Refused at connect, by the library, naming the schema and the fix.
    assert_eq!(level(&out, "connect"), Some("fail"), "{out}");
    assert!(
        out.contains("permission denied for schema recipes"),
        "{out}"
    );
    assert!(out.contains("grant the role the privileges"), "{out}");
}

#[test]
fn doctor_pg_session_mode_with_keepalives_longer_than_the_ttl_warns() {
    // The system's default keepalives (Linux: 7200 + 75 x 9 s).
    let store = [
        "--pg".into(),
        PgServer::shared().url(),
        "--pg-mode".into(),
        "session".into(),
    ];
    let (code, out, err) = doctor(&store, "10s", &["--strict"]);
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(level(&out, "tcp_keepalives"), Some("warn"), "{out}");
    assert!(out.contains("longer than the TTL 10.0 s"), "{out}");
    assert!(out.contains("tcp_keepalives_idle"), "{out}");
    // Lease mode does not depend on them.
    let (code, out, _) = doctor(
        &["--pg".into(), PgServer::shared().url()],
        "10s",
        &["--strict"],
    );
    assert_eq!(code, 0, "{out}");
}

#[test]
fn doctor_etcd_healthy_passes_clean() {
    let server = EtcdServer::shared_version("3.5.34");
    let out = assert_clean(&["--etcd".into(), server.endpoint()], "10s");
    for check in ["leader", "members", "permissions", "clock-rate"] {
        assert_eq!(level(&out, check), Some("ok"), "{check}: {out}");
    }
    // The clock lease is revoked, the access probe's key deleted.
    assert!(server
        .facts()
        .keys_with_prefix("/recipes-doctor/")
        .is_empty());
}

#[test]
fn doctor_etcd_user_without_rights_on_the_prefix_fails_naming_them() {
    let server = EtcdServer::start();
    server.enable_app_auth("app-secret");
    let as_app = |prefix: &str| {
        let out = recipes()
            .args([
                "--etcd",
                &server.endpoint(),
                "--user",
                "app",
                "--ttl",
                "10s",
            ])
            .args(["doctor", "--prefix", prefix])
            .env("RECIPES_PASSWORD", "app-secret")
            .output()
            .expect("recipes runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code().expect("exits"), text)
    };
    // The role may read and write /app/ only.
    let (code, out) = as_app("/other/");
    assert_eq!(code, 2, "{out}");
    assert_eq!(level(&out, "permissions"), Some("fail"), "{out}");
    assert!(
        out.contains("may not read and write the keys under /other/"),
        "{out}"
    );
    assert!(out.contains("readwrite /other/"), "names the grant: {out}");
    let (_, out) = as_app("/app/");
    assert_eq!(level(&out, "permissions"), Some("ok"), "{out}");
    assert_eq!(level(&out, "lock"), Some("ok"), "{out}");
}

#[test]
fn doctor_etcd_with_known_lease_bugs_fails() {
    // Debian's etcd 3.4.23: before 3.4.31's fix of leases wrongly revoked.
    let (code, out, err) = doctor(&Store::Etcd.flag(), "10s", &[]);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(level(&out, "version"), Some("fail"), "{out}");
    assert!(out.contains("fixed in 3.4.31"), "{out}");
}

#[test]
fn completions_and_man_are_generated() {
    for (shell, mark) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef recipes"),
        ("fish", "complete -c recipes"),
    ] {
        let out = recipes().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(mark), "{shell}: {text}");
        assert!(text.contains("doctor"), "{shell} completes the subcommands");
    }
    let out = recipes().arg("man").output().unwrap();
    assert!(out.status.success());
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.contains(".TH recipes"), "{page}");
    assert!(page.contains("\\-\\-ttl"), "{page}");
    let bad = recipes().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(64));
}
