//! What [`ZkServer`](crate::ZkServer) and [`EtcdServer`](crate::EtcdServer)
//! (and their clusters) share: start with port-race retries, the wait until
//! a started process answers, restart, and the process lifecycle methods.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::env::scale;
use crate::process::ManagedProcess;

/// One server process of the harness, as the shared start and restart code
/// sees it.
pub(crate) trait ServerProcess {
    /// The server's name in messages: `etcd`, `ZooKeeper`.
    const KIND: &'static str;
    /// What a started server is, in messages: `healthy`, `serving`.
    const READY: &'static str;
    /// Appended to the name when the process cannot be spawned.
    const SPAWN_HINT: &'static str;
    /// What the server logs when another process took its port.
    const PORT_IN_USE: &'static str;
    /// Upper bound (scaled) for a start or restart.
    const START_TIMEOUT: Duration;

    /// The process (its label is the server's name in messages).
    fn process(&self) -> &ManagedProcess;

    /// The client address, in messages.
    fn addr(&self) -> SocketAddr;

    /// Whether the started server answers as it should (one short probe).
    fn is_ready(&self) -> bool;

    /// What the server type does once a start or restart is ready.
    fn on_ready(&self) {}

    /// Starts the process.
    ///
    /// # Panics
    ///
    /// When it cannot be spawned; the message quotes the log.
    fn spawn(&self) {
        let process = self.process();
        if let Err(e) = process.start() {
            panic!(
                "cannot spawn {} {}{}: {e}\n{}",
                Self::KIND,
                process.label(),
                Self::SPAWN_HINT,
                process.logs().tail()
            );
        }
    }

    /// Waits until [`is_ready`](Self::is_ready); an error when the process
    /// exits or `upper_bound` (scaled) passes.
    fn wait_started(&self, upper_bound: Duration) -> Result<(), String> {
        let process = self.process();
        let limit = scale(upper_bound);
        let start = Instant::now();
        loop {
            if let Some(status) = process.exit_status() {
                return Err(format!(
                    "{} {} exited during start: {status}",
                    Self::KIND,
                    process.label()
                ));
            }
            if self.is_ready() {
                self.on_ready();
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(format!(
                    "{} {} at {} not {} after {:?}",
                    Self::KIND,
                    process.label(),
                    self.addr(),
                    Self::READY,
                    start.elapsed()
                ));
            }
            std::thread::sleep(crate::wait::POLL_INTERVAL);
        }
    }

    /// [`wait_started`](Self::wait_started), panicking with `prefix`, the
    /// reason and the log.
    fn expect_started(&self, prefix: &str, upper_bound: Duration) {
        if let Err(why) = self.wait_started(upper_bound) {
            panic!("{prefix}{why}\n{}", self.process().logs().tail());
        }
    }

    /// Whether the start failed because another process took our port.
    fn lost_port_race(&self) -> bool {
        std::fs::read_to_string(self.process().log_path())
            .is_ok_and(|log| log.contains(Self::PORT_IN_USE))
    }

    /// Kills the process if it runs, spawns it again and waits until it is
    /// ready.
    ///
    /// # Panics
    ///
    /// When it is not ready within [`START_TIMEOUT`](Self::START_TIMEOUT).
    fn respawn(&self) {
        self.process().kill();
        self.spawn();
        self.expect_started("restart failed: ", Self::START_TIMEOUT);
    }
}

/// Spawns with `spawn` and waits with `wait_started`, up to three times while
/// a start fails because another process took a port (`lost_port_race`).
///
/// # Panics
///
/// When a start fails otherwise, or the third time; the message quotes
/// `log_tail`.
pub(crate) fn start_with_retries<T>(
    tag: &str,
    mut spawn: impl FnMut() -> T,
    wait_started: impl Fn(&T) -> Result<(), String>,
    lost_port_race: impl Fn(&T) -> bool,
    log_tail: impl Fn(&T) -> String,
) -> T {
    let mut attempt = 1;
    loop {
        let started = spawn();
        match wait_started(&started) {
            Ok(()) => return started,
            Err(why) if attempt < 3 && lost_port_race(&started) => {
                log::warn!("[{tag}] port race on start attempt {attempt}, retrying: {why}");
                attempt += 1;
            }
            Err(why) => panic!("{why}\n{}", log_tail(&started)),
        }
    }
}

/// Starts one server with retries; see [`start_with_retries`].
pub(crate) fn start_server<S: ServerProcess>(tag: &str, mut prepare: impl FnMut() -> S) -> S {
    start_with_retries(
        tag,
        || {
            let server = prepare();
            server.spawn();
            server
        },
        |server| server.wait_started(S::START_TIMEOUT),
        S::lost_port_race,
        |server| server.process().logs().tail(),
    )
}

/// Starts the members of a cluster with retries; see
/// [`start_with_retries`]. `spawn` prepares and spawns all members.
pub(crate) fn start_members<C, S: ServerProcess>(
    tag: &str,
    spawn: impl FnMut() -> C,
    members: impl Fn(&C) -> &[S],
) -> C {
    start_with_retries(
        tag,
        spawn,
        |cluster| {
            members(cluster)
                .iter()
                .try_for_each(|member| member.wait_started(S::START_TIMEOUT))
        },
        |cluster| members(cluster).iter().any(S::lost_port_race),
        |cluster| {
            members(cluster)
                .iter()
                .map(|member| member.process().logs())
                .collect::<crate::ServerLogs>()
                .tail()
        },
    )
}

/// The public lifecycle methods of a server type over its
/// `process: ManagedProcess` field; `$what` names the process in the docs.
macro_rules! process_lifecycle {
    ($what:literal) => {
        #[doc = concat!("The ", $what, "'s pid while it runs (also while paused).")]
        pub fn pid(&self) -> Option<u32> {
            self.process.pid()
        }

        /// Its log, for panic messages.
        pub fn logs(&self) -> $crate::logs::ServerLogs {
            self.process.logs()
        }

        /// The last lines of its log, headed `server log (…)`.
        pub fn log_tail(&self) -> String {
            self.logs().tail()
        }

        #[doc = concat!("Kills the ", $what, " with SIGKILL and reaps it.")]
        pub fn kill(&self) {
            self.process.kill();
        }

        #[doc = concat!(
                    "Stops the ", $what, " with SIGSTOP (it holds its connections and answers ",
                    "nothing) and returns once every thread is stopped."
                )]
        ///
        /// # Panics
        ///
        /// When the threads do not all stop within 5 s (scaled).
        pub fn pause(&self) {
            self.process.pause();
        }

        #[doc = concat!(
                    "Continues a paused ", $what, " with SIGCONT and returns once no thread is ",
                    "stopped; it may need a moment more to answer again."
                )]
        pub fn resume(&self) {
            self.process.resume();
        }
    };
}
pub(crate) use process_lifecycle;

/// The public methods of a cluster type over its `members: Vec<$server>`
/// field and its `leader_index`; `$leads` describes the wait for a leader.
macro_rules! cluster_members {
    ($server:ty, $leads:literal) => {
        /// Member `i` (0-based).
        ///
        /// # Panics
        ///
        /// When `i` is out of range.
        pub fn member(&self, i: usize) -> &$server {
            &self.members[i]
        }

        /// All members.
        pub fn members(&self) -> &[$server] {
            &self.members
        }

        /// Every member's client address.
        pub fn client_addrs(&self) -> Vec<std::net::SocketAddr> {
            self.members.iter().map(<$server>::client_addr).collect()
        }

        /// Every member's log, for panic messages.
        pub fn logs(&self) -> $crate::logs::ServerLogs {
            self.members.iter().map(<$server>::logs).collect()
        }

        /// The last lines of every member's log.
        pub fn log_tail(&self) -> String {
            self.logs().tail()
        }

        /// Waits until some member leads and returns its index.
        ///
        /// # Panics
        ///
        /// After `upper_bound` (scaled); the message quotes every log.
        pub fn wait_for_leader(&self, upper_bound: std::time::Duration) -> usize {
            $crate::wait::wait_for_with(
                $leads,
                upper_bound,
                || self.leader_index(),
                || self.log_tail(),
            )
        }
    };
}
pub(crate) use cluster_members;
