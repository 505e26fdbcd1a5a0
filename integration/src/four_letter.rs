//! ZooKeeper's four-letter-word commands (`srvr`, `wchp`, `wchc`, …) and
//! parsers for their answers.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// Sends a four-letter command to `addr` and reads the whole answer, all
/// within `timeout`.
///
/// # Errors
///
/// Connection errors, and `TimedOut` when the server does not finish its
/// answer in time (a paused server accepts the connection but says nothing).
pub fn four_letter(addr: SocketAddr, command: &str, timeout: Duration) -> io::Result<String> {
    let answer = crate::tcp::exchange(addr, command.as_bytes(), timeout, || {
        format!("{command} to {addr}: no full answer in {timeout:?}")
    })?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// A ZooKeeper server's role, from the `Mode:` line of `srvr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkMode {
    /// A server without an ensemble.
    Standalone,
    /// The ensemble leader.
    Leader,
    /// An ensemble follower.
    Follower,
    /// An ensemble observer.
    Observer,
    /// Anything else the server printed (e.g. `read-only`).
    Other(String),
}

impl ZkMode {
    /// Whether a member in this mode serves clients as part of a quorum.
    pub fn is_quorum_member(&self) -> bool {
        matches!(self, ZkMode::Leader | ZkMode::Follower)
    }
}

/// The `Mode:` of a `srvr` (or `stat`) answer; `None` when there is no such
/// line — the server is up but not serving yet.
pub fn parse_mode(srvr: &str) -> Option<ZkMode> {
    let mode = srvr
        .lines()
        .find_map(|line| line.strip_prefix("Mode:"))?
        .trim();
    Some(match mode {
        "standalone" => ZkMode::Standalone,
        "leader" => ZkMode::Leader,
        "follower" => ZkMode::Follower,
        "observer" => ZkMode::Observer,
        other => ZkMode::Other(other.to_owned()),
    })
}

/// Parses `wchp`: watched path → session ids watching it (sorted).
pub fn parse_watches_by_path(wchp: &str) -> BTreeMap<String, Vec<i64>> {
    let mut table: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (path, session) in grouped(wchp) {
        if let Some(id) = parse_session_id(&session) {
            table.entry(path).or_default().push(id);
        }
    }
    table.values_mut().for_each(|ids| ids.sort_unstable());
    table
}

/// Parses `wchc`: session id → paths it watches (sorted).
pub fn parse_watches_by_session(wchc: &str) -> BTreeMap<i64, Vec<String>> {
    let mut table: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for (session, path) in grouped(wchc) {
        if let Some(id) = parse_session_id(&session) {
            table.entry(id).or_default().push(path);
        }
    }
    table.values_mut().for_each(|paths| paths.sort());
    table
}

/// A session id as ZooKeeper prints it (`0x1000a3b4c5d0000`).
pub fn parse_session_id(text: &str) -> Option<i64> {
    let hex = text.trim().strip_prefix("0x")?;
    u64::from_str_radix(hex, 16).ok().map(|id| id as i64)
}

/// Formats a session id the way ZooKeeper prints it.
pub fn format_session_id(id: i64) -> String {
    format!("0x{:x}", id as u64)
}

/// `(heading, item)` pairs of the "heading line, then tab-indented items"
/// layout shared by `wchp` and `wchc`.
fn grouped(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut heading: Option<&str> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            if let Some(heading) = heading {
                pairs.push((heading.to_owned(), line.trim().to_owned()));
            }
        } else {
            heading = Some(line.trim());
        }
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_watch_tables() {
        let wchp = "/locks/a\n\t0x100000abc0000\n\t0x100000abc0001\n/other\n\t0x100000abc0001\n";
        let by_path = parse_watches_by_path(wchp);
        assert_eq!(by_path["/locks/a"], vec![0x100000abc0000, 0x100000abc0001]);
        assert_eq!(by_path["/other"], vec![0x100000abc0001]);
        let wchc = "0x100000abc0001\n\t/other\n\t/locks/a\n";
        let by_session = parse_watches_by_session(wchc);
        assert_eq!(
            by_session[&0x100000abc0001],
            vec!["/locks/a".to_owned(), "/other".to_owned()]
        );
        assert!(parse_watches_by_path("").is_empty());
    }

    #[test]
    fn session_ids_round_trip_including_the_sign_bit() {
        let id = 0xf200_0000_0000_0001_u64 as i64;
        assert_eq!(parse_session_id(&format_session_id(id)), Some(id));
    }

    #[test]
    fn parses_mode() {
        assert_eq!(
            parse_mode("Zxid: 0x0\nMode: follower\nNode count: 5\n"),
            Some(ZkMode::Follower)
        );
        assert_eq!(parse_mode("imok"), None);
    }
}
