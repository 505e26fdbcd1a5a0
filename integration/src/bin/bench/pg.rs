//! The PostgreSQL cases, both modes, each beside its raw statements in the
//! same run (fsync on):
//!
//! - lease mode: raw = the one statement a lease-row lock needs to take a
//!   free or expired row and bump its fence (expiry in database time), and
//!   the one that gives it back; then our `lock` + `release`, and the
//!   two-client handoff.
//! - session mode: raw = `pg_try_advisory_lock`, the fence bump
//!   (`UPDATE … RETURNING`) and `pg_advisory_unlock` on one connection;
//!   then the same two cases.

use std::time::Duration;

use integration::runtime::{block_on, runtime};
use integration::{PgConfig, PgServer};
use recipes_core::Client as _;
use recipes_pg::tokio_postgres::{self, NoTls};
use recipes_pg::{PgClient, PgMode};

use super::{contended, report, timed};

/// A raw connection of the bench's own.
fn raw(url: &str) -> tokio_postgres::Client {
    let (client, connection) = block_on(tokio_postgres::connect(url, NoTls)).unwrap();
    runtime().spawn(connection);
    client
}

/// Run one statement, expecting one row; its first column.
fn one<T: for<'a> tokio_postgres::types::FromSql<'a>>(c: &tokio_postgres::Client, sql: &str) -> T {
    block_on(c.query_one(sql, &[])).unwrap().get(0)
}

pub fn pg(seconds: Duration) {
    let server = PgServer::start_with(PgConfig::default().with_fsync(true));
    let url = server.url();
    let c = raw(&url);
    block_on(c.batch_execute(
        "CREATE TABLE bench_leases (name text PRIMARY KEY, holder uuid, \
           fence bigint NOT NULL DEFAULT 0, expires_at timestamptz NOT NULL); \
         CREATE TABLE bench_fences (name text PRIMARY KEY, fence bigint NOT NULL); \
         INSERT INTO bench_fences VALUES ('/bench/raw', 0)",
    ))
    .unwrap();

    let (n, t) = timed(seconds, || {
        let fence: i64 = one(
            &c,
            "INSERT INTO bench_leases AS l (name, holder, fence, expires_at) \
             VALUES ('/bench/raw', '00000000-0000-0000-0000-000000000001', 1, \
                     clock_timestamp() + interval '10 s') \
             ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, fence = l.fence + 1, \
               expires_at = EXCLUDED.expires_at WHERE l.expires_at <= clock_timestamp() \
             RETURNING l.fence",
        );
        assert!(fence > 0);
        let released = block_on(c.execute(
            "UPDATE bench_leases SET expires_at = clock_timestamp() \
             WHERE name = '/bench/raw' AND holder = '00000000-0000-0000-0000-000000000001'",
            &[],
        ))
        .unwrap();
        assert_eq!(released, 1);
    });
    report("pg-lease", "raw acquire upsert+release update", n, t);
    ours(&url, PgMode::Lease, "pg-lease", seconds);

    let (n, t) = timed(seconds, || {
        assert!(one::<bool>(&c, "SELECT pg_try_advisory_lock(1, 1)"));
        let fence: i64 = one(
            &c,
            "UPDATE bench_fences SET fence = fence + 1 WHERE name = '/bench/raw' RETURNING fence",
        );
        assert!(fence > 0);
        assert!(one::<bool>(&c, "SELECT pg_advisory_unlock(1, 1)"));
    });
    report(
        "pg-session",
        "raw pg_try_advisory_lock+fence bump+pg_advisory_unlock",
        n,
        t,
    );
    ours(&url, PgMode::Session, "pg-session", seconds);
}

/// Our uncontended lock + release, and the two-client handoff, in `mode`.
fn ours(url: &str, mode: PgMode, backend: &str, seconds: Duration) {
    let connect = || PgClient::builder(url).mode(mode).connect().unwrap();
    let client = connect();
    let mutex = client
        .mutex(&format!("/bench/{backend}/uncontended"))
        .unwrap();
    let (n, t) = timed(seconds, || mutex.lock().unwrap().release().unwrap());
    report(backend, "uncontended lock+release", n, t);
    let (n, t) = contended(seconds, || {
        let m = connect()
            .mutex(&format!("/bench/{backend}/contended"))
            .unwrap();
        Box::new(move || m.lock().unwrap().release().unwrap())
    });
    report(backend, "contended handoff, 2 clients", n, t);
    client.close().unwrap();
}
