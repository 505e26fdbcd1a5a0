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

pub fn grant(server: &PgServer, role: &str) {
    server.sql(&format!(
        "GRANT USAGE ON SCHEMA recipes TO {role}; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA recipes TO {role}; \
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA recipes TO {role}"
    ));
}
