//! A read of the cluster's state, for a deployment check (`recipes
//! doctor`): on the client's own connection, with its user, within the
//! RPC timeout.

use recipes_core::Result;

use crate::client::EtcdClient;
use crate::rpc::from_etcd;

/// What the member the client talks to says about itself and its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdServerInfo {
    /// The member's etcd version, e.g. `3.5.17`.
    pub version: String,
    /// The member id of the leader it follows; 0 when it knows none.
    pub leader: u64,
    /// How many members the cluster has (learners included).
    pub members: usize,
    /// The member's raft term.
    pub raft_term: u64,
}

impl EtcdClient {
    /// A status request and a member list.
    ///
    /// # Errors
    ///
    /// [`recipes_core::Error::PermissionDenied`] when the user may not list
    /// members; connection errors within the RPC timeout.
    pub fn server_info(&self) -> Result<EtcdServerInfo> {
        self.read_with("read the cluster's status", |mut etcd, _| async move {
            let status = etcd
                .status()
                .await
                .map_err(|e| from_etcd("read the member status", e))?;
            let members = etcd
                .member_list()
                .await
                .map_err(|e| from_etcd("list the members", e))?;
            Ok(EtcdServerInfo {
                version: status.version().to_owned(),
                leader: status.leader(),
                members: members.members().len(),
                raft_term: status.raft_term(),
            })
        })
    }
}
