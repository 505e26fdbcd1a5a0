//! A three-member ZooKeeper ensemble on loopback.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::env::scale;
use crate::four_letter::ZkMode;
use crate::logs::ServerLogs;
use crate::ports::reserve_port;
use crate::zk_facts::ZkFacts;
use crate::zk_server::{Ensemble, ZkConfig, ZkServer, ZK_START_TIMEOUT};

/// Number of members of a [`ZkCluster`].
pub const ZK_CLUSTER_SIZE: usize = 3;

/// A ZooKeeper ensemble of [`ZK_CLUSTER_SIZE`] members, each a
/// [`ZkServer`] with its own folder and ports.
///
/// Dropping it kills and reaps every member.
#[derive(Debug)]
pub struct ZkCluster {
    members: Vec<ZkServer>,
}

impl ZkCluster {
    /// Starts an ensemble with [`ZkConfig::default`] and waits until every
    /// member serves and exactly one leads.
    ///
    /// # Panics
    ///
    /// When that does not happen within the (scaled) start timeout; the
    /// message quotes every member's log.
    pub fn start() -> ZkCluster {
        ZkCluster::start_with(ZkConfig::default())
    }

    /// Starts an ensemble with `config`; see [`start`](Self::start).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(config: ZkConfig) -> ZkCluster {
        let mut attempt = 1;
        loop {
            let cluster = ZkCluster::spawn(&config);
            let started = cluster
                .members
                .iter()
                .try_for_each(|member| member.wait_started(ZK_START_TIMEOUT));
            match started {
                Ok(()) => {
                    cluster.wait_serving(ZK_START_TIMEOUT);
                    return cluster;
                }
                Err(why) if attempt < 3 && cluster.members.iter().any(ZkServer::lost_port_race) => {
                    log::warn!(
                        "[zk cluster] port race on start attempt {attempt}, retrying: {why}"
                    );
                    attempt += 1;
                }
                Err(why) => panic!("{why}\n{}", cluster.log_tail()),
            }
        }
    }

    fn spawn(config: &ZkConfig) -> ZkCluster {
        let client_ports: Vec<_> = (0..ZK_CLUSTER_SIZE).map(|_| reserve_port()).collect();
        let peer_ports: Vec<_> = (0..ZK_CLUSTER_SIZE)
            .map(|_| [reserve_port(), reserve_port()])
            .collect();
        let mut server_lines = String::new();
        for (i, [quorum, election]) in peer_ports.iter().enumerate() {
            let _ = writeln!(
                server_lines,
                "server.{}=127.0.0.1:{}:{}",
                i + 1,
                quorum.port(),
                election.port()
            );
        }
        let members: Vec<ZkServer> = client_ports
            .into_iter()
            .zip(peer_ports)
            .enumerate()
            .map(|(i, (client, peers))| {
                let ensemble = Ensemble {
                    my_id: i + 1,
                    server_lines: server_lines.clone(),
                };
                ZkServer::prepare(
                    format!("zk-{i}"),
                    config.clone(),
                    client,
                    peers.into(),
                    Some(ensemble),
                )
            })
            .collect();
        // All at once: a member alone cannot form a quorum.
        members.iter().for_each(ZkServer::spawn);
        ZkCluster { members }
    }

    /// Member `i` (0-based).
    ///
    /// # Panics
    ///
    /// When `i` is out of range.
    pub fn member(&self, i: usize) -> &ZkServer {
        &self.members[i]
    }

    /// All members.
    pub fn members(&self) -> &[ZkServer] {
        &self.members
    }

    /// The connect string of every member, comma-separated.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(ZkServer::connect_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every member's client address.
    pub fn client_addrs(&self) -> Vec<std::net::SocketAddr> {
        self.members.iter().map(ZkServer::client_addr).collect()
    }

    /// The index of the member whose `srvr` says `Mode: leader` right now;
    /// `None` when no member says so (election running, leader paused).
    pub fn leader_index(&self) -> Option<usize> {
        self.members
            .iter()
            .position(|member| member.mode() == Some(ZkMode::Leader))
    }

    /// Waits until some member leads and returns its index.
    ///
    /// # Panics
    ///
    /// After `upper_bound` (scaled); the message quotes every log.
    pub fn wait_for_leader(&self, upper_bound: Duration) -> usize {
        crate::wait::wait_for_with(
            "a ZooKeeper member leads",
            upper_bound,
            || self.leader_index(),
            || self.log_tail(),
        )
    }

    /// Waits until every *running* member (not killed; a paused member
    /// counts as running) serves as leader or follower and exactly one
    /// leads; returns the leader's index.
    ///
    /// # Panics
    ///
    /// After `upper_bound` (scaled); the message quotes every member's mode
    /// and log.
    pub fn wait_serving(&self, upper_bound: Duration) -> usize {
        let limit = scale(upper_bound);
        let start = Instant::now();
        loop {
            let modes: Vec<Option<ZkMode>> = self
                .members
                .iter()
                .map(|member| member.pid().and_then(|_| member.mode()))
                .collect();
            let running: Vec<bool> = self
                .members
                .iter()
                .map(|member| member.pid().is_some())
                .collect();
            let all_serving = modes.iter().zip(&running).all(|(mode, running)| {
                !running || mode.as_ref().is_some_and(ZkMode::is_quorum_member)
            });
            let leaders: Vec<usize> = (0..modes.len())
                .filter(|&i| modes[i] == Some(ZkMode::Leader))
                .collect();
            if all_serving && leaders.len() == 1 {
                return leaders[0];
            }
            if start.elapsed() > limit {
                panic!(
                    "ZooKeeper ensemble not serving with one leader after {:?}: modes {modes:?}, running {running:?}\n{}",
                    start.elapsed(),
                    self.log_tail()
                );
            }
            std::thread::sleep(crate::wait::POLL_INTERVAL);
        }
    }

    /// Every member's log, for panic messages.
    pub fn logs(&self) -> ServerLogs {
        self.members
            .iter()
            .fold(ServerLogs::default(), |logs, member| {
                logs.merged(&member.logs())
            })
    }

    /// The last lines of every member's log.
    pub fn log_tail(&self) -> String {
        self.logs().tail()
    }

    /// A new fact client (its own session) connected to the ensemble.
    pub fn facts(&self) -> ZkFacts {
        ZkFacts::connect(&self.connect_string(), self.logs())
    }
}
