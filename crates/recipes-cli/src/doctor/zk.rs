//! ZooKeeper: `srvr` and `conf` on every server of the connect string,
//! and `mntr` on one, where the four-letter words are allowed (else say
//! which setting allows them): the version, the ensemble (servers
//! answering, a leader, followers in sync), `tickTime`, `syncLimit`, the
//! min/max session timeout against the TTL, the server's latency.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::common::ms;
use super::{Asked, Level, Report};

/// How long one four-letter word may take.
const WORD_TIMEOUT: Duration = Duration::from_secs(3);

/// Send `word` to `host` and read the whole answer.
fn four_letter(host: &str, word: &str) -> std::io::Result<String> {
    let addr: SocketAddr = host
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("{host} resolves to no address")))?;
    let mut stream = TcpStream::connect_timeout(&addr, WORD_TIMEOUT)?;
    stream.set_read_timeout(Some(WORD_TIMEOUT))?;
    stream.set_write_timeout(Some(WORD_TIMEOUT))?;
    stream.write_all(word.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// A `key=value` (conf) or `Key: value` (srvr) line's value.
fn value<'a>(text: &'a str, key: &str, sep: char) -> Option<&'a str> {
    text.lines().find_map(|l| {
        l.strip_prefix(key)
            .and_then(|rest| rest.trim_start().strip_prefix(sep))
            .map(str::trim)
    })
}

fn millis(text: &str, key: &str) -> Option<Duration> {
    value(text, key, '=')
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
}

/// Every ZooKeeper check.
pub fn checks(connect: &str, asked: &Asked<'_>, report: &mut Report) {
    if asked.tls.is_some() {
        report.with_change(
            "four-letter-words",
            Level::Skip,
            "over TLS the four-letter words go to the plain client port, which this check \
             does not use",
            "run `echo conf | nc HOST 2181` on a server to see its session timeouts",
        );
        return;
    }
    let hosts: Vec<&str> = connect
        .split('/')
        .next()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    let mut modes = Vec::new();
    let mut conf = None;
    let mut mntr = None;
    let mut refused = None;
    for host in &hosts {
        match four_letter(host, "srvr") {
            Ok(a) if a.contains("not in the whitelist") || a.contains("not executed") => {
                refused = Some(format!("{host} does not allow srvr"));
            }
            Ok(a) => {
                let version = value(&a, "Zookeeper version", ':').unwrap_or("unknown");
                let version = version.split(',').next().unwrap_or(version).to_owned();
                let mode = value(&a, "Mode", ':').unwrap_or("unknown").to_owned();
                modes.push((host.to_string(), mode, version));
            }
            Err(e) => modes.push((
                host.to_string(),
                format!("unreachable ({e})"),
                String::new(),
            )),
        }
        if mntr.is_none() {
            mntr = Some(four_letter(host, "mntr").map(|a| (host.to_string(), a)));
        }
        if conf.is_none() {
            match four_letter(host, "conf") {
                Ok(a) if a.contains("tickTime") => conf = Some(a),
                Ok(_) => refused = Some(format!("{host} does not allow conf")),
                Err(_) => {}
            }
        }
    }
    ensemble(&hosts, &modes, report);
    match conf {
        Some(conf) => timeouts(&conf, asked.ttl, report),
        None => report.with_change(
            "session-timeouts",
            Level::Skip,
            refused.unwrap_or_else(|| "no server answered conf".into()),
            "allow the words (4lw.commands.whitelist=srvr,conf,mntr in zoo.cfg) to check \
             tickTime, syncLimit and the session timeouts",
        ),
    }
    monitor(mntr, report);
}

/// `mntr` of the first server: its state, latency and, on a leader, the
/// followers in sync.
fn monitor(answer: Option<std::io::Result<(String, String)>>, report: &mut Report) {
    let whitelist = "allow it (4lw.commands.whitelist=srvr,conf,mntr in zoo.cfg) to check \
                     the followers in sync and the server's latency";
    let (host, mntr) = match answer {
        None => return,
        Some(Err(e)) => {
            return report.with_change(
                "mntr",
                Level::Skip,
                format!("mntr unanswered: {e}"),
                whitelist,
            )
        }
        Some(Ok((host, a))) if !a.contains("zk_server_state") => {
            return report.with_change(
                "mntr",
                Level::Skip,
                format!("{host} does not allow mntr"),
                whitelist,
            )
        }
        Some(Ok(answer)) => answer,
    };
    let field = |key: &str| {
        mntr.lines().find_map(|l| {
            let (k, v) = l.split_once(['\t', ' '])?;
            (k == key).then(|| v.trim())
        })
    };
    let state = field("zk_server_state").unwrap_or("unknown");
    let mut found = format!(
        "{host} {state}: latency avg {} ms, max {} ms; {} requests outstanding",
        field("zk_avg_latency").unwrap_or("?"),
        field("zk_max_latency").unwrap_or("?"),
        field("zk_outstanding_requests").unwrap_or("?")
    );
    let number = |key: &str| field(key).and_then(|v| v.parse::<u64>().ok());
    if let (Some(followers), Some(synced)) = (number("zk_followers"), number("zk_synced_followers"))
    {
        found.push_str(&format!("; {synced} of {followers} followers in sync"));
        if synced < followers {
            return report.with_change(
                "mntr",
                Level::Warn,
                found,
                "bring the lagging followers back in sync: one more loss may cost the quorum",
            );
        }
    }
    report.add("mntr", Level::Ok, found);
}

fn ensemble(hosts: &[&str], modes: &[(String, String, String)], report: &mut Report) {
    if modes.is_empty() {
        report.with_change(
            "ensemble",
            Level::Skip,
            "the servers do not allow srvr",
            "allow it (4lw.commands.whitelist=srvr,conf,mntr in zoo.cfg) to check the \
             ensemble",
        );
        return;
    }
    let version = modes
        .iter()
        .find(|m| !m.2.is_empty())
        .map_or("", |m| m.2.as_str());
    report.add("version", Level::Ok, format!("ZooKeeper {version}"));
    let serving = modes
        .iter()
        .filter(|m| matches!(m.1.as_str(), "standalone" | "leader" | "follower"))
        .count();
    let shown: Vec<String> = modes.iter().map(|(h, m, _)| format!("{h} {m}")).collect();
    let found = format!(
        "{serving} of {} servers serve a quorum: {}",
        hosts.len(),
        shown.join(", ")
    );
    let has_leader = modes.iter().any(|m| m.1 == "leader" || m.1 == "standalone");
    if serving == 0 || !has_leader {
        report.with_change(
            "ensemble",
            Level::Fail,
            found,
            "a quorum with a leader must serve",
        );
    } else if serving < hosts.len() {
        report.with_change(
            "ensemble",
            Level::Warn,
            found,
            "bring the other servers back: one more loss may cost the quorum",
        );
    } else {
        report.add("ensemble", Level::Ok, found);
    }
}

fn timeouts(conf: &str, ttl: Duration, report: &mut Report) {
    let tick = millis(conf, "tickTime");
    let min = millis(conf, "minSessionTimeout");
    let max = millis(conf, "maxSessionTimeout");
    let (Some(tick), Some(max)) = (tick, max) else {
        report.add(
            "session-timeouts",
            Level::Skip,
            "conf shows no tickTime or maxSessionTimeout",
        );
        return;
    };
    let found = format!(
        "tickTime {}, minSessionTimeout {}, maxSessionTimeout {}; TTL {}",
        ms(tick),
        min.map_or_else(|| "?".into(), ms),
        ms(max),
        ms(ttl)
    );
    if max < ttl {
        report.with_change(
            "session-timeouts",
            Level::Fail,
            format!("{found}: the server grants at most {}", ms(max)),
            format!(
                "raise maxSessionTimeout to at least {} in zoo.cfg, or ask for --ttl {} at most",
                ms(ttl),
                ms(max)
            ),
        );
    } else if min.is_some_and(|min| min > ttl) {
        report.with_change(
            "session-timeouts",
            Level::Warn,
            format!("{found}: the server grants at least the minimum, longer than asked"),
            "a lost holder's lock then stays taken longer than the TTL; lower \
             minSessionTimeout or raise --ttl",
        );
    } else {
        report.add("session-timeouts", Level::Ok, found);
    }
    if let Some(sync) = value(conf, "syncLimit", '=').and_then(|v| v.parse::<u32>().ok()) {
        let lag = tick * sync;
        let found = format!("syncLimit {sync} x tickTime {} = {}", ms(tick), ms(lag));
        if lag >= ttl {
            report.with_change(
                "sync-limit",
                Level::Warn,
                format!("{found}, not below the TTL {}", ms(ttl)),
                "a follower may lag a whole TTL behind: lower syncLimit or raise --ttl",
            );
        } else {
            report.add("sync-limit", Level::Ok, found);
        }
    }
}
