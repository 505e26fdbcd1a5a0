//! What a PostgreSQL server says about the recipes' rows, read through
//! `psql` as the superuser, independent of the client under test: live
//! entries (their session not expired in database time), the key-value
//! rows fenced writes land in, and the backends that `LISTEN`.

use std::net::SocketAddr;

use crate::pg_server::{PG_DATABASE, PG_SUPERUSER};
use crate::psql::psql;

/// Facts of one server, read as its superuser.
#[derive(Debug, Clone)]
pub struct PgFacts {
    addr: SocketAddr,
}

/// `text` as an SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The uuid at the end of a holder `<name>/<uuid>`.
fn entry_of(holder: &str) -> String {
    holder
        .rsplit_once('/')
        .map_or(holder, |(_, e)| e)
        .to_owned()
}

/// recipes-pg's default advisory namespace (`DEFAULT_NAMESPACE`).
const ADVISORY_NS: u32 = 0x7265_6370;

/// The key and backend of a session-mode holder `<key>/backend-<pid>`
/// (`None` for a lease-mode holder).
pub fn advisory_holder(holder: &str) -> Option<(&str, u32)> {
    let (key, backend) = holder.rsplit_once("/backend-")?;
    Some((key, backend.parse().ok()?))
}

/// A live entry: its session has not expired.
const LIVE: &str = "FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session \
                    WHERE s.expires_at > clock_timestamp()";

impl PgFacts {
    /// Facts of the server at `addr`.
    pub fn new(addr: SocketAddr) -> PgFacts {
        PgFacts { addr }
    }

    /// Run `sql` as the superuser; psql's output.
    ///
    /// # Panics
    ///
    /// When it fails.
    pub fn sql(&self, sql: &str) -> String {
        let limit = crate::scale(crate::pg_server::PG_PROBE_TIMEOUT);
        psql(self.addr, PG_SUPERUSER, PG_DATABASE, sql, limit)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    fn lines(&self, sql: &str) -> Vec<String> {
        self.sql(sql)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The live entries of the recipe `name` — its own queue and, for a
    /// semaphore, its internal mutex's and its permits' — as holders.
    pub fn entries_under(&self, name: &str) -> Vec<String> {
        let names = [
            name.to_owned(),
            format!("{name}/locks"),
            format!("{name}/leases"),
        ];
        let names: Vec<String> = names.iter().map(|n| literal(n)).collect();
        self.lines(&format!(
            "SELECT q.name || '/' || q.entry {LIVE} AND q.name IN ({}) ORDER BY q.name, q.seq",
            names.join(",")
        ))
    }

    /// Whether the holder's entry is live.
    pub fn exists(&self, holder: &str) -> bool {
        let entry = literal(&entry_of(holder));
        !self
            .lines(&format!("SELECT 1 {LIVE} AND q.entry::text = {entry}"))
            .is_empty()
    }

    /// Delete the holder's entry, as another program would.
    pub fn delete(&self, holder: &str) {
        let entry = literal(&entry_of(holder));
        self.sql(&format!(
            "DELETE FROM recipes.queue WHERE entry::text = {entry}"
        ));
    }

    /// Set a key of `recipes.kv`, as another program would.
    pub fn put(&self, key: &str, value: &[u8]) {
        let value = String::from_utf8_lossy(value);
        self.sql(&format!(
            "INSERT INTO recipes.kv (key, value) VALUES ({}, convert_to({}, 'UTF8')) \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            literal(key),
            literal(&value)
        ));
    }

    /// The value of a key of `recipes.kv` as text.
    pub fn get(&self, key: &str) -> Option<String> {
        let rows = self.lines(&format!(
            "SELECT 'v:' || convert_from(value, 'UTF8') FROM recipes.kv WHERE key = {}",
            literal(key)
        ));
        rows.first().map(|v| v["v:".len()..].to_owned())
    }

    /// How many backends last ran the `LISTEN` of `name`'s channel.
    pub fn listeners(&self, name: &str) -> usize {
        let rows = self.lines(&format!(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE query = 'LISTEN recipes_' || md5({})",
            literal(name)
        ));
        rows.first().and_then(|n| n.parse().ok()).unwrap_or(0)
    }

    /// Session mode: the advisory locks of the recipe `name` (a lock's key,
    /// a semaphore's permit keys `<name>/leases/<i>`) in the default
    /// namespace, as `<key>/backend-<pid>`: granted ones, or (`granted`
    /// false) the backends waiting for one.
    pub fn advisory(&self, name: &str, granted: bool) -> Vec<String> {
        let name = literal(name);
        self.lines(&format!(
            "WITH k(key) AS (SELECT {name} UNION ALL \
               SELECT {name} || '/leases/' || i FROM recipes.names n, \
                 generate_series(0, coalesce(n.permits, 0) - 1) i WHERE n.name = {name}) \
             SELECT k.key || '/backend-' || l.pid FROM k JOIN pg_locks l \
               ON l.locktype = 'advisory' AND l.objsubid = 2 AND l.classid::int8 = {ADVISORY_NS} \
               AND l.objid::int8 = hashtext(k.key)::int8 & 4294967295 \
             WHERE l.granted = {granted} ORDER BY 1"
        ))
    }

    /// Session mode: whether the holder `<key>/backend-<pid>` holds its
    /// advisory lock.
    pub fn advisory_held(&self, holder: &str) -> bool {
        let Some((key, pid)) = advisory_holder(holder) else {
            return false;
        };
        !self
            .lines(&format!(
                "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 \
                 AND classid::int8 = {ADVISORY_NS} AND granted AND pid = {pid} \
                 AND objid::int8 = hashtext({})::int8 & 4294967295",
                literal(key)
            ))
            .is_empty()
    }

    /// Session mode: end the holder's backend, as an administrator would
    /// (`pg_terminate_backend`); its lock goes with it. Returns once the
    /// backend is gone (the server waits for it, up to 30 s): a backend
    /// only signalled still holds its lock while it exits.
    pub fn terminate(&self, holder: &str) {
        if let Some((_, pid)) = advisory_holder(holder) {
            self.sql(&format!("SELECT pg_terminate_backend({pid}, 30000)"));
        }
    }

    /// Every advisory lock in the default namespace, granted or waited
    /// for, as `<pid>:<objid>`.
    pub fn advisory_all(&self) -> Vec<String> {
        self.lines(&format!(
            "SELECT pid || ':' || objid FROM pg_locks WHERE locktype = 'advisory' \
             AND classid::int8 = {ADVISORY_NS} ORDER BY 1"
        ))
    }

    /// The session rows, live or not.
    pub fn sessions(&self) -> Vec<String> {
        self.lines("SELECT id FROM recipes.sessions ORDER BY id")
    }
}
