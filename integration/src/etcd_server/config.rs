//! The settings of a test etcd server ([`EtcdConfig`]), which binary it
//! runs, and how a member learns about its cluster ([`Membership`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::certs::ServerTls;

/// The etcd binary (Debian's package).
pub const ETCD_BINARY: &str = "/usr/bin/etcd";

/// The etcd versions beside Debian's 3.4 that the version matrix runs
/// (`scripts/setup` fetches them).
pub const VENDORED_VERSIONS: [&str; 3] = ["3.5.34", "3.6.15", "3.7.2"];

/// Settings of a test etcd server.
///
/// Defaults: heartbeat 50 ms, election timeout 500 ms — a killed leader is
/// replaced in about a second, and the minimum lease TTL is 1 s (etcd
/// silently raises a lower TTL to ceil(1.5 × election timeout)).
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    pub(super) heartbeat_interval: Duration,
    pub(super) election_timeout: Duration,
    pub(super) fsync: bool,
    pub(super) binary: PathBuf,
    pub(super) tls: Option<ServerTls>,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            heartbeat_interval: Duration::from_millis(50),
            election_timeout: Duration::from_millis(500),
            fsync: false,
            binary: PathBuf::from(ETCD_BINARY),
            tls: None,
        }
    }
}

impl EtcdConfig {
    /// Run the etcd server `version` (`3.5.34`, one of
    /// [`VENDORED_VERSIONS`]) from the etcd-bin-vendored binaries that
    /// `scripts/setup` puts in `target/etcd-bins`, instead of Debian's.
    ///
    /// # Panics
    ///
    /// When that binary is missing (run `scripts/setup`).
    pub fn with_version(mut self, version: &str) -> Self {
        let dir = std::env::var_os("RECIPES_ETCD_BINS").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/etcd-bins"),
            PathBuf::from,
        );
        let binary = dir.join(version).join("etcd");
        assert!(
            binary.exists(),
            "etcd {version} is missing at {}: run scripts/setup (x86_64 only)",
            binary.display()
        );
        self.binary = binary;
        self
    }

    /// Sync writes to disk (no `--unsafe-no-fsync`), as benchmarks want;
    /// functional tests run without.
    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// Sets `--heartbeat-interval` and `--election-timeout` (etcd wants the
    /// election timeout ≥ 5 × the heartbeat).
    pub fn with_election(
        mut self,
        heartbeat_interval: Duration,
        election_timeout: Duration,
    ) -> Self {
        self.heartbeat_interval = heartbeat_interval;
        self.election_timeout = election_timeout;
        self
    }

    /// Serve clients over TLS (an `https://` client URL, its certificate
    /// and key), with `--client-cert-auth` when `tls.client_auth`. The
    /// harness itself (health, facts, status) reads through a second,
    /// plain client URL on another port, so that it works whatever is
    /// wrong with the certificate under test.
    pub fn with_tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// `--heartbeat-interval`.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat_interval
    }

    /// `--election-timeout`.
    pub fn election_timeout(&self) -> Duration {
        self.election_timeout
    }

    /// The smallest lease TTL the server grants: ceil(1.5 × election
    /// timeout) in whole seconds. Smaller requests are silently raised.
    pub fn min_lease_ttl(&self) -> Duration {
        let millis = self.election_timeout.as_millis() * 3 / 2;
        Duration::from_secs(millis.div_ceil(1000) as u64)
    }
}

/// How a member learns about its cluster.
#[derive(Debug, Clone)]
pub(crate) struct Membership {
    /// `name=http://127.0.0.1:<peer port>,…` for every member.
    pub(crate) initial_cluster: String,
    /// A token unique to this cluster, so members of different test clusters
    /// never join each other.
    pub(crate) token: String,
}

/// A cluster token no other test cluster uses.
pub(crate) fn unique_token(label: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "{label}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}
