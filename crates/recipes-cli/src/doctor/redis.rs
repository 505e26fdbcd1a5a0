//! Redis: the version, `maxmemory-policy` (a policy that can evict our
//! keys is a failure, in the library's own words), `appendonly` /
//! `appendfsync`, the role, replicas and `min-replicas-to-write`, cluster
//! mode.

use recipes_redis::RedisClient;

use super::{Asked, Level, Report};

/// One `name:value` line of `INFO`.
fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// Every Redis check.
pub fn checks(client: &RedisClient, asked: &Asked<'_>, report: &mut Report) {
    let info = match client.server_info() {
        Ok(info) => info,
        Err(e) => {
            report.with_change(
                "server-info",
                Level::Skip,
                format!("cannot read INFO: {e}"),
                "grant the user +info (ACL SETUSER <user> +info) to check the server's \
                 settings",
            );
            return;
        }
    };
    let version = field(&info, "redis_version").unwrap_or("unknown");
    report.add("version", Level::Ok, format!("Redis {version}"));
    cluster(&info, asked, report);
    role(&info, report);
    eviction(&info, asked, report);
    persistence(client, &info, report);
    replicas(client, &info, report);
}

fn cluster(info: &str, asked: &Asked<'_>, report: &mut Report) {
    if field(info, "cluster_enabled") == Some("1") {
        let shown = crate::run::describe(asked.choice);
        let shown = shown.strip_prefix("Redis at ").unwrap_or(&shown);
        report.add("cluster", Level::Fail, recipes_redis::cluster_hazard(shown));
    } else {
        report.add("cluster", Level::Ok, "a single node (cluster mode off)");
    }
}

fn role(info: &str, report: &mut Report) {
    match field(info, "role") {
        Some("master") | None => {}
        Some(role) => report.with_change(
            "role",
            Level::Fail,
            format!("connected to a {role}: it refuses every write"),
            "connect to the primary",
        ),
    }
}

fn eviction(info: &str, asked: &Asked<'_>, report: &mut Report) {
    let shown = crate::run::describe(asked.choice);
    let shown = shown.strip_prefix("Redis at ").unwrap_or(&shown);
    match field(info, "maxmemory_policy") {
        None => report.with_change(
            "maxmemory-policy",
            Level::Skip,
            "INFO memory shows no maxmemory_policy",
            "check that it is noeviction (CONFIG GET maxmemory-policy)",
        ),
        Some(policy) => match recipes_redis::eviction_hazard(policy, shown) {
            Some(hazard) => report.with_change("maxmemory-policy", Level::Fail, hazard, ""),
            None => {
                report.add(
                    "maxmemory-policy",
                    Level::Ok,
                    "noeviction: our keys are never evicted",
                );
            }
        },
    }
}

fn persistence(client: &RedisClient, info: &str, report: &mut Report) {
    match field(info, "aof_enabled") {
        Some("1") => report.add(
            "appendonly",
            Level::Ok,
            "an append-only file: held locks and fence keys survive a restart",
        ),
        Some(_) => {
            return report.with_change(
                "appendonly",
                Level::Warn,
                "no append-only file: a restart forgets every held lock (their holders are \
                 told lost) and the fence keys (fences then go on from the server's clock, so \
                 they stay increasing only while it does not step back)",
                "set `appendonly yes` and `appendfsync everysec` or `always` (CONFIG SET, and \
                 in redis.conf)",
            )
        }
        None => {
            return report.add(
                "appendonly",
                Level::Skip,
                "INFO persistence shows no aof_enabled",
            )
        }
    };
    match client.server_config("appendfsync") {
        Ok(Some(fsync)) if fsync == "no" => report.with_change(
            "appendfsync",
            Level::Warn,
            "appendfsync no: the operating system writes the file when it likes, so a host \
             crash may lose many seconds of locks and fence bumps, and a new holder then gets \
             a fence already used",
            "set `appendfsync everysec` (at most a second lost) or `always`",
        ),
        Ok(Some(fsync)) => report.add(
            "appendfsync",
            Level::Ok,
            format!(
                "appendfsync {fsync}: {}",
                if fsync == "always" {
                    "every write is on disk before its reply"
                } else {
                    "a host crash loses at most about a second of writes"
                }
            ),
        ),
        Ok(None) => report.add(
            "appendfsync",
            Level::Skip,
            "CONFIG GET shows no appendfsync",
        ),
        Err(e) => report.with_change(
            "appendfsync",
            Level::Skip,
            format!("cannot read appendfsync: {e}"),
            "grant the user +config|get (ACL SETUSER <user> +config|get) to check it",
        ),
    }
}

fn replicas(client: &RedisClient, info: &str, report: &mut Report) {
    let count: u32 = field(info, "connected_slaves")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if count == 0 {
        report.add(
            "replicas",
            Level::Ok,
            "no replicas (nothing to fail over to)",
        );
        return;
    }
    match client.server_config("min-replicas-to-write") {
        Ok(Some(n)) if n != "0" => report.add(
            "replicas",
            Level::Ok,
            format!("{count} replicas, min-replicas-to-write {n}"),
        ),
        Ok(_) => report.with_change(
            "replicas",
            Level::Warn,
            format!(
                "{count} replicas and min-replicas-to-write 0: a failover may promote a \
                 replica that never saw a lock just taken, and give it to a second holder"
            ),
            "set min-replicas-to-write 1 (and min-replicas-max-lag), or wait for replicas \
             with the client's WAIT option",
        ),
        Err(e) => report.with_change(
            "replicas",
            Level::Skip,
            format!("{count} replicas; cannot read min-replicas-to-write: {e}"),
            "grant the user +config|get to check it",
        ),
    }
}
