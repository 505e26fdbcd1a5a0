//! `recipes doctor`: check a live deployment for the settings that void a
//! lock's promise. It connects as the application would, reads what it
//! can without admin rights, takes a lock of its own, and prints one line
//! per check: ok / warn / fail / skip, what it found, what to change.
//!
//! One file per store, and [`common`] for what every store shares (the
//! round trip against the TTL, the granted TTL, the server's clock rate,
//! a real lock).

mod common;
mod etcd;
mod pg;
mod redis;
mod tls;
mod zk;

use std::fmt::Write as _;
use std::time::Duration;

use recipes_core::Tls;

use crate::backend::{self, Connected};
use crate::cli::{BackendChoice, DoctorArgs};
use crate::credentials::Credentials;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Could not be checked (a right or a setting is missing): says which.
    Skip,
    /// Fine.
    Ok,
    /// Works, with a risk worth changing.
    Warn,
    /// Voids a lock's promise, or the store cannot be used.
    Fail,
}

impl Level {
    fn word(self) -> &'static str {
        match self {
            Level::Skip => "skip",
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "fail",
        }
    }
}

/// One check: what it found and what to change.
#[derive(Debug, Clone)]
pub struct Check {
    /// A short name, e.g. `maxmemory-policy`.
    pub name: &'static str,
    /// The outcome.
    pub level: Level,
    /// What it found.
    pub found: String,
    /// What to change (empty when nothing).
    pub change: String,
}

/// Every check, in order.
#[derive(Debug, Default)]
pub struct Report {
    checks: Vec<Check>,
}

impl Report {
    /// Add a check.
    pub fn add(&mut self, name: &'static str, level: Level, found: impl Into<String>) {
        self.with_change(name, level, found, "");
    }

    /// Add a check with what to change.
    pub fn with_change(
        &mut self,
        name: &'static str,
        level: Level,
        found: impl Into<String>,
        change: impl Into<String>,
    ) {
        self.checks.push(Check {
            name,
            level,
            found: found.into(),
            change: change.into(),
        });
    }

    /// Every check's level, in order.
    #[cfg(test)]
    pub fn levels(&self) -> Vec<Level> {
        self.checks.iter().map(|c| c.level).collect()
    }

    /// The exit status: 2 when a check failed, 1 when one warned and
    /// `strict`, else 0.
    pub fn exit_code(&self, strict: bool) -> i32 {
        match self.checks.iter().map(|c| c.level).max() {
            Some(Level::Fail) => 2,
            Some(Level::Warn) if strict => 1,
            _ => 0,
        }
    }

    /// The checks as text (one line each) or one JSON object.
    pub fn render(&self, store: &str, json: bool, strict: bool) -> String {
        let mut out = String::new();
        if json {
            let checks: Vec<String> = self
                .checks
                .iter()
                .map(|c| {
                    format!(
                        "{{\"check\":{},\"level\":\"{}\",\"found\":{},\"change\":{}}}",
                        crate::status::json_string(c.name),
                        c.level.word(),
                        crate::status::json_string(&c.found),
                        crate::status::json_string(&c.change)
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "{{\"store\":{},\"exit\":{},\"checks\":[{}]}}",
                crate::status::json_string(store),
                self.exit_code(strict),
                checks.join(",")
            );
            return out;
        }
        let _ = writeln!(out, "recipes doctor: {store}");
        let width = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        for c in &self.checks {
            let _ = write!(
                out,
                "{:<4}  {:<width$}  {}",
                c.level.word(),
                c.name,
                c.found
            );
            if !c.change.is_empty() {
                let _ = write!(out, "; {}", c.change);
            }
            out.push('\n');
        }
        let count = |l| self.checks.iter().filter(|c| c.level == l).count();
        let _ = writeln!(
            out,
            "{} ok, {} warn, {} fail, {} skip",
            count(Level::Ok),
            count(Level::Warn),
            count(Level::Fail),
            count(Level::Skip)
        );
        out
    }
}

/// What the doctor was asked to check with.
#[derive(Debug)]
pub struct Asked<'a> {
    /// The store and its address.
    pub choice: &'a BackendChoice,
    /// `--ttl`.
    pub ttl: Duration,
    /// TLS, when asked.
    pub tls: Option<&'a Tls>,
}

/// `recipes doctor`: the exit status.
pub fn run(
    asked: &Asked<'_>,
    args: &DoctorArgs,
    credentials: Option<&Credentials>,
    zk_sasl: bool,
) -> i32 {
    let store = crate::run::describe(asked.choice);
    let mut report = Report::default();
    let prefix = if args.prefix.ends_with('/') {
        args.prefix.clone()
    } else {
        format!("{}/", args.prefix)
    };
    let started = std::time::Instant::now();
    match backend::connect(asked.choice, asked.ttl, credentials, zk_sasl, asked.tls) {
        Err(e) => {
            report.with_change(
                "connect",
                Level::Fail,
                format!("cannot connect: {e}"),
                "fix what the message says, then run the doctor again",
            );
            // The four-letter words need no session.
            if let BackendChoice::Zk(hosts) = asked.choice {
                zk::checks(hosts, asked, &mut report);
            }
            // An expired certificate is a reason a connect fails.
            if let Some(given) = asked.tls {
                tls::check(asked.choice, given.server_name_override(), &mut report);
            }
        }
        Ok(connected) => {
            report.add(
                "connect",
                Level::Ok,
                format!("connected in {}", common::ms(started.elapsed())),
            );
            check_connected(connected, asked, &prefix, &mut report);
        }
    }
    match crate::out::print(&report.render(&store, args.json, args.strict)) {
        Ok(()) => report.exit_code(args.strict),
        Err(e) => crate::out::failed(&e),
    }
}

fn check_connected(connected: Connected, asked: &Asked<'_>, prefix: &str, report: &mut Report) {
    use common::ServerClock;
    match &connected {
        Connected::Zk(client) => {
            zk::checks(client.hosts(), asked, report);
            match client.clock_node(&format!("{prefix}clock")) {
                Ok(node) => {
                    let read = || node.touch();
                    let clock = ServerClock::Read(&read, Duration::from_millis(1));
                    common::checks(client, asked, prefix, clock, report);
                }
                Err(e) => {
                    let found = format!("cannot write a node to read the server's clock: {e}");
                    let clock = ServerClock::Cannot(
                        found,
                        "grant the user CREATE and DELETE under the prefix (--prefix) to time \
                         the server's clock by a node's mtime",
                    );
                    common::checks(client, asked, prefix, clock, report);
                }
            }
        }
        Connected::Etcd(client) => {
            etcd::checks(client, prefix, report);
            let clock = ServerClock::Measured(etcd::lease_clock(client));
            common::checks(client, asked, prefix, clock, report);
        }
        Connected::Pg(client) => {
            pg::checks(client, asked, report);
            let read = || pg::server_clock(client);
            let clock = ServerClock::Read(&read, Duration::from_micros(1));
            common::checks(client, asked, prefix, clock, report);
        }
        Connected::Redis(client) => {
            redis::checks(client, asked, report);
            let read = || client.server_time();
            let clock = ServerClock::Read(&read, Duration::from_micros(1));
            common::checks(client, asked, prefix, clock, report);
        }
    }
    if let Some(given) = asked.tls {
        tls::check(asked.choice, given.server_name_override(), report);
    }
    crate::backend::on_client!(connected, client => {
        let _ = recipes_core::Client::close(client);
    });
}
