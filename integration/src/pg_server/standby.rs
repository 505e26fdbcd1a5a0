//! A streaming standby of a test server: `pg_basebackup -R` of the
//! primary (the `--auth=trust` data folder lets the superuser replicate
//! from loopback), started like any server on a port of its own.
//! Asynchronous until the primary names it in `synchronous_standby_names`.

use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};

use super::run::server_args;
use super::{chown, os_user, PgServer, PG_START_TIMEOUT, PG_SUPERUSER};
use crate::ports::{reserve_port, PortReservation};
use crate::psql::PG_BIN_DIR;
use crate::server::start_server;
use crate::test_dir::TestDir;

impl PgServer {
    /// Starts a streaming standby of this server (without TLS) and waits
    /// until the primary lists it as streaming in `pg_stat_replication`.
    ///
    /// # Panics
    ///
    /// When the base backup fails, or the standby does not start or
    /// stream within the (scaled) start timeout.
    pub fn standby(&self) -> PgServer {
        let standby = start_server("pg-standby", || self.prepare_standby(reserve_port()));
        let streaming = "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'";
        crate::wait::wait_until_with(
            "the standby streams from its primary",
            PG_START_TIMEOUT,
            || self.sql(streaming).trim() != "0",
            || standby.log_tail(),
        );
        standby
    }

    /// The standby's folder, its data copied from this server; not started.
    fn prepare_standby(&self, port: PortReservation) -> PgServer {
        let (uid, gid) = os_user();
        let dir = TestDir::new("pg-standby");
        chown(dir.path(), uid, gid);
        let data = dir.path().join("data");
        let primary = self.addr();
        let out = Command::new(format!("{PG_BIN_DIR}/pg_basebackup"))
            .args([
                "-h",
                &primary.ip().to_string(),
                "-p",
                &primary.port().to_string(),
            ])
            .args([
                "-U",
                PG_SUPERUSER,
                "-X",
                "stream",
                "-R",
                "-c",
                "fast",
                "--no-sync",
            ])
            .arg("-D")
            .arg(&data)
            .uid(uid)
            .gid(gid)
            .stdin(Stdio::null())
            .output()
            .expect("pg_basebackup (Debian's postgresql-15)");
        assert!(
            out.status.success(),
            "pg_basebackup of {primary} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let config = super::PgConfig {
            tls: None,
            ..self.config().clone()
        };
        let args = server_args(&config, &port, dir.path(), &data);
        PgServer::unstarted("pg-standby", config, port, dir, args)
    }
}
