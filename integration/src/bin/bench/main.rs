//! The benchmark: M1–M5 against real servers started with fsync on, each
//! figure beside the raw minimum measured in the same run, one JSON object
//! per line (`metric`, `backend`, the figures, `raw`, `violations`).
//!
//! ```sh
//! cargo run --release -p integration --bin bench -- [zk|etcd|pg|redis|all] [M1 … M8] [--quick]
//! ```
//!
//! - **M1** uncontended `lock` + `release`: ops/s, p50, p99, server
//!   requests, client and server CPU per cycle, and the round trip of an
//!   empty blocking call (`bridge_call_p50_us`: the caller's thread to the
//!   client's runtime thread and back, which the raw minimum, issued on
//!   the bench's own thread, does not pay; a cycle makes two calls).
//! - **M2** 2, 4 and 8 clients (each its own session, as separate
//!   processes would be) handing one lock on: acquisitions/s, handoff
//!   p50/p99; violations = overlaps and fence inversions. etcd's raw is
//!   the same handoff by raw RPCs on one persistent watch per contender
//!   (`handoff.rs`); the other stores' is the uncontended raw minimum.
//! - **M3** failover to the next leader after a resignation and after a
//!   crash (etcd, PostgreSQL, Redis: the client stops renewing, as a killed
//!   process would; ZooKeeper: its session killed at the server); the raw
//!   handoff beside it on etcd and ZooKeeper (`failover.rs`).
//! - **M4** 10, 100 and 1,000 waiters on one lock: wakes (queue reads) and
//!   server requests per release (ZooKeeper `mntr`'s packets received,
//!   etcd's gRPC messages received, Redis `INFO`'s commands processed;
//!   PostgreSQL's statistics lag by a second, so none); a raw queue
//!   beside it on etcd and ZooKeeper (`raw_queue.rs`).
//! - **M5** 1, 100 and 10,000 locks held by one client: threads, resident
//!   memory per lock, idle server requests per second (PostgreSQL: the
//!   statements its log shows); a raw holder of as
//!   many keys or nodes beside it on etcd and ZooKeeper (`raw_held.rs`).
//! - **M1c** (Redis; run with M1 too) the uncontended cycle and the raw
//!   loop, interleaved round by round, each counted by the server:
//!   commands (those scripts run included), requests sent and scripts a
//!   cycle, and redis-py's `Lock` beside them (`redis_cycle.rs`).
//! - **M1g**, **M2g** (etcd; run with M1 and M2 too) etcd's Go `Mutex`
//!   beside ours and the raw, rounds interleaved (`go_peer.rs`; the Go
//!   program is built by `scripts/go-etcd-peer`, skipped when missing).
//! - **M1z**, **M2z** (ZooKeeper; run with M1 and M2 too) kazoo's `Lock`
//!   and Curator's `InterProcessMutex` beside ours (and, uncontended, the
//!   raw), rounds interleaved, each peer in processes of its own
//!   (`zk_peers.rs`; a peer that is missing prints one `skipped` line).
//! - **M1p** (PostgreSQL; run with M1 too) each mode's cycle beside the
//!   psycopg2 loop a user writes by hand, rounds interleaved (`pg_cycle.rs`).
//! - **M6** the read-write lock and the multi-lock (`rw.rs`): 8 readers
//!   at once beside 8 raw clients' uncontended cycles at once; a writer's
//!   wait among 4 churning readers (violations = a writer beside a
//!   reader); a multi-lock of 2 and 8 names beside as many mutexes taken
//!   one by one.
//!
//! - **M7** the shared counter (`counter.rs`): `add(1)` by 1, 4 and 8
//!   writers at once, conflicts per add, beside two pings (an add's floor).
//!
//! - **M8** the barrier (`barrier.rs`): its removal to the last of 10 and
//!   100 waiters woken, beside the raw fan-out of the same size: as many
//!   raw waiters on the store's own notification, released by one raw
//!   delete that notifies (`raw_fanout.rs`).
//!
//! A size a store cannot hold open at once (PostgreSQL's session mode
//! keeps a server connection per waiter or held lock) prints a line with
//! `skipped` and the reason instead of figures.
//!
//! Naming metrics (`M1 M2`) runs only those. Each store's server is
//! warmed first, unmeasured: M1's loop and the raw's, each for half a
//! measurement's time (`measures::warm_up`).
//!
//! Redis runs with `appendfsync always` (a lock that survives a restart);
//! `BENCH_REDIS_FSYNC=everysec` or `no` runs it with that setting instead,
//! and `off` without an append-only file, to see what the disk costs.
//!
//! `--quick` runs every measurement small, as a smoke test (`scripts/test`):
//! it fails only when a measurement does not complete or sees a violation.

mod barrier;
mod counter;
mod failover;
mod go_peer;
mod handoff;
mod load;
mod measures;
mod out;
mod pg_cycle;
mod pg_raw;
mod raw;
mod raw_fanout;
mod raw_held;
mod raw_queue;
mod redis_cycle;
mod rw;
mod zk_peers;

use std::time::Duration;

use integration::{
    EtcdConfig, EtcdServer, PgConfig, PgServer, RedisConfig, RedisServer, ZkConfig, ZkServer,
};
use measures::{Sizes, Store, Work};
use recipes_core::Client;

const FULL: Sizes = Sizes {
    seconds: Duration::from_secs(3),
    contenders: &[2, 4, 8],
    rounds: 5,
    waiters: &[10, 100, 1000],
    held: &[1, 100, 10_000],
    idle: Duration::from_secs(3),
};

const QUICK: Sizes = Sizes {
    seconds: Duration::from_millis(300),
    contenders: &[2],
    rounds: 1,
    waiters: &[10],
    held: &[1, 100],
    idle: Duration::from_millis(300),
};

/// One of M1–M8.
type Measure<C> = fn(&Store<C>, &Sizes);

/// The metrics named on the command line (`M1` … `M7`); none named: all.
static ONLY: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Whether `metric` was named on the command line, or none was.
fn wanted(metric: &str) -> bool {
    let only = ONLY.get().map_or(&[][..], Vec::as_slice);
    only.is_empty() || only.iter().any(|m| m.eq_ignore_ascii_case(metric))
}

fn all<C: Client>(store: Store<C>, sizes: &Sizes) {
    let metrics: &[(&str, Measure<C>)] = &[
        ("M1", measures::m1),
        ("M2", measures::m2),
        ("M3", measures::m3),
        ("M4", load::m4),
        ("M5", load::m5),
        ("M6", rw::m6),
        ("M7", counter::m7),
        ("M8", barrier::m8),
    ];
    measures::warm_up(&store, sizes.seconds / 2);
    for (metric, measure) in metrics {
        if wanted(metric) {
            measure(&store, sizes);
        }
    }
}

fn zk(sizes: &Sizes) {
    let server = ZkServer::start_with(ZkConfig::default().with_fsync(true));
    let hosts = server.connect_string();
    let server = std::sync::Arc::new(server);
    let worked = server.clone();
    let alive = server.clone(); // M1z and M2z run after `all` drops the store
    let (h, h2, h3, h4, h5, h6) = (
        hosts.clone(),
        hosts.clone(),
        hosts.clone(),
        hosts.clone(),
        hosts.clone(),
        hosts.clone(),
    );
    let store = Store {
        name: "zk",
        connect: Box::new(move |ttl| {
            recipes_zk::ZkClient::builder(h.as_str())
                .ttl(ttl)
                .connect()
                .unwrap()
        }),
        raw: Some(Box::new(move |s, c| raw::zk(&h2, s, c))),
        raw_handoff: None,
        raw_failover: Some(Box::new(move |crash| failover::zk(&h3, crash))),
        raw_held: Some(Box::new(move |n, probe| raw_held::zk(&h4, n, probe))),
        raw_queue: Some(Box::new(move |w, c, r| raw_queue::zk(&h5, w, c, r))),
        raw_fanout: Some(Box::new(move |n, c, r| raw_fanout::zk(&h6, n, c, r))),
        statements: None,
        requests: Box::new(move || zk_peers::packets(&server)),
        // The server process's CPU (every thread: its `fsync`s too).
        server_work: Box::new(move || {
            Some(Work {
                cpu_seconds: measures::process_cpu(&worked.pid()?.to_string()),
                events: None,
            })
        }),
        most_open: None,
        kill: Box::new(|c: &recipes_zk::ZkClient| c.kill_session().unwrap()),
        kill_is: "session killed at the server",
    };
    all(store, sizes);
    zk_peers::run(&alive, sizes, wanted);
}

fn etcd(sizes: &Sizes) {
    let server = EtcdServer::start_with(EtcdConfig::default().with_fsync(true));
    let endpoints = server.endpoints();
    let server = std::sync::Arc::new(server);
    let worked = server.clone();
    let alive = server.clone(); // M1g and M2g run after `all` drops the store
    let (e, e2, e3, e4, e5, e6, e7) = (
        endpoints.clone(),
        endpoints.clone(),
        endpoints.clone(),
        endpoints.clone(),
        endpoints.clone(),
        endpoints.clone(),
        endpoints.clone(),
    );
    let store = Store {
        name: "etcd",
        connect: Box::new(move |ttl| {
            recipes_etcd::EtcdClient::builder(e.clone())
                .ttl(ttl)
                .connect()
                .unwrap()
        }),
        raw: Some(Box::new(move |s, c| raw::etcd(&e2, s, c))),
        raw_handoff: Some(Box::new(move |n, s| handoff::etcd(&e3, n, s))),
        raw_failover: Some(Box::new(move |crash| failover::etcd(&e4, crash))),
        raw_held: Some(Box::new(move |n, probe| raw_held::etcd(&e5, n, probe))),
        raw_queue: Some(Box::new(move |w, c, r| raw_queue::etcd(&e6, w, c, r))),
        raw_fanout: Some(Box::new(move |n, c, r| raw_fanout::etcd(&e7, n, c, r))),
        statements: None,
        requests: Box::new(move || {
            // Every gRPC message: reads, transactions, watch requests and
            // each lease keep-alive.
            Some(server.metric_sum("grpc_server_msg_received_total") as u64)
        }),
        server_work: Box::new(move || {
            Some(Work {
                cpu_seconds: worked.metric_sum("process_cpu_seconds_total"),
                events: Some(worked.metric_sum("etcd_debugging_mvcc_events_total")),
            })
        }),
        most_open: None,
        kill: Box::new(|c: &recipes_etcd::EtcdClient| c.orphan()),
        kill_is: "renewals stopped (crash)",
    };
    all(store, sizes);
    go_peer::run(&endpoints, sizes, wanted);
    drop(alive);
}

fn redis(sizes: &Sizes) {
    let fsync = std::env::var("BENCH_REDIS_FSYNC").unwrap_or_else(|_| "always".into());
    let aof = match fsync.as_str() {
        "off" => None,
        "always" => Some("always"),
        "everysec" => Some("everysec"),
        "no" => Some("no"),
        other => panic!("BENCH_REDIS_FSYNC={other}: always, everysec, no or off"),
    };
    let server = RedisServer::start_with(RedisConfig {
        aof,
        ..RedisConfig::default()
    });
    let url = server.url();
    let server = std::sync::Arc::new(server);
    let (u, u2, u3, counted, worked) = (
        url.clone(),
        url.clone(),
        url.clone(),
        server.clone(),
        server.clone(),
    );
    let store = Store {
        name: "redis",
        connect: Box::new(move |ttl| {
            recipes_redis::RedisClient::builder(u.as_str())
                .ttl(ttl)
                .connect()
                .unwrap()
        }),
        raw: Some(Box::new(move |s, c| raw::redis(&u2, s, c))),
        raw_handoff: None,
        raw_failover: None,
        raw_held: None,
        raw_queue: None,
        raw_fanout: Some(Box::new(move |n, _, r| raw_fanout::redis(&u3, n, r))),
        statements: None,
        requests: Box::new(move || {
            let info: String = counted.cmd(&["INFO", "stats"]);
            info.lines()
                .find_map(|l| l.strip_prefix("total_commands_processed:"))
                .and_then(|v| v.trim().parse().ok())
        }),
        // The server process's CPU (every thread: its `fsync`s too).
        server_work: Box::new(move || {
            let info: String = worked.cmd(&["INFO", "cpu"]);
            let seconds = |field: &str| -> f64 {
                info.lines()
                    .find_map(|l| l.strip_prefix(field))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0.0)
            };
            Some(Work {
                cpu_seconds: seconds("used_cpu_sys:") + seconds("used_cpu_user:"),
                events: None,
            })
        }),
        most_open: None,
        kill: Box::new(|c: &recipes_redis::RedisClient| c.orphan()),
        kill_is: "renewals stopped (crash)",
    };
    all(store, sizes);
    if wanted("M1") || wanted("M1c") {
        redis_cycle::m1c(&server, &url, sizes.seconds, sizes.rounds);
    }
}

/// PostgreSQL in both modes, each beside its own raw statements.
fn pg(sizes: &Sizes) {
    // One server: each store's lock names are its own (`Store::lock_name`),
    // as a name used in one mode is refused in the other.
    let config = PgConfig::default().with_fsync(true);
    // Room for the measurement's other clients and the raw connections.
    let session_most = config.max_connections() as usize * 3 / 4;
    let server = std::sync::Arc::new(PgServer::start_with(config));
    for (name, mode) in [
        ("pg-lease", recipes_pg::PgMode::Lease),
        ("pg-session", recipes_pg::PgMode::Session),
    ] {
        let (url, raw_url, handoff_url) = (server.url(), server.url(), server.url());
        let fanout_url = server.url();
        let store = Store {
            name,
            connect: Box::new(move |ttl| {
                recipes_pg::PgClient::builder(url.as_str())
                    .mode(mode)
                    .ttl(ttl)
                    .connect()
                    .unwrap()
            }),
            raw: Some(Box::new(move |s, c| match mode {
                recipes_pg::PgMode::Session => raw::pg_session(&raw_url, s, c),
                _ => raw::pg_lease(&raw_url, s, c),
            })),
            // Lease mode's handoff beside the raw one by NOTIFY.
            raw_handoff: match mode {
                recipes_pg::PgMode::Lease => {
                    Some(Box::new(move |n, s| pg_raw::handoff(&handoff_url, n, s)))
                }
                _ => None,
            },
            raw_failover: None,
            raw_held: None,
            raw_queue: None,
            raw_fanout: Some(Box::new(move |n, _, r| {
                raw_fanout::pg(&fanout_url, n, session_most, r)
            })),
            requests: Box::new(|| None),
            server_work: {
                let server = server.clone();
                Box::new(move || pg_raw::server_cpu(&server))
            },
            statements: Some({
                let server = server.clone();
                Box::new(move |run| pg_raw::counted(&server, run))
            }),
            // Session mode waits and holds on a connection each; lease
            // mode shares a few per client.
            most_open: match mode {
                recipes_pg::PgMode::Session => Some((
                    session_most,
                    "session mode holds a server connection per waiter or held lock",
                )),
                _ => None,
            },
            kill: Box::new(|c: &recipes_pg::PgClient| c.orphan()),
            kill_is: "renewals stopped (crash)",
        };
        all(store, sizes);
        pg_extra(&server, (name, mode), sizes);
    }
    if wanted("M1") || wanted("M1p") {
        pg_cycle::m1p(&server, sizes.seconds, sizes.rounds);
    }
}

/// Statements per cycle (M1) of `mode`, and lease mode's plain `NOTIFY`
/// round trip (M2), when those metrics run (`pg_raw.rs`).
fn pg_extra(server: &PgServer, (label, mode): (&'static str, recipes_pg::PgMode), sizes: &Sizes) {
    let only = ONLY.get().map_or(&[][..], Vec::as_slice);
    let runs = |m: &str| only.is_empty() || only.iter().any(|o| o.eq_ignore_ascii_case(m));
    if runs("M1") {
        let client = recipes_pg::PgClient::builder(server.url())
            .ttl(Duration::from_secs(10))
            .mode(mode)
            .connect()
            .unwrap();
        let url = server.url();
        let raw = move |s, c| match mode {
            recipes_pg::PgMode::Session => raw::pg_session(&url, s, c),
            _ => raw::pg_lease(&url, s, c),
        };
        let cycles = if sizes.rounds > 1 { 500 } else { 20 };
        pg_raw::statements(server, (label, &client), cycles, &raw, sizes.seconds / 3);
        let _ = client.close();
    }
    if runs("M2") && mode == recipes_pg::PgMode::Lease {
        pg_raw::notify_line(&server.url());
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sizes = if args.iter().any(|a| a == "--quick") {
        &QUICK
    } else {
        &FULL
    };
    let (metrics, stores): (Vec<&String>, Vec<&String>) = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .partition(|a| (2..=3).contains(&a.len()) && a.to_ascii_uppercase().starts_with('M'));
    ONLY.set(metrics.into_iter().cloned().collect())
        .expect("set once");
    let which = stores.first().map_or("all", |s| s.as_str());
    match which {
        "zk" => zk(sizes),
        "etcd" => etcd(sizes),
        "pg" => pg(sizes),
        "redis" => redis(sizes),
        "all" => {
            zk(sizes);
            etcd(sizes);
            pg(sizes);
            redis(sizes);
        }
        other => {
            eprintln!("bench: unknown backend {other:?}; use zk, etcd, pg, redis or all");
            std::process::exit(64);
        }
    }
    let violations = out::VIOLATIONS.load(std::sync::atomic::Ordering::SeqCst);
    if violations > 0 {
        eprintln!("bench: {violations} violation(s): see the lines with violations > 0");
        std::process::exit(1);
    }
}
