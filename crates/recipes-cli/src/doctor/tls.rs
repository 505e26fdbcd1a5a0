//! TLS: the expiry of every certificate each server of the address list
//! shows in its handshake (a warning within 30 days, a failure once
//! expired), read by one handshake of our own per server
//! ([`recipes_core::tls::server_chain`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use recipes_core::tls::{server_chain, Prelude};

use super::{Level, Report};
use crate::cli::BackendChoice;

/// A certificate expiring within this is a warning.
const WARN_WITHIN: Duration = Duration::from_secs(30 * 86_400);
/// How long one handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Every server of `choice` (host, port), and whether PostgreSQL's
/// `SSLRequest` opens its TLS.
fn servers(choice: &BackendChoice) -> (Vec<(String, u16)>, bool) {
    let split = |list: &str, default: u16| -> Vec<(String, u16)> {
        list.split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|h| match h.rsplit_once(':') {
                Some((host, port)) if !host.ends_with(':') => {
                    (host.to_owned(), port.parse().unwrap_or(default))
                }
                _ => (h.to_owned(), default),
            })
            .collect()
    };
    // What follows the scheme and any user, up to the path or query.
    let authority = |url: &str| -> String {
        let rest = url.split_once("://").map_or(url, |(_, r)| r);
        let rest = rest.split(['/', '?']).next().unwrap_or_default();
        rest.rsplit_once('@').map_or(rest, |(_, h)| h).to_owned()
    };
    match choice {
        BackendChoice::Zk(hosts) => (
            split(hosts.split('/').next().unwrap_or_default(), 2181),
            false,
        ),
        BackendChoice::Etcd(endpoints) => (
            endpoints
                .iter()
                .flat_map(|e| split(&authority(e), 2379))
                .collect(),
            false,
        ),
        BackendChoice::Pg(url, _) => (split(&authority(url), 5432), true),
        BackendChoice::Redis(url) => (split(&authority(url), 6379), false),
    }
}

/// The TLS check: every server's chain, its soonest expiry.
pub fn check(choice: &BackendChoice, server_name: Option<&str>, report: &mut Report) {
    let (servers, postgres) = servers(choice);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let mut worst: Option<(Level, String)> = None;
    let mut shown = Vec::new();
    for (host, port) in &servers {
        let name = server_name.unwrap_or(host.trim_start_matches('[').trim_end_matches(']'));
        let prelude = if postgres {
            Prelude::Postgres
        } else {
            Prelude::None
        };
        let found = match server_chain(host, *port, name, prelude, HANDSHAKE_TIMEOUT) {
            Err(e) => (
                Level::Skip,
                format!("{host}:{port}: cannot read its certificates: {e}"),
            ),
            Ok(chain) => soonest(&chain).map_or_else(
                || {
                    (
                        Level::Skip,
                        format!("{host}:{port}: no certificate date could be read"),
                    )
                },
                |(position, until)| {
                    let which = if position == 0 {
                        "its certificate".to_owned()
                    } else {
                        format!("certificate {} of its chain", position + 1)
                    };
                    let date = date(until);
                    if until <= now {
                        (
                            Level::Fail,
                            format!("{host}:{port}: {which} expired on {date}"),
                        )
                    } else {
                        let days = (until - now) / 86_400;
                        let level = if until - now < WARN_WITHIN.as_secs() {
                            Level::Warn
                        } else {
                            Level::Ok
                        };
                        (
                            level,
                            format!("{host}:{port}: {which} expires on {date} (in {days} days)"),
                        )
                    }
                },
            ),
        };
        if worst.as_ref().is_none_or(|(l, _)| found.0 > *l) {
            worst = Some(found.clone());
        }
        shown.push(found.1);
    }
    let Some((level, _)) = worst else {
        return report.add("tls-expiry", Level::Skip, "no server address to read");
    };
    let found = shown.join("; ");
    match level {
        Level::Fail | Level::Warn => report.with_change(
            "tls-expiry",
            level,
            found,
            "renew the server certificate (and its chain) before it expires: clients then \
             refuse the server",
        ),
        Level::Skip => report.with_change(
            "tls-expiry",
            level,
            found,
            "check it with `openssl s_client -connect HOST:PORT | openssl x509 -noout -enddate`",
        ),
        Level::Ok => report.add("tls-expiry", level, found),
    }
}

/// The certificate of `chain` that expires first: its position and its
/// notAfter (seconds since the epoch).
fn soonest(chain: &[Vec<u8>]) -> Option<(usize, u64)> {
    chain
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((i, not_after(c)?)))
        .min_by_key(|(_, t)| *t)
}

/// One DER element: its tag, its content and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// A certificate's notAfter, in seconds since the epoch: RFC 5280's
/// `Certificate { tbsCertificate { [0] version?, serialNumber, signature,
/// issuer, validity { notBefore, notAfter } .. } .. }`.
fn not_after(cert: &[u8]) -> Option<u64> {
    let (0x30, cert, _) = element(cert)? else {
        return None;
    };
    let (0x30, tbs, _) = element(cert)? else {
        return None;
    };
    let (tag, _, mut rest) = element(tbs)?;
    if tag != 0xa0 {
        rest = tbs; // no version: the first element is the serial number
    }
    for _ in 0..3 {
        rest = element(rest)?.2; // serial number, signature, issuer
    }
    let (0x30, validity, _) = element(rest)? else {
        return None;
    };
    let (_, _, validity) = element(validity)?;
    let (tag, time, _) = element(validity)?;
    parse_time(tag, std::str::from_utf8(time).ok()?)
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn parse_time(tag: u8, text: &str) -> Option<u64> {
    let (year, rest) = match tag {
        0x17 => {
            let yy: i64 = text.get(..2)?.parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, text.get(2..)?)
        }
        0x18 => (text.get(..4)?.parse().ok()?, text.get(4..)?),
        _ => return None,
    };
    let num = |at: usize| -> Option<i64> { rest.get(at..at + 2)?.parse().ok() };
    let days = days_from_civil(year, num(0)?, num(2)?);
    let secs = days * 86_400 + num(4)? * 3600 + num(6)? * 60 + num(8)?;
    u64::try_from(secs).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DD` of seconds since the epoch.
fn date(secs: u64) -> String {
    let z = i64::try_from(secs / 86_400).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_both_ways() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(date(0), "1970-01-01");
        let t = parse_time(0x17, "240229120000Z").unwrap();
        assert_eq!(date(t), "2024-02-29");
        let g = parse_time(0x18, "21240101000000Z").unwrap();
        assert_eq!(date(g), "2124-01-01");
    }

    #[test]
    fn addresses_of_each_store() {
        let pg = BackendChoice::Pg(
            "postgres://u:p@db1:6432,db2/x?sslmode=verify-full".into(),
            recipes_pg::PgMode::Lease,
        );
        assert_eq!(
            servers(&pg),
            (vec![("db1".into(), 6432), ("db2".into(), 5432)], true)
        );
        let zk = BackendChoice::Zk("a:2281,b/chroot".into());
        assert_eq!(servers(&zk).0, vec![("a".into(), 2281), ("b".into(), 2181)]);
        let redis = BackendChoice::Redis("rediss://:pw@r:6380/0".into());
        assert_eq!(servers(&redis).0, vec![("r".into(), 6380)]);
    }
}
