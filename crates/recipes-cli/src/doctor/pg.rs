//! PostgreSQL: the version, the pooler against the mode asked (a
//! transaction-mode pooler with session mode is refused at connect, in the
//! library's words), `synchronous_commit` and replication where the fence
//! must survive a failover, the `recipes` schema's layout and privileges,
//! the idle timeouts against the TTL.

use std::time::Duration;

use recipes_core::Result;
use recipes_pg::{PgClient, PgMode};

use super::common::ms;
use super::{Asked, Level, Report};

/// The first column of the first row of `sql`.
fn one(client: &PgClient, sql: &str) -> Result<Option<String>> {
    Ok(client
        .server_rows(sql)?
        .into_iter()
        .next()
        .and_then(|row| row.into_iter().next().flatten()))
}

/// The database's clock (`clock_timestamp()`), as time since the epoch.
pub fn server_clock(client: &PgClient) -> Result<Duration> {
    let micros = one(
        client,
        "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text",
    )?;
    let micros: u64 = micros
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| recipes_core::Error::invalid("clock_timestamp() gave no number"))?;
    Ok(Duration::from_micros(micros))
}

/// A setting in milliseconds (`current_setting` of a time setting in ms).
fn setting_ms(client: &PgClient, name: &str) -> Option<u64> {
    let sql = format!("SELECT setting::text FROM pg_settings WHERE name = '{name}'");
    one(client, &sql)
        .ok()
        .flatten()
        .and_then(|v| v.parse().ok())
}

/// Every PostgreSQL check.
pub fn checks(client: &PgClient, asked: &Asked<'_>, report: &mut Report) {
    match one(client, "SELECT current_setting('server_version')::text") {
        Ok(Some(v)) => report.add("version", Level::Ok, format!("PostgreSQL {v}")),
        Ok(None) | Err(_) => report.add("version", Level::Skip, "cannot read server_version"),
    }
    pooler(client, report);
    replication(client, report);
    schema(client, report);
    timeouts(client, asked.ttl, report);
}

fn pooler(client: &PgClient, report: &mut Report) {
    match client.mode() {
        PgMode::Session => report.add(
            "pooler",
            Level::Ok,
            "session mode: statements of one connection stay on one backend (no \
             transaction-mode pooler in the path; one is refused at connect)",
        ),
        _ => report.add(
            "pooler",
            Level::Ok,
            "lease mode: works through any pooler, transaction mode included",
        ),
    }
}

fn replication(client: &PgClient, report: &mut Report) {
    match one(client, "SELECT pg_is_in_recovery()::text") {
        Ok(Some(r)) if r == "true" => report.with_change(
            "primary",
            Level::Fail,
            "connected to a standby (in recovery): it refuses every write",
            "connect to the primary",
        ),
        _ => {}
    }
    let commit = one(client, "SELECT current_setting('synchronous_commit')::text");
    match commit.ok().flatten().as_deref() {
        Some("off") => report.with_change(
            "synchronous_commit",
            Level::Warn,
            "synchronous_commit off: a crash may lose a lock or a fence bump that was \
             already acknowledged",
            "set synchronous_commit = on (for the role: ALTER ROLE .. SET synchronous_commit \
             = on)",
        ),
        Some(v) => report.add(
            "synchronous_commit",
            Level::Ok,
            format!("synchronous_commit {v}"),
        ),
        None => report.add(
            "synchronous_commit",
            Level::Skip,
            "cannot read synchronous_commit",
        ),
    }
    let replicas = one(client, "SELECT count(*)::text FROM pg_stat_replication");
    let standbys = one(
        client,
        "SELECT current_setting('synchronous_standby_names')::text",
    );
    match (replicas, standbys) {
        (Ok(Some(n)), Ok(names)) if n != "0" => {
            let names = names.unwrap_or_default();
            if names.is_empty() {
                report.with_change(
                    "replication",
                    Level::Warn,
                    format!(
                        "{n} standbys, replicated asynchronously: a failover may lose the \
                         last fence bumps, and a new holder then gets a fence already used"
                    ),
                    "set synchronous_standby_names (and synchronous_commit on or \
                     remote_apply) on the primary",
                );
            } else {
                report.add(
                    "replication",
                    Level::Ok,
                    format!("{n} standbys, synchronous_standby_names '{names}'"),
                );
            }
        }
        (Ok(_), _) => report.add(
            "replication",
            Level::Ok,
            "no standbys streaming from this server",
        ),
        (Err(e), _) => report.with_change(
            "replication",
            Level::Skip,
            format!("cannot read pg_stat_replication: {e}"),
            "grant the role pg_monitor to check replication",
        ),
    }
}

fn schema(client: &PgClient, report: &mut Report) {
    let layout = one(client, "SELECT max(version)::text FROM recipes.layout");
    let rights = one(
        client,
        "SELECT (has_schema_privilege('recipes', 'USAGE') AND \
         has_table_privilege('recipes.queue', 'SELECT, INSERT, UPDATE, DELETE'))::text",
    );
    match (layout, rights) {
        (Ok(Some(v)), Ok(Some(r))) if r == "true" => report.add(
            "schema",
            Level::Ok,
            format!("schema recipes, layout {v}; the role may use it"),
        ),
        (Ok(v), Ok(_)) => report.with_change(
            "schema",
            Level::Fail,
            format!(
                "schema recipes (layout {}) without usage or row rights for this role",
                v.unwrap_or_default()
            ),
            "GRANT USAGE ON SCHEMA recipes and SELECT, INSERT, UPDATE, DELETE on its tables \
             to the role",
        ),
        (Err(e), _) | (_, Err(e)) => report.with_change(
            "schema",
            Level::Skip,
            format!("cannot read the schema recipes: {e}"),
            "the role needs USAGE on the schema recipes",
        ),
    }
}

fn timeouts(client: &PgClient, ttl: Duration, report: &mut Report) {
    let idle = setting_ms(client, "idle_session_timeout");
    match (client.mode(), idle) {
        (PgMode::Session, Some(t)) if t > 0 => report.with_change(
            "idle_session_timeout",
            Level::Fail,
            format!(
                "idle_session_timeout {}: the server closes an idle lock connection, and \
                 its advisory locks go with it",
                ms(Duration::from_millis(t))
            ),
            "set idle_session_timeout = 0 for the role (ALTER ROLE .. SET \
             idle_session_timeout = 0)",
        ),
        (_, Some(t)) => report.add(
            "idle_session_timeout",
            Level::Ok,
            format!("idle_session_timeout {t} ms"),
        ),
        (_, None) => {}
    }
    match setting_ms(client, "idle_in_transaction_session_timeout") {
        Some(t) if t > 0 && Duration::from_millis(t) < ttl => report.with_change(
            "idle_in_transaction",
            Level::Warn,
            format!(
                "idle_in_transaction_session_timeout {} is below the TTL {}: a fenced \
                 transaction (guard.transaction) left idle is ended before the lock's lease",
                ms(Duration::from_millis(t)),
                ms(ttl)
            ),
            "raise it above the TTL, or keep fenced transactions short",
        ),
        Some(t) => report.add(
            "idle_in_transaction",
            Level::Ok,
            format!("idle_in_transaction_session_timeout {t} ms"),
        ),
        None => report.add(
            "idle_in_transaction",
            Level::Skip,
            "cannot read idle_in_transaction_session_timeout",
        ),
    }
    keepalives(client, ttl, report);
}

/// The server's TCP keepalives: how long a session-mode holder whose host
/// died or was cut off keeps its locks (its connection, and with it its
/// advisory locks, ends only when the server's keepalives give up).
fn keepalives(client: &PgClient, ttl: Duration, report: &mut Report) {
    let (Some(idle), Some(interval), Some(count)) = (
        setting_ms(client, "tcp_keepalives_idle"),
        setting_ms(client, "tcp_keepalives_interval"),
        setting_ms(client, "tcp_keepalives_count"),
    ) else {
        return report.add(
            "tcp_keepalives",
            Level::Skip,
            "cannot read tcp_keepalives_idle, _interval and _count",
        );
    };
    // pg_settings gives seconds for these; over TCP the values in effect
    // (0 only over a Unix socket, where they do not apply).
    let detect = Duration::from_secs(idle + interval * count);
    let found = format!(
        "tcp_keepalives_idle {idle} s + interval {interval} s x count {count}: the server \
         finds a vanished client after {}",
        ms(detect)
    );
    if idle == 0 {
        report.add(
            "tcp_keepalives",
            Level::Ok,
            "connected over a Unix socket: keepalives do not apply",
        );
    } else if client.mode() == PgMode::Session && detect > ttl {
        report.with_change(
            "tcp_keepalives",
            Level::Warn,
            format!(
                "{found}, longer than the TTL {}: a session-mode holder whose host dies or is \
                 cut off keeps its locks that long",
                ms(ttl)
            ),
            "lower them so idle + interval x count fits the TTL (postgresql.conf, ALTER ROLE .. \
             SET, or the URL's options=-c tcp_keepalives_idle=..), or use lease mode",
        );
    } else {
        report.add("tcp_keepalives", Level::Ok, found);
    }
}
