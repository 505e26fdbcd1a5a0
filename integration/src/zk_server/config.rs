//! The settings of a test ZooKeeper server and the `zoo.cfg` lines they
//! make: [`ZkConfig`], a member's [`Ensemble`], the secure port's lines.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::certs::ServerTls;

/// Settings of a test ZooKeeper server.
///
/// Defaults: `tickTime` 200 ms, sessions negotiated within 400 ms ..= 20 s,
/// so tests can ask for 1–10 s session timeouts and get them (ZooKeeper
/// would otherwise clamp to 2..=20 ticks).
#[derive(Debug, Clone)]
pub struct ZkConfig {
    tick_time: Duration,
    min_session_timeout: Duration,
    max_session_timeout: Duration,
    fsync: bool,
    sasl_users: Vec<(String, String)>,
    tls: Option<ServerTls>,
    four_letter_words: String,
    clock_rate: Option<f64>,
}

impl Default for ZkConfig {
    fn default() -> Self {
        ZkConfig {
            tick_time: Duration::from_millis(200),
            min_session_timeout: Duration::from_millis(400),
            max_session_timeout: Duration::from_secs(20),
            fsync: false,
            sasl_users: Vec::new(),
            tls: None,
            four_letter_words: "srvr,mntr,cons,wchc,wchp,stat,ruok,dump,conf".into(),
            clock_rate: None,
        }
    }
}

impl ZkConfig {
    /// Sync the transaction log to disk (`forceSync=yes`), as benchmarks
    /// want; functional tests run without.
    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// Sets `tickTime` (at most 500 ms for functional tests; expiry is
    /// checked once per tick).
    pub fn with_tick_time(mut self, tick_time: Duration) -> Self {
        self.tick_time = tick_time;
        self
    }

    /// The server's wall clock (the JVM's `currentTimeMillis`, a node's
    /// mtime) runs `rate` times as fast as ours ([`crate::clock_shim`]).
    pub fn with_clock_rate(mut self, rate: f64) -> Self {
        self.clock_rate = Some(rate);
        self
    }

    /// The environment of the server's process (the clock shim's).
    pub(super) fn env(&self) -> Vec<(String, String)> {
        self.clock_rate
            .map(crate::clock_shim::clock_rate_env)
            .unwrap_or_default()
    }

    /// Sets `4lw.commands.whitelist` (the harness itself needs `srvr`).
    pub fn with_four_letter_words(mut self, words: &str) -> Self {
        self.four_letter_words = words.into();
        self
    }

    /// Sets `minSessionTimeout` and `maxSessionTimeout`: the server clamps
    /// every requested session timeout into this range.
    pub fn with_session_timeouts(mut self, min: Duration, max: Duration) -> Self {
        self.min_session_timeout = min;
        self.max_session_timeout = max;
        self
    }

    /// Require SASL: the server's JAAS `Server` section knows `user` with
    /// `password` (DIGEST-MD5), and a client that has not authenticated
    /// with SASL is refused (`enforce.auth.enabled`). Call once per user.
    pub fn with_sasl_user(mut self, user: &str, password: &str) -> Self {
        self.sasl_users.push((user.into(), password.into()));
        self
    }

    /// The JAAS file of the SASL users, `None` without any.
    pub(super) fn jaas(&self) -> Option<String> {
        if self.sasl_users.is_empty() {
            return None;
        }
        let users: String = self
            .sasl_users
            .iter()
            .map(|(u, p)| format!("\n  user_{u}=\"{p}\""))
            .collect();
        Some(format!(
            "Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required{users};\n}};\n"
        ))
    }

    /// A secure client port beside the plain one (Netty, PEM key and
    /// trust stores), with `ssl.clientAuth=need` when `tls.client_auth`.
    /// The harness itself (4lw, facts) stays on the plain port.
    pub fn with_tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The secure port's TLS, if any.
    pub fn tls(&self) -> Option<&ServerTls> {
        self.tls.as_ref()
    }

    /// `tickTime`.
    pub fn tick_time(&self) -> Duration {
        self.tick_time
    }

    /// `minSessionTimeout`.
    pub fn min_session_timeout(&self) -> Duration {
        self.min_session_timeout
    }

    /// `maxSessionTimeout`.
    pub fn max_session_timeout(&self) -> Duration {
        self.max_session_timeout
    }

    /// The lines of `zoo.cfg` shared by standalone servers and members.
    pub(super) fn common_lines(&self, data_dir: &Path, client_addr: SocketAddr) -> String {
        let mut cfg = String::new();
        let _ = writeln!(cfg, "tickTime={}", self.tick_time.as_millis());
        let _ = writeln!(cfg, "dataDir={}", data_dir.display());
        let _ = writeln!(cfg, "clientPort={}", client_addr.port());
        let _ = writeln!(cfg, "clientPortAddress={}", client_addr.ip());
        let _ = writeln!(
            cfg,
            "minSessionTimeout={}",
            self.min_session_timeout.as_millis()
        );
        let _ = writeln!(
            cfg,
            "maxSessionTimeout={}",
            self.max_session_timeout.as_millis()
        );
        // The default of 60 per client address breaks a 50-waiter test.
        cfg.push_str("maxClientCnxns=0\n");
        cfg.push_str(if self.fsync {
            "forceSync=yes\n"
        } else {
            "forceSync=no\n"
        });
        cfg.push_str("admin.enableServer=false\n");
        let _ = writeln!(cfg, "4lw.commands.whitelist={}", self.four_letter_words);
        cfg.push_str("autopurge.purgeInterval=0\n");
        if !self.sasl_users.is_empty() {
            cfg.push_str(
                "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n",
            );
            cfg.push_str("enforce.auth.enabled=true\nenforce.auth.schemes=sasl\n");
        }
        cfg
    }
}

/// How a member learns about its ensemble.
#[derive(Debug, Clone)]
pub(crate) struct Ensemble {
    /// 1-based id of this member (`myid`).
    pub(crate) my_id: usize,
    /// `server.N=…` lines for every member.
    pub(crate) server_lines: String,
}

/// The `zoo.cfg` lines of a secure client port on `port`: the key store
/// (key and certificate in one PEM file, written into `dir`) and the CA as
/// trust store.
pub(super) fn tls_lines(dir: &Path, tls: &ServerTls, port: u16) -> String {
    let read = |p: &Path| {
        std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
    };
    let store = dir.join("keystore.pem");
    let pem = format!("{}{}", read(&tls.server.key), read(&tls.server.cert));
    std::fs::write(&store, pem).expect("write the key store");
    let auth = if tls.client_auth { "need" } else { "none" };
    format!(
        "secureClientPort={port}\n\
         serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
         ssl.keyStore.location={}\n\
         ssl.keyStore.type=PEM\n\
         ssl.trustStore.location={}\n\
         ssl.trustStore.type=PEM\n\
         ssl.clientAuth={auth}\n",
        store.display(),
        tls.ca.display()
    )
}
