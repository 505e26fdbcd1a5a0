//! A three-member etcd cluster on loopback.

use std::time::Duration;

use crate::etcd_facts::EtcdFacts;
use crate::etcd_server::{
    unique_token, EtcdConfig, EtcdServer, EtcdStatus, Membership, ETCD_START_TIMEOUT,
};
use crate::ports::reserve_port;
use crate::server::{cluster_members, start_members, ServerProcess};
use crate::wait::poll_until_ok;

/// Number of members of an [`EtcdCluster`].
pub const ETCD_CLUSTER_SIZE: usize = 3;

/// An etcd cluster of [`ETCD_CLUSTER_SIZE`] members, each an
/// [`EtcdServer`] with its own folder and ports.
///
/// Dropping it kills and reaps every member.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
}

impl EtcdCluster {
    /// Starts a cluster with [`EtcdConfig::default`] and waits until every
    /// member is healthy and all follow one leader.
    ///
    /// # Panics
    ///
    /// When that does not happen within the (scaled) start timeout; the
    /// message quotes every member's log.
    pub fn start() -> EtcdCluster {
        EtcdCluster::start_with(EtcdConfig::default())
    }

    /// Starts a cluster with `config`; see [`start`](Self::start).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(config: EtcdConfig) -> EtcdCluster {
        let cluster = start_members(
            "etcd cluster",
            || EtcdCluster::spawn(&config),
            EtcdCluster::members,
        );
        cluster.wait_serving(ETCD_START_TIMEOUT);
        cluster
    }

    fn spawn(config: &EtcdConfig) -> EtcdCluster {
        let ports: Vec<_> = (0..ETCD_CLUSTER_SIZE)
            .map(|_| (reserve_port(), reserve_port()))
            .collect();
        let initial_cluster = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("etcd-{i}=http://{}", peer.addr()))
            .collect::<Vec<_>>()
            .join(",");
        let membership = Membership {
            initial_cluster,
            token: unique_token("etcd-cluster"),
        };
        let members: Vec<EtcdServer> = ports
            .into_iter()
            .enumerate()
            .map(|(i, (client, peer))| {
                EtcdServer::prepare(
                    format!("etcd-{i}"),
                    config.clone(),
                    client,
                    peer,
                    &membership,
                )
            })
            .collect();
        members.iter().for_each(ServerProcess::spawn);
        EtcdCluster { members }
    }

    cluster_members!(EtcdServer, "an etcd member leads");

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdServer::endpoint).collect()
    }

    /// The index of the leader as the answering members see it right now:
    /// the member that answers status and whose id the others (and it)
    /// report as leader. `None` when no answering member knows a leader or
    /// the leader does not answer.
    pub fn leader_index(&self) -> Option<usize> {
        let statuses: Vec<Option<EtcdStatus>> =
            self.members.iter().map(|member| member.status()).collect();
        let leader = statuses
            .iter()
            .flatten()
            .map(|status| status.leader)
            .find(|&id| id != 0)?;
        statuses
            .iter()
            .position(|status| status.is_some_and(|s| s.member_id == leader && s.leader == leader))
    }

    /// Waits until every *running* member (not killed; a paused member
    /// counts as running) is healthy and all of them follow the same
    /// leader; returns the leader's index.
    ///
    /// # Panics
    ///
    /// After `upper_bound` (scaled); the message quotes every member's
    /// status and log.
    pub fn wait_serving(&self, upper_bound: Duration) -> usize {
        poll_until_ok(
            upper_bound,
            || {
                let running: Vec<bool> = self
                    .members
                    .iter()
                    .map(|member| member.pid().is_some())
                    .collect();
                let statuses: Vec<Option<EtcdStatus>> = self
                    .members
                    .iter()
                    .zip(&running)
                    .map(|(member, &running)| {
                        if running && member.is_healthy() {
                            member.status()
                        } else {
                            None
                        }
                    })
                    .collect();
                let all_answer = statuses
                    .iter()
                    .zip(&running)
                    .all(|(status, &running)| !running || status.is_some());
                let leaders: Vec<u64> = statuses
                    .iter()
                    .flatten()
                    .map(|status| status.leader)
                    .collect();
                let one_leader = leaders
                    .first()
                    .is_some_and(|&first| first != 0 && leaders.iter().all(|&l| l == first));
                if all_answer && one_leader {
                    let leader = leaders[0];
                    if let Some(i) = statuses
                        .iter()
                        .position(|s| s.is_some_and(|s| s.member_id == leader))
                    {
                        return Ok(i);
                    }
                }
                Err((statuses, running))
            },
            |waited, (statuses, running)| {
                format!(
                    "etcd cluster not serving with one leader after {waited:?}: statuses {statuses:?}, running {running:?}\n{}",
                    self.log_tail()
                )
            },
        )
    }

    /// A new fact client connected to every member.
    pub fn facts(&self) -> EtcdFacts {
        EtcdFacts::connect(&self.endpoints(), self.logs())
    }
}
