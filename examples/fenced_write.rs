//! The paused-holder story, end to end in one process: why a lock needs a
//! fence.
//!
//! ```sh
//! cargo run --example fenced_write                            # ZooKeeper at 127.0.0.1:2181
//! RECIPES_ETCD=127.0.0.1:2379 cargo run --example fenced_write
//! ```
//!
//! 1. Holder A takes the lock and writes, fenced by its token.
//! 2. A "pauses" (a GC pause, a stopped VM) for longer than its lease.
//! 3. The lease runs out at the server; B takes the lock with a higher token
//!    and writes.
//! 4. A wakes up and, unaware, writes again: the resource's `FenceGate`
//!    refuses A's stale token, and so does the store's fenced write.
//!
//! With etcd the pause is real as far as the server can tell: A's client
//! stops renewing its lease (`EtcdClient::orphan`), exactly as a stopped
//! process would, and etcd expires it. With ZooKeeper a process cannot stop
//! its own heartbeat thread, so the example does what the server does when
//! A's session expires: it deletes A's lock node (through a plain ZooKeeper
//! connection). Either way A's guard object stays in A's hands throughout.

use std::time::{Duration, Instant};

use recipes_core::{Error, FenceGate, FencingToken};

const LOCK: &str = "/examples/fenced-write";
const DATA: &str = "/examples/fenced-write-data";

fn main() -> Result<(), Error> {
    let zk = std::env::var("RECIPES_ZK").ok();
    match (zk, std::env::var("RECIPES_ETCD").ok()) {
        (None, Some(endpoint)) => etcd(&endpoint),
        (hosts, _) => zookeeper(&hosts.unwrap_or_else(|| "127.0.0.1:2181".into())),
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

fn etcd(endpoint: &str) -> Result<(), Error> {
    println!("backend: etcd at {endpoint}");
    // A short TTL so the story takes seconds; B's client is separate, as if
    // B were another machine.
    let a = recipes_etcd::EtcdClient::builder([endpoint])
        .ttl(Duration::from_secs(2))
        .connect()?;
    let b = recipes_etcd::EtcdClient::builder([endpoint])
        .ttl(Duration::from_secs(5))
        .connect()?;
    let gate = FenceGate::new();

    println!("1. A takes the lock {LOCK}");
    let guard_a = a.mutex(LOCK)?.lock()?;
    let fence_a = guard_a.token();
    println!("   A holds {} with fence {fence_a}", guard_a.holder());
    write_resource(&gate, "A", fence_a);
    report_store("A", guard_a.lease().put(DATA, "written by A").map(drop));

    println!(
        "2. A pauses. SIMULATED: A's client stops renewing its lease (as a stopped \
         process would); etcd will expire it after the {:?} TTL",
        a.session_ttl()
    );
    a.orphan();

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
    report_store("B", guard_b.lease().put(DATA, "written by B").map(drop));

    println!("4. A resumes and, not knowing it was paused, writes again with fence {fence_a}");
    write_resource(&gate, "A", fence_a);
    report_store(
        "A",
        guard_a
            .lease()
            .put(DATA, "written by A after the pause")
            .map(drop),
    );
    explain_check(guard_a.check());

    let resp = guard_b
        .lease()
        .txn(vec![recipes_etcd::etcd_client::TxnOp::get(DATA, None)])?;
    if let Some(recipes_etcd::etcd_client::TxnOpResponse::Get(get)) = resp.op_responses().first() {
        if let Some(kv) = get.kvs().first() {
            println!(
                "5. the stored value is {:?}",
                String::from_utf8_lossy(kv.value())
            );
        }
    }
    guard_b.release()?;
    drop(guard_a);
    println!("B released; done");
    a.close(Duration::from_secs(1));
    b.close(Duration::from_secs(2));
    Ok(())
}

fn zookeeper(hosts: &str) -> Result<(), Error> {
    println!("backend: ZooKeeper at {hosts}");
    let connect = || {
        recipes_zk::ZkClient::builder(hosts)
            .session_timeout(Duration::from_secs(4))
            .connect()
    };
    // Two clients, two sessions: as if A and B ran on different machines.
    let (a, b) = (connect()?, connect()?);
    let gate = FenceGate::new();

    println!("1. A takes the lock {LOCK}");
    let guard_a = a.mutex(LOCK)?.lock()?;
    let fence_a = guard_a.token();
    println!("   A holds {} with fence {fence_a}", guard_a.holder());
    write_resource(&gate, "A", fence_a);
    report_store("A", guard_a.lease().put(DATA, b"written by A"));

    println!(
        "2. A pauses past its {:?} session timeout. SIMULATED: this process cannot stop \
         its own heartbeats, so we do what the server does when A's session expires: \
         delete A's lock node {} (over a plain ZooKeeper connection)",
        a.session_timeout(),
        guard_a.holder()
    );
    let node = guard_a.holder().to_owned();
    plain_zk(
        &a,
        hosts,
        move |zk| async move { zk.delete(&node, None).await },
    )?;

    println!("3. B asks for the same lock");
    let Some(guard_b) = b.mutex(LOCK)?.try_lock_for(Duration::from_secs(10))? else {
        return Err(Error::invalid("B did not get the lock within 10 s"));
    };
    let fence_b = guard_b.token();
    println!(
        "   B holds {} with fence {fence_b} (higher than A's {fence_a})",
        guard_b.holder()
    );
    write_resource(&gate, "B", fence_b);
    report_store("B", guard_b.lease().put(DATA, b"written by B"));

    println!("4. A resumes and, not knowing it was paused, writes again with fence {fence_a}");
    write_resource(&gate, "A", fence_a);
    report_store(
        "A",
        guard_a.lease().put(DATA, b"written by A after the pause"),
    );
    explain_check(guard_a.check());

    let value = plain_zk(&b, hosts, |zk| async move {
        zk.get_data(DATA).await.map(|(data, _)| data)
    })?;
    println!(
        "5. the stored value is {:?}",
        String::from_utf8_lossy(&value)
    );
    guard_b.release()?;
    drop(guard_a);
    println!("B released; done");
    a.close(Duration::from_secs(1));
    b.close(Duration::from_secs(2));
    Ok(())
}

/// One request over a short-lived plain ZooKeeper connection, run on the
/// client's runtime thread (the ZooKeeper client needs a tokio runtime).
fn plain_zk<T, F, Fut>(client: &recipes_zk::ZkClient, hosts: &str, op: F) -> Result<T, Error>
where
    T: Send + 'static,
    F: FnOnce(zookeeper_client::Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, zookeeper_client::Error>> + Send,
{
    let hosts = hosts.to_owned();
    client.runtime().call(
        "plain ZooKeeper request",
        Duration::from_secs(10),
        async move {
            let zk = zookeeper_client::Client::connect(&hosts).await;
            let zk = zk.map_err(|e| Error::backend("connect", true, e))?;
            op(zk)
                .await
                .map_err(|e| Error::backend("plain ZooKeeper request", false, e))
        },
    )
}
