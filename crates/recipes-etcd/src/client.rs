//! The etcd client: one connection pool on its own runtime thread.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::{LeaseSessions, Runtime, Settings};
use recipes_core::Result;

use crate::builder::EtcdClientBuilder;
use crate::hub::WatchHub;
use crate::session::Etcd;

/// An etcd client on its own runtime thread, holding one lease (its
/// session) that its recipes' keys are bound to; see
/// [`recipes_core::Client`] for what it does.
///
/// One lease serves every lock, election and semaphore of the client: one
/// keep-alive stream; an uncontended acquire costs one transaction, a
/// release one delete. Two acquisitions of the *same* name must not share
/// a lease — they would own the same key `<name>/<lease id>` (etcd#11360)
/// — so threads sharing one handle (a [`Mutex`](crate::Mutex) or
/// [`Election`](crate::Election), and its clones) take turns in the
/// process, holding no key while they wait, and a second handle of a name
/// the client's lease already has under way gets a *single-use* lease of
/// its own, revoked (taking the key along) when its acquisition ends
/// without a win, when its guard goes, or with the client.
///
/// Cheap to clone; it closes when the last clone (and every guard made from
/// it) is dropped, or at [`close`](recipes_core::Client::close), which
/// revokes its leases, so its locks are free at once.
///
/// While no keep-alive is acknowledged (a partition, a paused process, a
/// dead member) the local deadline ([`valid_until`](recipes_core::Client::valid_until))
/// is not renewed, and when it passes every guard of the lease is lost. Not
/// guaranteed: that etcd keeps the lease as long as we assume — etcd 3.4.23
/// can revoke a kept-alive lease (etcd#15247); each held key is watched, so
/// that shows as loss too.
#[derive(Clone)]
pub struct EtcdClient {
    // The current session (lease) and the single-use ones of concurrent
    // acquisitions of one name; revoked with the client.
    leases: Arc<LeaseSessions<Etcd>>,
    // The one watch stream, shared by every acquisition.
    watches: WatchHub,
    endpoints: Arc<[String]>,
}

impl EtcdClient {
    /// Settings for a client of the members at `endpoints` (`host:port`).
    pub fn builder<I, S>(endpoints: I) -> EtcdClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdClientBuilder {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            user: None,
            tls: None,
            settings: Settings::default(),
        }
    }

    /// Connect with default settings.
    ///
    /// # Errors
    ///
    /// As for [`EtcdClientBuilder::connect`].
    pub fn connect<I, S>(endpoints: I) -> Result<EtcdClient>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdClient::builder(endpoints).connect()
    }

    /// A client of the connected `etcd`, with its first lease granted.
    pub(crate) fn start(
        config: EtcdClientBuilder,
        etcd: etcd_client::Client,
        rt: Runtime,
    ) -> Result<EtcdClient> {
        let etcd = Etcd(etcd);
        let watches = WatchHub::start(etcd.clone(), &rt, config.settings.rpc_timeout);
        let client = EtcdClient {
            leases: Arc::new(LeaseSessions::new(etcd, rt, config.settings)),
            watches,
            endpoints: config.endpoints.into(),
        };
        let leases = client.leases.clone();
        client.call("grant the client's lease", async move {
            leases.primary().await.map(drop)
        })?;
        Ok(client)
    }

    /// The deadline of one request.
    pub(crate) fn rpc_timeout(&self) -> Duration {
        self.leases.settings().rpc_timeout
    }

    /// The loss policy (see [`EtcdClientBuilder::loss_policy`]).
    pub fn loss_policy(&self) -> recipes_core::LossPolicy {
        self.leases.settings().loss_policy
    }

    /// Whether the current lease is lost: its deadline passed, the server
    /// said it is gone, or it was orphaned or revoked. The next acquisition
    /// then grants a new lease.
    pub fn is_session_lost(&self) -> bool {
        self.leases.is_lost()
    }

    /// Stop renewing the current lease — and the single-use ones — without
    /// revoking them, as a crashed process would: the server deletes their
    /// keys when the TTL runs out, and guards held on them fire their loss
    /// signal at their local deadline (before that). Later acquisitions
    /// grant a new lease; `close` and `Drop` leave the orphaned ones to
    /// expire.
    pub fn orphan(&self) {
        self.leases.orphan();
    }

    /// The client's watch stream.
    pub(crate) fn watches(&self) -> &WatchHub {
        &self.watches
    }

    /// The client's sessions.
    pub(crate) fn leases(&self) -> &LeaseSessions<Etcd> {
        &self.leases
    }

    /// Run `read` with the connection and the RPC timeout, on the runtime
    /// (within the RPC timeout).
    pub(crate) fn read_with<T, F, Fut>(&self, what: &str, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Etcd, Duration) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T>> + Send,
    {
        let (etcd, timeout) = (self.leases().store(), self.rpc_timeout());
        self.call(what, async move { read(etcd?, timeout).await })
    }

    /// Run one request on the runtime with the RPC timeout.
    pub(crate) fn call<T, F>(&self, what: &str, fut: F) -> Result<T>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        self.runtime().call(what, self.rpc_timeout(), fut)
    }

    /// The runtime this client runs on.
    pub fn runtime(&self) -> &Runtime {
        self.leases.runtime()
    }
}

impl fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdClient")
            .field("endpoints", &self.endpoints)
            .field(
                "lease",
                &self.leases().current().map(|s| format!("{:x}", s.id())),
            )
            .field("granted_ttl", &self.leases().granted_ttl())
            .finish()
    }
}
