//! etcd: the version against releases with known lease or watch bugs
//! (named, with the release that fixed them), a leader present, the
//! members.

use recipes_etcd::EtcdClient;

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

/// Every etcd check.
pub fn checks(client: &EtcdClient, report: &mut Report) {
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
