//! etcd's leases as core's [`LeaseStore`]: a session is core's
//! [`LeaseSession`] over them (grant, keep-alive every TTL/3 on
//! etcd-client's keep-alive stream, revoke), and the client's sessions are
//! core's [`LeaseSessions`](recipes_core::store::LeaseSessions), with one turn per
//! name on each (see [`EtcdClient`](crate::EtcdClient)). A semaphore's
//! permits have keys of their own (`<lease id>-<n>`): one lease serves any
//! number of them.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use recipes_core::store::{LeaseSession, LeaseStore, Opened, Renewal, RenewalStream};
use recipes_core::Result;

use crate::rpc::{from_etcd, retrying};

/// A session: one etcd lease, kept alive.
pub(crate) type Session = LeaseSession<Etcd>;

/// The connection to etcd, as core's lease store (and, dereferenced, the
/// etcd-client handle every request uses).
#[derive(Clone)]
pub(crate) struct Etcd(pub(crate) etcd_client::Client);

impl Deref for Etcd {
    type Target = etcd_client::Client;

    fn deref(&self) -> &etcd_client::Client {
        &self.0
    }
}

impl DerefMut for Etcd {
    fn deref_mut(&mut self) -> &mut etcd_client::Client {
        &mut self.0
    }
}

impl LeaseStore for Etcd {
    type Renewals = KeepAlive;

    fn label(&self, id: i64) -> String {
        format!("lease={id:x}")
    }

    /// A TTL etcd reports as 0 or less comes back as zero, which core
    /// refuses.
    async fn grant(&self, ttl: Duration, timeout: Duration) -> Result<(i64, Duration)> {
        // Whole seconds, rounded up: never shorter than asked.
        let asked = recipes_core::store::whole_seconds_up(ttl);
        // A grant sent twice leaks a lease without keys for one TTL.
        let granted = retrying("grant an etcd lease", timeout, || {
            let mut etcd = self.0.clone();
            async move { etcd.lease_grant(asked, None).await }
        })
        .await?;
        let ttl = u64::try_from(granted.ttl()).unwrap_or(0);
        Ok((granted.id(), Duration::from_secs(ttl)))
    }

    /// etcd-client sends the first keep-alive itself and swallows its
    /// reply (failing if its TTL is 0): the open counts as a renewal with
    /// the granted TTL, which every reply of this lease carries.
    async fn renewals(&self, id: i64, _timeout: Duration) -> Result<Opened<KeepAlive>> {
        match self.0.lease_client().keep_alive(id).await {
            Ok((keeper, stream)) => Ok(Opened::Renewed(KeepAlive(keeper, stream))),
            Err(e) if is_lease_not_found(&e) => Ok(Opened::Gone),
            Err(e) => Err(from_etcd("open a keep-alive stream", e)),
        }
    }

    async fn revoke(&self, id: i64, timeout: Duration) -> Result<()> {
        retrying(&format!("revoke lease {id:x}"), timeout, || {
            let mut etcd = self.0.clone();
            async move {
                match etcd.lease_revoke(id).await {
                    Ok(_) => Ok(()),
                    Err(e) if is_lease_not_found(&e) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        })
        .await
    }
}

/// etcd-client's keep-alive stream as core's renewal stream.
pub(crate) struct KeepAlive(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream);

impl RenewalStream for KeepAlive {
    async fn send(&mut self) -> Result<()> {
        self.0
            .keep_alive()
            .await
            .map_err(|e| from_etcd("send a keep-alive", e))
    }

    async fn reply(&mut self) -> Result<Renewal> {
        match self.1.message().await {
            Ok(Some(reply)) if reply.ttl() <= 0 => Ok(Renewal::Gone),
            Ok(Some(reply)) => Ok(Renewal::Granted(Duration::from_secs(
                reply.ttl().unsigned_abs(),
            ))),
            Ok(None) => Err(recipes_core::Error::ConnectionLoss),
            Err(e) => Err(from_etcd("keep-alive", e)),
        }
    }
}

/// `e`, after firing `session`'s loss when it says the session's lease is
/// gone on the server ([`Error::SessionExpired`](recipes_core::Error)): a
/// put with our lease found it dropped before the keep-alive did, and the
/// engine then starts over on a new lease, not on the dead one.
pub(crate) fn lease_gone(session: &Session, e: recipes_core::Error) -> recipes_core::Error {
    if matches!(e, recipes_core::Error::SessionExpired) {
        session.epoch().fire(recipes_core::LossReason::Revoked);
    }
    e
}

/// The server's "requested lease not found", as a gRPC status or as
/// etcd-client's keep-alive error.
fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => status.message().contains("lease not found"),
        etcd_client::Error::LeaseKeepAliveError(msg) => msg.contains("not found"),
        _ => false,
    }
}
