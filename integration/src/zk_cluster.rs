//! A three-member ZooKeeper ensemble on loopback.

use std::fmt::Write as _;
use std::time::Duration;

use crate::four_letter::ZkMode;
use crate::ports::reserve_port;
use crate::server::{cluster_members, start_members, ServerProcess};
use crate::wait::poll_until_ok;
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
        let cluster = start_members(
            "zk cluster",
            || ZkCluster::spawn(&config),
            ZkCluster::members,
        );
        cluster.wait_serving(ZK_START_TIMEOUT);
        cluster
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
        members.iter().for_each(ServerProcess::spawn);
        ZkCluster { members }
    }

    cluster_members!(ZkServer, "a ZooKeeper member leads");

    /// The connect string of every member, comma-separated.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(ZkServer::connect_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the member whose `srvr` says `Mode: leader` right now;
    /// `None` when no member says so (election running, leader paused).
    pub fn leader_index(&self) -> Option<usize> {
        self.members
            .iter()
            .position(|member| member.mode() == Some(ZkMode::Leader))
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
        poll_until_ok(
            upper_bound,
            || {
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
                    return Ok(leaders[0]);
                }
                Err((modes, running))
            },
            |waited, (modes, running)| {
                format!(
                    "ZooKeeper ensemble not serving with one leader after {waited:?}: modes {modes:?}, running {running:?}\n{}",
                    self.log_tail()
                )
            },
        )
    }

    /// A new fact client (its own session) connected to the ensemble.
    pub fn facts(&self) -> ZkFacts {
        ZkFacts::connect(&self.connect_string(), self.logs())
    }
}
