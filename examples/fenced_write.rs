//! The paused-holder story, end to end in one process: why a lock needs a
//! fence.
//!
//! ```sh
//! cargo run --example fenced_write                            # ZooKeeper at 127.0.0.1:2181
//! RECIPES_ETCD=127.0.0.1:2379 cargo run --example fenced_write
//! RECIPES_REDIS=redis://127.0.0.1:6379 cargo run --example fenced_write
//! ```
//!
//! 1. Holder A takes the lock and writes, fenced by its token.
//! 2. A "pauses" (a GC pause, a stopped VM) for longer than its lease.
//! 3. The lease runs out at the server; B takes the lock with a higher token
//!    and writes.
//! 4. A wakes up and, unaware, writes again: the resource's `FenceGate`
//!    refuses A's stale token, and so does the store's fenced write.
//!
//! The pause is real as far as the server can tell. With etcd, A's client
//! stops renewing its lease (`EtcdClient::orphan`), exactly as a stopped
//! process would, and etcd expires it. With ZooKeeper, A's session is ended
//! at the server as its expiry would end it (`ZkClient::kill_session`).
//! Either way A's guard object stays in A's hands throughout. Everything
//! but that one step is the same code for both stores (`run`).

use std::time::{Duration, Instant};

use recipes_core::{Client, Error, FenceGate, FencingToken};

const LOCK: &str = "/examples/fenced-write";
const DATA: &str = "/examples/fenced-write-data";

fn main() -> Result<(), Error> {
    if let Ok(url) = std::env::var("RECIPES_REDIS") {
        println!("backend: Redis at {url}");
        let connect = |ttl| {
            recipes_redis::RedisClient::builder(url.as_str())
                .ttl(ttl)
                .connect()
        };
        let (a, b) = (
            connect(Duration::from_secs(2))?,
            connect(Duration::from_secs(5))?,
        );
        return run(a, b, |a| {
            println!(
                "2. A pauses. SIMULATED: A's client stops renewing its session (as a \
                 stopped process would); Redis will expire it after the {:?} TTL",
                a.granted_ttl()
            );
            a.orphan();
            Ok(())
        });
    }
    let zk = std::env::var("RECIPES_ZK").ok();
    match (zk, std::env::var("RECIPES_ETCD").ok()) {
        (None, Some(endpoint)) => {
            println!("backend: etcd at {endpoint}");
            // A short TTL so the story takes seconds; B's client is
            // separate, as if B were another machine.
            let connect = |ttl| {
                recipes_etcd::EtcdClient::builder([endpoint.as_str()])
                    .ttl(ttl)
                    .connect()
            };
            let (a, b) = (
                connect(Duration::from_secs(2))?,
                connect(Duration::from_secs(5))?,
            );
            run(a, b, |a| {
                println!(
                    "2. A pauses. SIMULATED: A's client stops renewing its lease (as a \
                     stopped process would); etcd will expire it after the {:?} TTL",
                    a.granted_ttl()
                );
                a.orphan();
                Ok(())
            })
        }
        (hosts, _) => {
            let hosts = hosts.unwrap_or_else(|| "127.0.0.1:2181".into());
            println!("backend: ZooKeeper at {hosts}");
            let connect = || {
                recipes_zk::ZkClient::builder(hosts.as_str())
                    .ttl(Duration::from_secs(4))
                    .connect()
            };
            // Two clients, two sessions: as if A and B ran on different
            // machines.
            let (a, b) = (connect()?, connect()?);
            run(a, b, |a| {
                println!(
                    "2. A pauses past its {:?} session timeout. SIMULATED: the server ends \
                     A's session as its expiry would, and deletes A's lock node",
                    a.session_timeout()
                );
                a.kill_session()
            })
        }
    }
}

/// The protected resource: in-memory here. In real life a row with a fence
/// column (`UPDATE … SET …, fence = $tok WHERE id = $id AND fence <= $tok`,
/// then check the row count) or another store that compares tokens.
fn write_resource(gate: &FenceGate, who: &str, token: FencingToken) {
    match gate.admit(token) {
        Ok(()) => println!("    resource: accepted {who}'s write with fence {token}"),
        Err(e) => println!("    resource: REJECTED {who}'s write: {e}"),
    }
}

/// What A's own `check()` says after the pause.
fn explain_check(check: Result<(), Error>) {
    match check {
        Err(e) => println!("   (had A called check() first, it would have known: {e})"),
        Ok(()) => println!("   (A's check() still passes: the lease has not run out yet)"),
    }
}

/// What an in-store fenced write returned.
fn report_store(who: &str, result: Result<(), Error>) {
    match result {
        Ok(()) => println!("    store: {who}'s fenced write landed"),
        Err(e @ Error::FenceRejected { .. }) => println!("    store: REJECTED {who}'s write: {e}"),
        Err(e) => println!("    store: {who}'s write failed otherwise: {e}"),
    }
}

/// The story, the same for every store but for how A's pause is made.
fn run<C: Client>(a: C, b: C, pause: impl FnOnce(&C) -> Result<(), Error>) -> Result<(), Error> {
    let gate = FenceGate::new();

    println!("1. A takes the lock {LOCK}");
    let guard_a = a.mutex(LOCK)?.lock()?;
    let fence_a = guard_a.token();
    println!("   A holds {} with fence {fence_a}", guard_a.holder());
    write_resource(&gate, "A", fence_a);
    report_store("A", guard_a.put(DATA, b"written by A"));

    pause(&a)?;

    println!("3. B asks for the same lock and waits until A's lease has expired");
    let started = Instant::now();
    let Some(guard_b) = b.mutex(LOCK)?.try_lock_for(Duration::from_secs(15))? else {
        return Err(Error::invalid("B did not get the lock within 15 s"));
    };
    let fence_b = guard_b.token();
    println!(
        "   B got it after {:.1} s, fence {fence_b} (higher than A's {fence_a})",
        started.elapsed().as_secs_f64()
    );
    write_resource(&gate, "B", fence_b);
    report_store("B", guard_b.put(DATA, b"written by B"));

    println!("4. A resumes and, not knowing it was paused, writes again with fence {fence_a}");
    write_resource(&gate, "A", fence_a);
    report_store("A", guard_a.put(DATA, b"written by A after the pause"));
    explain_check(guard_a.check());

    if let Some(value) = b.read(DATA)? {
        println!(
            "5. the stored value is {:?}",
            String::from_utf8_lossy(&value)
        );
    }
    guard_b.release()?;
    drop(guard_a);
    println!("B released; done");
    let _ = a.close_within(Duration::from_secs(1));
    b.close()
}
