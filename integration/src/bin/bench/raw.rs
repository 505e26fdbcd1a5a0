//! The raw minimum of an uncontended lock and its release, issued straight
//! through each store's client crate, timed per cycle: what no recipe can
//! beat on that store.
//!
//! - ZooKeeper: create an ephemeral-sequential node, list the folder,
//!   delete the node.
//! - etcd: the put-if-absent + read-owner transaction, then a delete.
//! - Redis: `SET NX PX`, `INCR` of a fence key, compare-and-delete by `EVAL`.
//! - PostgreSQL, lease mode: the upsert that takes a free or expired row and
//!   bumps its fence, and the release update; session mode:
//!   `pg_try_advisory_lock`, the fence bump, `pg_advisory_unlock`.

use std::time::{Duration, Instant};

/// Per-cycle times of `cycle` run for `seconds`, and the time it took.
pub type Samples = (Vec<Duration>, Duration);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// One async loop: the client's own task runs throughout, as ours does on
/// its runtime thread.
async fn samples<F: std::future::Future<Output = ()>>(
    seconds: Duration,
    mut cycle: impl FnMut() -> F,
) -> Samples {
    let started = Instant::now();
    let mut out = Vec::new();
    while started.elapsed() < seconds {
        let t = Instant::now();
        cycle().await;
        out.push(t.elapsed());
    }
    (out, started.elapsed())
}

pub fn zk(hosts: &str, seconds: Duration, _client: usize) -> Samples {
    use zookeeper_client as zk;
    let rt = runtime();
    let raw = rt.block_on(zk::Client::connect(hosts)).expect("connect");
    let open = zk::Acls::anyone_all();
    rt.block_on(raw.mkdir("/bench/raw", &zk::CreateMode::Persistent.with_acls(open)))
        .expect("mkdir");
    let options = zk::CreateMode::EphemeralSequential.with_acls(open);
    rt.block_on(samples(seconds, || async {
        let (_, seq) = raw.create("/bench/raw/n-", b"", &options).await.unwrap();
        raw.list_children("/bench/raw").await.unwrap();
        raw.delete(&format!("/bench/raw/n-{seq}"), None)
            .await
            .unwrap();
    }))
}

pub fn etcd(endpoints: &[String], seconds: Duration, _client: usize) -> Samples {
    use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
    let rt = runtime();
    let raw = rt
        .block_on(etcd_client::Client::connect(endpoints, None))
        .expect("connect");
    let lease = rt.block_on(raw.clone().lease_grant(10, None)).unwrap().id();
    let key = format!("/bench/raw/{lease:x}");
    rt.block_on(samples(seconds, || {
        let (mut raw, key) = (raw.clone(), key.clone());
        async move {
            let txn = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([
                    TxnOp::put(key.as_str(), "", Some(PutOptions::new().with_lease(lease))),
                    TxnOp::get(
                        "/bench/raw/",
                        Some(GetOptions::new().with_prefix().with_limit(1)),
                    ),
                ]);
            raw.txn(txn).await.unwrap();
            raw.delete(key.as_str(), None).await.unwrap();
        }
    }))
}

pub fn redis(url: &str, seconds: Duration, client: usize) -> Samples {
    let (key, fence) = (
        format!("/bench/raw-{client}"),
        format!("/bench/raw-fence-{client}"),
    );
    let raw = redis::Client::open(url).expect("a Redis URL");
    let mut conn = raw.get_connection().expect("connect");
    let release = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    );
    let started = Instant::now();
    let mut out = Vec::new();
    while started.elapsed() < seconds {
        let t = Instant::now();
        let set: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg("token")
            .arg("NX")
            .arg("PX")
            .arg(10_000)
            .query(&mut conn)
            .unwrap();
        assert!(set.is_some(), "the raw lock is free between cycles");
        let _: i64 = redis::cmd("INCR").arg(&fence).query(&mut conn).unwrap();
        let _: i64 = release.key(&key).arg("token").invoke(&mut conn).unwrap();
        out.push(t.elapsed());
    }
    (out, started.elapsed())
}

/// A raw PostgreSQL connection of the bench's own, on `rt`.
fn pg_raw(rt: &tokio::runtime::Runtime, url: &str) -> recipes_pg::tokio_postgres::Client {
    use recipes_pg::tokio_postgres::{connect, NoTls};
    let (client, connection) = rt.block_on(connect(url, NoTls)).expect("connect");
    rt.spawn(connection);
    client
}

/// PostgreSQL, lease mode: the one statement that takes a free or expired
/// row and bumps its fence (expiry in database time), and the one that
/// gives it back.
pub fn pg_lease(url: &str, seconds: Duration, client: usize) -> Samples {
    let name = format!("/bench/raw-{client}");
    let rt = runtime();
    let c = pg_raw(&rt, url);
    rt.block_on(c.batch_execute(
        "CREATE TABLE IF NOT EXISTS bench_leases (name text PRIMARY KEY, holder uuid, \
           fence bigint NOT NULL DEFAULT 0, expires_at timestamptz NOT NULL)",
    ))
    .unwrap();
    // Prepared once, as a driver's statement cache does (a text query is
    // parsed and described again each time: a round trip more).
    let take = rt
        .block_on(c.prepare(
            "INSERT INTO bench_leases AS l (name, holder, fence, expires_at) \
             VALUES ($1, '00000000-0000-0000-0000-000000000001', 1, \
                     clock_timestamp() + interval '10 s') \
             ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, \
               fence = l.fence + 1, expires_at = EXCLUDED.expires_at \
             WHERE l.expires_at <= clock_timestamp() RETURNING l.fence",
        ))
        .unwrap();
    let release = rt
        .block_on(c.prepare(
            "UPDATE bench_leases SET expires_at = clock_timestamp() \
             WHERE name = $1 AND holder = '00000000-0000-0000-0000-000000000001'",
        ))
        .unwrap();
    rt.block_on(samples(seconds, || async {
        let row = c.query_one(&take, &[&name]).await.unwrap();
        assert!(row.get::<_, i64>(0) > 0);
        c.execute(&release, &[&name]).await.unwrap();
    }))
}

/// PostgreSQL, session mode: `pg_try_advisory_lock`, the fence bump
/// (`UPDATE … RETURNING`) and `pg_advisory_unlock` on one connection.
pub fn pg_session(url: &str, seconds: Duration, client: usize) -> Samples {
    let (name, key) = (format!("/bench/raw-{client}"), client as i32);
    let rt = runtime();
    let c = pg_raw(&rt, url);
    rt.block_on(c.batch_execute(
        "CREATE TABLE IF NOT EXISTS bench_fences (name text PRIMARY KEY, fence bigint NOT NULL)",
    ))
    .unwrap();
    rt.block_on(c.execute(
        "INSERT INTO bench_fences VALUES ($1, 0) ON CONFLICT DO NOTHING",
        &[&name],
    ))
    .unwrap();
    let (take, mint, release) = rt.block_on(async {
        (
            c.prepare("SELECT pg_try_advisory_lock(1, $1)")
                .await
                .unwrap(),
            c.prepare("UPDATE bench_fences SET fence = fence + 1 WHERE name = $1 RETURNING fence")
                .await
                .unwrap(),
            c.prepare("SELECT pg_advisory_unlock(1, $1)").await.unwrap(),
        )
    });
    rt.block_on(samples(seconds, || async {
        let got: bool = c.query_one(&take, &[&key]).await.unwrap().get(0);
        assert!(got, "the raw advisory lock is free between cycles");
        c.query_one(&mint, &[&name]).await.unwrap();
        c.query_one(&release, &[&key]).await.unwrap();
    }))
}
