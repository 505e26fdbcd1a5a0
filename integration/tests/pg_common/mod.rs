//! What the PostgreSQL test binaries share: fresh names, the test's own
//! tables, connecting, grants.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use integration::PgServer;
use recipes_pg::PgClient;

pub const TTL: Duration = Duration::from_secs(2);

pub fn name(test: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("/pg-backend/{test}-{}-{n}", std::process::id())
}

/// A table of the test's own, `(fence bigint)`; its name.
pub fn table(server: &PgServer, test: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = format!("app_{test}_{}_{n}", std::process::id());
    server.sql(&format!("CREATE TABLE {t} (fence bigint NOT NULL)"));
    t
}

pub fn fences(server: &PgServer, table: &str) -> Vec<String> {
    let out = server.sql(&format!("SELECT fence FROM {table} ORDER BY fence"));
    out.lines().map(str::to_owned).collect()
}

pub fn connect(url: &str, ttl: Duration) -> recipes_core::Result<PgClient> {
    PgClient::builder(url)
        .ttl(ttl)
        .connect_timeout(Duration::from_secs(2))
        .connect()
}

/// A session-mode client of `url`, as [`connect`].
pub fn session(url: &str, ttl: Duration) -> recipes_core::Result<PgClient> {
    PgClient::builder(url)
        .ttl(ttl)
        .connect_timeout(Duration::from_secs(2))
        .session_mode()
        .connect()
}

/// A client whose TTL and poll are both `every`: with a long one, polling
/// is out of the way, and a test's bound is met only through the
/// notifications it is about.
pub fn deaf(url: &str, every: Duration) -> PgClient {
    PgClient::builder(url)
        .ttl(every)
        .poll_interval(every)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .expect("connect")
}

/// A client whose calls give up after `rpc`, with a session (30 s) that
/// outlives its test.
pub fn with_rpc(url: &str, rpc: Duration) -> PgClient {
    with_ttl_and_rpc(url, Duration::from_secs(30), rpc)
}

/// A client of session TTL `ttl` whose calls give up after `rpc`.
pub fn with_ttl_and_rpc(url: &str, ttl: Duration, rpc: Duration) -> PgClient {
    PgClient::builder(url)
        .ttl(ttl)
        .rpc_timeout(rpc)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .expect("connect")
}

/// Whether a statement of a client of ours waits for a lock at the server.
pub fn waits_for_a_lock(facts: &integration::PgFacts) -> bool {
    lock_waits(facts) > 0
}

/// How many statements of clients of ours wait for a lock at the server.
pub fn lock_waits(facts: &integration::PgFacts) -> usize {
    let waiting = "SELECT count(*) FROM pg_stat_activity \
                   WHERE application_name = 'recipes' AND wait_event_type = 'Lock'";
    facts.sql(waiting).trim().parse().expect("a count")
}

pub fn grant(server: &PgServer, role: &str) {
    server.sql(&format!(
        "GRANT USAGE ON SCHEMA recipes TO {role}; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA recipes TO {role}; \
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA recipes TO {role}"
    ));
}

/// The value of `key=` in a worker's reply.
pub fn field(reply: &str, key: &str) -> String {
    reply
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key))
        .expect("field")
        .to_owned()
}

/// A worker process connected by `connect`, holding `lock`, that has
/// written its fence into `table` in a fenced transaction: the worker, its
/// fence and its holder.
pub fn worker_holding(
    dir: &integration::test_dir::TestDir,
    connect: &str,
    lock: &str,
    table: &str,
) -> (integration::worker::Worker, String, String) {
    use integration::worker::{worker_binary, Worker};
    let mut w = Worker::start(&worker_binary(), "old", dir.path());
    w.ok(connect, Duration::from_secs(15));
    let reply = w.ok(&format!("lock {lock}"), Duration::from_secs(10));
    let (token, holder) = (field(&reply, "token="), field(&reply, "holder="));
    w.ok(&format!("txwrite {table} {token}"), Duration::from_secs(10));
    (w, token, holder)
}

/// After the paused worker `old` (holding `lock` with fence `old_token`)
/// lost the lock: `c` takes it with a higher fence and commits a fenced
/// transaction into `table`; `old` is resumed, knows it lost, and its
/// fenced transaction is refused; `table` holds both fences in order.
pub fn the_next_holder_commits_and_the_paused_one_is_refused(
    server: &PgServer,
    c: &PgClient,
    lock: &str,
    table: &str,
    old: &mut integration::worker::Worker,
    old_token: &str,
) {
    use recipes_core::Client;
    use recipes_pg::tokio_postgres::types::Type;
    use recipes_pg::FencedTransaction;
    let new = c.mutex(lock).unwrap().lock().unwrap();
    let new_token = new.token().get() as i64;
    assert!(new_token > old_token.parse().unwrap());
    new.transaction(|tx| {
        tx.execute(
            &format!("INSERT INTO {table} (fence) VALUES ($1)"),
            &[(&new_token, Type::INT8)],
        )
    })
    .unwrap();
    old.resume();
    let refused = old
        .request(
            &format!("txwrite {table} {old_token}"),
            Duration::from_secs(30),
        )
        .expect_err("the old holder's transaction is refused");
    assert!(refused.starts_with("fence-rejected"), "{refused}");
    let status = old.ok("status", Duration::from_secs(10));
    assert_ne!(field(&status, "lost="), "no", "{status}");
    assert_eq!(
        fences(server, table),
        vec![old_token.to_owned(), new_token.to_string()]
    );
    new.release().unwrap();
}

/// An open transaction that holds `name`'s row of `recipes.names` in
/// share mode, as a holder's fenced transaction holds it, until
/// [`commit`]: every statement that writes or locks that row waits.
pub fn share_lock(server: &PgServer, name: &str) -> tokio_postgres::Client {
    use integration::runtime::{block_on_timeout, runtime};
    let limit = integration::scale(Duration::from_secs(5));
    let (blocker, connection) = block_on_timeout(
        limit,
        tokio_postgres::connect(&server.url(), tokio_postgres::NoTls),
    )
    .expect("connect in time")
    .expect("connect");
    runtime().spawn(connection);
    let shared = format!("SELECT 1 FROM recipes.names WHERE name = '{name}' FOR SHARE");
    block_on_timeout(limit, async {
        blocker.batch_execute("BEGIN").await?;
        blocker.batch_execute(&shared).await
    })
    .expect("the share lock in time")
    .expect("the share lock");
    blocker
}

/// End [`share_lock`]'s transaction.
pub fn commit(blocker: &tokio_postgres::Client) {
    integration::runtime::block_on_timeout(
        integration::scale(Duration::from_secs(5)),
        blocker.batch_execute("COMMIT"),
    )
    .expect("commit in time")
    .expect("commit");
}
