//! etcd: the version against releases with known lease or watch bugs
//! (named, with the release that fixed them), a leader present, the
//! members.

use std::time::{Duration, Instant};

use recipes_core::Result;
use recipes_etcd::{EtcdClient, EtcdClockLease};

use super::{Level, Report};

/// A bug of etcd that voids a lock's promise: on `minor` releases below
/// `fixed`.
struct KnownBug {
    minor: (u32, u32),
    fixed: u32,
    what: &'static str,
}

/// From etcd's changelogs.
const KNOWN_BUGS: [KnownBug; 4] = [
    KnownBug {
        minor: (3, 5),
        fixed: 3,
        what: "data inconsistency after a crash (members apply different data), fixed in \
               3.5.3",
    },
    KnownBug {
        minor: (3, 5),
        fixed: 13,
        what: "leases wrongly revoked by a new leader on an old leader's request, and watch \
               events lost after a compaction (etcd PRs 17425, 17529), fixed in 3.5.13",
    },
    KnownBug {
        minor: (3, 4),
        fixed: 31,
        what: "leases wrongly revoked by a new leader on an old leader's request, and watch \
               events lost after a compaction (etcd PR 17465), fixed in 3.4.31",
    },
    KnownBug {
        minor: (3, 3),
        fixed: u32::MAX,
        what: "3.3 and older are out of support; the lease and watch fixes of 3.4.31 and \
               3.5.13 are not in them",
    },
];

/// (major, minor, patch) of `3.5.17`.
fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.split(['.', '-', '+']).map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// The known bugs of `version`.
fn bugs_of(version: (u32, u32, u32)) -> Vec<&'static str> {
    let (major, minor, patch) = version;
    KNOWN_BUGS
        .iter()
        .filter(|b| {
            let (bmaj, bmin) = b.minor;
            (major, minor) == (bmaj, bmin) && patch < b.fixed
                || (b.fixed == u32::MAX && (major, minor) < (bmaj, bmin))
        })
        .map(|b| b.what)
        .collect()
}

/// Every etcd check; `prefix` is where the application's names live.
pub fn checks(client: &EtcdClient, prefix: &str, report: &mut Report) {
    access(client, prefix, report);
    let info = match client.server_info() {
        Ok(info) => info,
        Err(e) => {
            report.with_change(
                "cluster",
                Level::Skip,
                format!("cannot read the status or the members: {e}"),
                "grant the user the right to list members (etcd's default lets every user)",
            );
            return;
        }
    };
    match parse_version(&info.version).map(bugs_of) {
        Some(bugs) if bugs.is_empty() => {
            report.add("version", Level::Ok, format!("etcd {}", info.version));
        }
        Some(bugs) => report.with_change(
            "version",
            Level::Fail,
            format!("etcd {}: {}", info.version, bugs.join("; ")),
            "upgrade to 3.5.13 or later (or 3.4.31 or later on 3.4)",
        ),
        None => report.add(
            "version",
            Level::Skip,
            format!("cannot read etcd's version from {:?}", info.version),
        ),
    }
    if info.leader == 0 {
        report.with_change(
            "leader",
            Level::Fail,
            format!("no leader (raft term {})", info.raft_term),
            "a quorum of members must be up and reach each other",
        );
    } else {
        report.add(
            "leader",
            Level::Ok,
            format!("leader {:x}, raft term {}", info.leader, info.raft_term),
        );
    }
    let level = if info.members % 2 == 0 {
        Level::Warn
    } else {
        Level::Ok
    };
    let found = format!("{} members", info.members);
    if level == Level::Warn {
        report.with_change(
            "members",
            level,
            found,
            "an even member count tolerates no more failures than one fewer: use an odd count",
        );
    } else {
        report.add("members", level, found);
    }
}

/// The user's rights on the key prefix: with authentication on, a user
/// whose roles do not cover it cannot take a lock there.
fn access(client: &EtcdClient, prefix: &str, report: &mut Report) {
    let missing = match client.prefix_access(prefix) {
        Err(e) => {
            return report.add(
                "permissions",
                Level::Skip,
                format!("cannot check the rights on {prefix}: {e}"),
            )
        }
        Ok(a) if a.read && a.write => {
            return report.add(
                "permissions",
                Level::Ok,
                format!("the user may read and write the keys under {prefix}"),
            )
        }
        Ok(a) if a.read => "write",
        Ok(a) if a.write => "read",
        Ok(_) => "read and write",
    };
    report.with_change(
        "permissions",
        Level::Fail,
        format!("the user may not {missing} the keys under {prefix}: etcd denies it"),
        format!(
            "grant the user's role readwrite on the prefix: etcdctl role grant-permission \
             ROLE --prefix=true readwrite {prefix}"
        ),
    );
}

/// The lease the clock check reads: long enough to outlive the check.
const CLOCK_LEASE_SECS: i64 = 10;
/// How many of the leader's seconds the clock check spans.
const CLOCK_SECONDS: u32 = 2;
/// Polling starts this long before the second edge is due (a server
/// clock this much faster is still caught on the edge).
const CLOCK_EARLY: Duration = Duration::from_millis(150);

/// One change of the lease's remaining TTL, polled for: the new value,
/// our instant at the middle of the interval it happened in, and half
/// that interval.
fn edge(lease: &EtcdClockLease, from: i64) -> Result<(i64, Instant, Duration)> {
    let mut before = Instant::now();
    let mut value = from;
    while value == from {
        let sent = Instant::now();
        value = lease.remaining()?;
        if value == from {
            before = sent;
        }
    }
    let after = Instant::now();
    let half = (after - before) / 2;
    Ok((value, before + half, half))
}

/// The leader's clock rate, by a lease's remaining TTL: the instants of
/// two of its one-second steps `CLOCK_SECONDS` apart, against ours.
pub fn lease_clock(client: &EtcdClient) -> Result<(Duration, Duration, Duration)> {
    let lease = client.clock_lease(CLOCK_LEASE_SECS)?;
    let first = lease.remaining()?;
    let (v0, t0, e0) = edge(&lease, first)?;
    let due = t0 + Duration::from_secs(u64::from(CLOCK_SECONDS));
    // A measurement span, not a wait for a condition.
    std::thread::sleep(due.saturating_duration_since(Instant::now() + CLOCK_EARLY));
    let expect = v0 - i64::from(CLOCK_SECONDS);
    let now = lease.remaining()?;
    if now <= expect {
        // The step came before we looked: the leader's clock ran fast by
        // at least CLOCK_EARLY over the span (or we were descheduled).
        let local = Instant::now() - t0;
        let server = Duration::from_secs(u64::try_from(v0 - now).unwrap_or(0));
        return Ok((server, local, e0 + Duration::from_secs(1)));
    }
    let (v1, t1, e1) = edge(&lease, now)?;
    let server = Duration::from_secs(u64::try_from(v0 - v1).unwrap_or(0));
    Ok((server, t1 - t0, e0 + e1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_bugs_by_version() {
        assert!(bugs_of((3, 5, 17)).is_empty());
        assert!(bugs_of((3, 6, 0)).is_empty());
        assert!(bugs_of((3, 4, 31)).is_empty());
        assert_eq!(bugs_of((3, 5, 12)).len(), 1);
        assert_eq!(bugs_of((3, 5, 2)).len(), 2);
        assert_eq!(bugs_of((3, 4, 30)).len(), 1);
        assert_eq!(bugs_of((3, 3, 25)).len(), 1);
        assert_eq!(parse_version("3.5.17"), Some((3, 5, 17)));
    }
}
