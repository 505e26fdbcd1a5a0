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

/// A lease of the check's own, whose remaining TTL (whole seconds, by the
/// leader's clock) times the leader's clock; see
/// [`EtcdClient::clock_lease`]. Dropping it revokes the lease.
#[derive(Debug)]
pub struct EtcdClockLease {
    client: EtcdClient,
    id: i64,
}

impl EtcdClient {
    /// Grant a lease of `ttl_secs` seconds, attached to no key, and keep
    /// it only to read its remaining TTL.
    ///
    /// # Errors
    ///
    /// [`recipes_core::Error::PermissionDenied`] when the user may not
    /// grant leases; connection errors within the RPC timeout.
    pub fn clock_lease(&self, ttl_secs: i64) -> Result<EtcdClockLease> {
        let id = self.read_with("grant a clock lease", move |mut etcd, _| async move {
            let granted = etcd
                .lease_grant(ttl_secs, None)
                .await
                .map_err(|e| from_etcd("grant a lease", e))?;
            Ok(granted.id())
        })?;
        Ok(EtcdClockLease {
            client: self.clone(),
            id,
        })
    }

    /// Whether the user may read (a range) and write (a put and a delete
    /// of `<prefix>recipes-doctor-access`) the keys under `prefix`:
    /// `Ok(false)` for a right etcd denies.
    ///
    /// # Errors
    ///
    /// Connection errors within the RPC timeout.
    pub fn prefix_access(&self, prefix: &str) -> Result<EtcdAccess> {
        if prefix.is_empty() || prefix.contains(char::is_control) {
            return Err(recipes_core::Error::invalid(format!(
                "the etcd key prefix {prefix:?} is empty or holds a control character: \
                 write the prefix of the application's names, such as /app/"
            )));
        }
        let prefix = prefix.to_owned();
        self.read_with("check the prefix's rights", |mut etcd, _| async move {
            let denied = |r: Result<()>| match r {
                Ok(()) => Ok(true),
                Err(recipes_core::Error::PermissionDenied { .. }) => Ok(false),
                Err(e) => Err(e),
            };
            let range = etcd_client::GetOptions::new()
                .with_prefix()
                .with_keys_only()
                .with_limit(1);
            let read = etcd
                .get(prefix.as_str(), Some(range))
                .await
                .map(|_| ())
                .map_err(|e| from_etcd(&format!("read the keys under {prefix}"), e));
            let key = format!("{prefix}recipes-doctor-access");
            let mut write = etcd
                .put(key.as_str(), "", None)
                .await
                .map(|_| ())
                .map_err(|e| from_etcd(&format!("write {key}"), e));
            if write.is_ok() {
                write = etcd
                    .delete(key.as_str(), None)
                    .await
                    .map(|_| ())
                    .map_err(|e| from_etcd(&format!("delete {key}"), e));
            }
            Ok(EtcdAccess {
                read: denied(read)?,
                write: denied(write)?,
            })
        })
    }
}

/// The rights of the user on a key prefix; see
/// [`EtcdClient::prefix_access`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdAccess {
    /// A range read under the prefix was allowed.
    pub read: bool,
    /// A put and a delete under the prefix were allowed.
    pub write: bool,
}

impl EtcdClockLease {
    /// The lease's remaining TTL in whole seconds (one round trip to the
    /// leader).
    ///
    /// # Errors
    ///
    /// Connection errors within the RPC timeout.
    pub fn remaining(&self) -> Result<i64> {
        let id = self.id;
        self.client
            .read_with("read the clock lease", move |mut etcd, _| async move {
                etcd.lease_time_to_live(id, None)
                    .await
                    .map(|r| r.ttl())
                    .map_err(|e| from_etcd("read a lease's TTL", e))
            })
    }
}

impl Drop for EtcdClockLease {
    fn drop(&mut self) {
        let id = self.id;
        let _ = self
            .client
            .read_with("revoke the clock lease", move |mut etcd, _| async move {
                etcd.lease_revoke(id)
                    .await
                    .map(|_| ())
                    .map_err(|e| from_etcd("revoke a lease", e))
            });
    }
}
