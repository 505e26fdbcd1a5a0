//! A job that runs at most once per interval, however many replicas run it.
//!
//! ```sh
//! # start two or three at once; each tries every second for 12 s:
//! cargo run --example cron_singleton -- replica-1 &
//! cargo run --example cron_singleton -- replica-2 &
//! RECIPES_ETCD=127.0.0.1:2379 cargo run --example cron_singleton -- replica-3
//! RECIPES_REDIS=redis://127.0.0.1:6379 cargo run --example cron_singleton -- replica-4
//! ```
//!
//! Each attempt: `try_lock` (someone else checking right now → skip); read
//! the record of the last run; if the interval has not passed → skip; else
//! do the job and write the new record with a fenced write, which lands only
//! while we still hold the lock. Use the same backend for all replicas
//! (`RECIPES_ZK=host:port`, default 127.0.0.1:2181, `RECIPES_ETCD=host:port`
//! or `RECIPES_REDIS=redis://host:port`).

use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use recipes_core::{Client, Error};

const LOCK: &str = "/examples/cron-singleton";
const RECORD: &str = "/examples/cron-singleton-last-run";
const INTERVAL: Duration = Duration::from_secs(5);
const RUN_FOR: Duration = Duration::from_secs(12);
const TTL: Duration = Duration::from_secs(5);

fn main() -> Result<(), Error> {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| format!("replica-{}", std::process::id()));
    if let Ok(url) = std::env::var("RECIPES_REDIS") {
        let client = recipes_redis::RedisClient::builder(url.as_str())
            .ttl(TTL)
            .connect()?;
        println!("connected to Redis at {url}");
        return run(client, &name);
    }
    let zk = std::env::var("RECIPES_ZK").ok();
    match (zk, std::env::var("RECIPES_ETCD").ok()) {
        (None, Some(endpoint)) => {
            let client = recipes_etcd::EtcdClient::builder([endpoint.as_str()])
                .ttl(TTL)
                .connect()?;
            println!("connected to etcd at {endpoint}");
            run(client, &name)
        }
        (hosts, _) => {
            let hosts = hosts.unwrap_or_else(|| "127.0.0.1:2181".into());
            let client = recipes_zk::ZkClient::builder(hosts.as_str())
                .ttl(TTL)
                .connect()?;
            println!("connected to ZooKeeper at {hosts}");
            run(client, &name)
        }
    }
}

/// The same code for every store: it only needs the core `Client`.
fn run<C: Client>(client: C, name: &str) -> Result<(), Error> {
    let mutex = client.mutex(LOCK)?;
    println!(
        "[{name}] the job runs at most once every {INTERVAL:?} across all replicas; \
         trying every second for {RUN_FOR:?}"
    );
    let stop_at = Instant::now() + RUN_FOR;
    while Instant::now() < stop_at {
        let attempt = || -> Result<(), Error> {
            let Some(guard) = mutex.try_lock()? else {
                println!("[{name}] another replica is checking right now: skip");
                return Ok(());
            };
            let last = client.read(RECORD)?;
            if let Some(record) = due(name, guard.token().get(), last.as_deref()) {
                // Lands only while our lock's own entry exists.
                guard.put(RECORD, record.as_bytes())?;
                println!("[{name}] recorded the run with a fenced write");
            }
            guard.release()
        };
        if let Err(e) = attempt() {
            println!("[{name}] this attempt failed: {e}; trying again next time");
        }
        thread::sleep(Duration::from_secs(1));
    }
    println!("[{name}] done");
    client.close()
}

/// Holding the lock: run the job if the interval has passed since the last
/// run, and return the record to write; `None` to skip.
fn due(name: &str, fence: u64, last: Option<&[u8]>) -> Option<String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    // The record: "<unix millis> <fence> <replica>".
    let last = last.map(String::from_utf8_lossy);
    let mut fields = last.as_deref().unwrap_or_default().split(' ');
    let at = fields.next().and_then(|ms| ms.parse::<u64>().ok());
    let (last_fence, who) = (fields.next().unwrap_or("?"), fields.next().unwrap_or("?"));
    match at {
        Some(ms) => {
            let ago = now.saturating_sub(Duration::from_millis(ms));
            if ago < INTERVAL {
                println!(
                    "[{name}] holding the lock (fence {fence}): last run {:.1} s ago by {who} \
                     (fence {last_fence}), less than {INTERVAL:?}: skip",
                    ago.as_secs_f64()
                );
                return None;
            }
            println!(
                "[{name}] holding the lock (fence {fence}): last run {:.1} s ago by {who} (fence {last_fence}): due",
                ago.as_secs_f64()
            );
        }
        None => println!("[{name}] holding the lock (fence {fence}): no run recorded yet: due"),
    }
    println!("[{name}] >>> running the job");
    thread::sleep(Duration::from_millis(300));
    Some(format!("{} {fence} {name}", now.as_millis()))
}
