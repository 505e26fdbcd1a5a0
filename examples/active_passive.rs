//! A service with one active replica and hot standbys: a leader latch picks
//! the active one, which does fenced writes while it is active. Kill it and
//! a standby takes over with a higher fence.
//!
//! ```sh
//! # three replicas; kill the one that says ACTIVE and watch another take over
//! cargo run --example active_passive -- replica-1 &
//! cargo run --example active_passive -- replica-2 &
//! cargo run --example active_passive -- replica-3 &
//! ```
//!
//! Arguments: the replica's name (default `replica-<pid>`) and how many
//! seconds it runs before it leaves (default 15). Backend:
//! `RECIPES_ZK=host:port` (default 127.0.0.1:2181), `RECIPES_ETCD=host:port` or
//! `RECIPES_REDIS=redis://host:port`.
//! A killed replica's session or lease lapses after 4 s; then a standby
//! becomes active.

use std::time::{Duration, Instant};

use recipes_core::{Client, Error, FenceGate};

const NAME: &str = "/examples/active-passive";
const TTL: Duration = Duration::from_secs(4);

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let id = args
        .next()
        .unwrap_or_else(|| format!("replica-{}", std::process::id()));
    let run_for = Duration::from_secs(args.next().and_then(|s| s.parse().ok()).unwrap_or(15));
    let stop_at = Instant::now() + run_for;

    if let Ok(url) = std::env::var("RECIPES_REDIS") {
        let client = recipes_redis::RedisClient::builder(url.as_str())
            .ttl(TTL)
            .connect()?;
        println!("[{id}] connected to Redis at {url}");
        return run(client, &id, stop_at);
    }
    let zk = std::env::var("RECIPES_ZK").ok();
    match (zk, std::env::var("RECIPES_ETCD").ok()) {
        (None, Some(endpoint)) => {
            let client = recipes_etcd::EtcdClient::builder([endpoint.as_str()])
                .ttl(TTL)
                .connect()?;
            println!("[{id}] connected to etcd at {endpoint}");
            run(client, &id, stop_at)
        }
        (hosts, _) => {
            let hosts = hosts.unwrap_or_else(|| "127.0.0.1:2181".into());
            let client = recipes_zk::ZkClient::builder(hosts.as_str())
                .ttl(TTL)
                .connect()?;
            println!("[{id}] connected to ZooKeeper at {hosts}");
            run(client, &id, stop_at)
        }
    }
}

/// The same code for every store: it only needs the core `Client`.
fn run<C: Client>(client: C, id: &str, stop_at: Instant) -> Result<(), Error> {
    let latch = client.leader_latch(NAME, id)?;
    latch.start();
    let run_for = stop_at.saturating_duration_since(Instant::now());
    println!("[{id}] joined {NAME} as a standby; running for {run_for:?}");

    // The resource the active replica writes to. In-memory here, so each
    // process has its own; in production it is shared and checks the fence
    // itself: a row with a fence column (`UPDATE … WHERE fence <= $tok`),
    // or a store that compares tokens. A deposed replica that still writes
    // carries a lower fence than the new one and is refused.
    let resource = FenceGate::new();
    let mut writes = 0;
    let mut seen_leader = None;
    while Instant::now() < stop_at {
        let left = stop_at.saturating_duration_since(Instant::now());
        if !latch.await_leadership(left.min(Duration::from_secs(1))) {
            let leader = latch.leader().ok().flatten().map(|p| p.id);
            if leader != seen_leader {
                match &leader {
                    Some(other) => println!("[{id}] standby: {other} is active"),
                    None => println!("[{id}] standby: no replica is active right now"),
                }
                seen_leader = leader;
            }
            continue;
        }
        let Some((fence, lost)) = latch.leadership() else {
            continue;
        };
        println!("[{id}] ACTIVE now, with fence {fence}: every write carries it");
        seen_leader = Some(id.to_owned());
        while Instant::now() < stop_at {
            // Check before each write; the fence covers a pause after it.
            if lost.is_lost() {
                break;
            }
            match resource.admit(fence) {
                Ok(()) => {
                    writes += 1;
                    println!("[{id}] write #{writes} accepted with fence {fence}");
                }
                Err(e) => {
                    println!("[{id}] write refused: {e}");
                    break;
                }
            }
            // Wait a second, waking at once if the leadership is lost.
            if lost.wait_timeout(Duration::from_secs(1)).is_some() {
                break;
            }
        }
        if let Some(reason) = lost.reason() {
            println!("[{id}] no longer active ({reason}); back to standby");
        }
    }
    println!("[{id}] time is up after {writes} writes: leaving the election (a standby, if any, takes over)");
    if let Err(e) = latch.close() {
        println!("leaving the election: {e}");
    }
    client.close()
}
