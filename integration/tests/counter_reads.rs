//! A counter's waiter does not poll: the reads its store serves during a
//! long idle wait, counted at the server, are the one read that armed the
//! notification (and, where a store keeps one, its safety net's), where
//! the old wait polled every 10 to 200 ms (some 17 reads in 3 s). Each
//! store on a server of its own, so that nothing else reads.
//!
//! - etcd: the server's `etcd_mvcc_range_total` (every range, a
//!   transaction's included; lease keep-alives and watches are none).
//! - Redis: `INFO commandstats`' `HMGET` calls (the counter's read script
//!   is the only one that sends it).
//! - PostgreSQL: the server's log of statements, the counter's read
//!   counted, with the client's safety poll set long (30 s), as a client
//!   that trusts its listener would.

use std::time::Duration;

use integration::{wait_until, EtcdServer, PgServer, RedisServer};
use recipes_core::store::CounterBackend;
use recipes_core::{Client, Counter};

/// The idle wait.
const IDLE: Duration = Duration::from_secs(3);

/// Wait `IDLE` on a counter nobody writes (after a first look, which
/// opens the client's session): `reads()` before and after the wait.
fn idle_reads<B: CounterBackend>(counter: &Counter<B>, reads: &dyn Fn() -> u64) -> u64 {
    counter.set(1).unwrap();
    let mut watch = counter.watch().unwrap();
    assert_eq!(watch.next_timeout(Duration::ZERO).unwrap(), None);
    let before = reads();
    assert_eq!(watch.next_timeout(IDLE).unwrap(), None, "nothing written");
    let served = reads() - before;
    assert!(served >= 1, "the count sees the wait's armed read");
    assert!(counter.delete().unwrap());
    served
}

#[test]
fn an_idle_etcd_counter_wait_reads_once() {
    let server = EtcdServer::start();
    let client = recipes_etcd::EtcdClient::builder(server.endpoints())
        .ttl(Duration::from_secs(30))
        .connect()
        .expect("connect");
    let counter = client.counter("/reads/idle").unwrap();
    let reads = || server.metric_sum("etcd_mvcc_range_total") as u64;
    let served = idle_reads(&counter, &reads);
    assert!(served <= 2, "{served} ranges in an idle wait of {IDLE:?}");
    let _ = client.close();
}

#[test]
fn an_idle_redis_counter_wait_reads_once() {
    let server = RedisServer::start();
    let client = recipes_redis::RedisClient::builder(server.url())
        .ttl(Duration::from_secs(30))
        .connect()
        .expect("connect");
    let counter = client.counter("/reads/idle").unwrap();
    let reads = || {
        let info: String = server.cmd(&["INFO", "commandstats"]);
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_hmget:calls="))
            .and_then(|v| v.split(',').next()?.parse().ok())
            .unwrap_or(0)
    };
    let served = idle_reads(&counter, &reads);
    assert!(served <= 2, "{served} reads in an idle wait of {IDLE:?}");
    let _ = client.close();
}

#[test]
fn an_idle_pg_counter_wait_reads_once() {
    let server = PgServer::start();
    server.sql("ALTER SYSTEM SET log_statement = 'all'");
    server.sql("SELECT pg_reload_conf()");
    wait_until("log_statement is in force", Duration::from_secs(10), || {
        server.sql("SHOW log_statement").trim() == "all"
    });
    let client = recipes_pg::PgClient::builder(server.url())
        .ttl(Duration::from_secs(30))
        .poll_interval(Duration::from_secs(30))
        .connect()
        .expect("connect");
    let counter = client.counter("/reads/idle").unwrap();
    let log = server.dir().join("server.log");
    let reads = || {
        let text = std::fs::read(&log).unwrap_or_default();
        String::from_utf8_lossy(&text)
            .lines()
            .filter(|l| l.contains("SELECT kind, fence, next_seq FROM recipes.names"))
            .count() as u64
    };
    let served = idle_reads(&counter, &reads);
    assert!(served <= 2, "{served} reads in an idle wait of {IDLE:?}");
    let _ = client.close();
}
