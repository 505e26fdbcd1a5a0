//! The etcd election: etcd's `concurrency` election layout, the same
//! synced-watch wait as the mutex, and a fence from the write that confirms
//! the win.
//!
//! # Protocol
//!
//! An election named `/elections/x` has the key prefix `/elections/x/`; a
//! candidate owns `/elections/x/<lease id in hex>` with its value, bound to
//! its client's lease. The leader is the candidate key exactly one level
//! below the prefix with the lowest `create_revision`. Go's
//! `concurrency.Election` and `etcdctl elect` use the same layout and rule
//! (except that they count nested keys too, which only makes them more
//! careful), so they campaign against ours correctly.
//!
//! 1. One transaction: if our key does not exist, put it with our value and
//!    lease; either way read it and the oldest keys under the prefix. A
//!    synced watch on our own key starts alongside (see `watch.rs`).
//! 2. While a candidate is ahead of ours, watch the one just ahead (synced),
//!    read again, and wait for it to go — exactly as the mutex waits (the
//!    same engine and driver, `contend.rs`).
//! 3. Once a read finds none ahead of us, put our key again — same value,
//!    same lease, guarded by `create_revision == ours`. That write's
//!    revision (our key's `mod_revision` right after it) is the fencing
//!    token: it comes after the previous leader's key was deleted, so after
//!    every write of the previous term. Our key's `mod_revision` itself is
//!    no fence: it moves with every proclaim and, across a hand-over, can be
//!    lower than the previous leader's.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use recipes_core::{ElectionBackend, Error, LeaderInfo, LeaderObserver, Result, Runtime};
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::contend::{contend, Claim, Via};
use crate::lock::{EtcdKey, EtcdLock};
use crate::names::{key_prefix, validate_name};
use crate::observe::{read_candidates, read_leader};
use crate::session::HandleQueue;

/// A leader election shared with every process that campaigns on the same
/// name through etcd's `concurrency` package (Go's `concurrency.Election`,
/// `etcdctl elect`).
///
/// Made by [`EtcdClient::election`]. Campaign with
/// [`campaign`](recipes_core::Election::campaign) (or the `try_` and timed
/// variants, which return `Ok(None)` when the deadline passes and leave no
/// key behind), read the leader with
/// [`leader`](recipes_core::Election::leader), follow it with
/// [`backend().observe()`](EtcdElection::observe). Threads campaigning
/// through one handle take turns in the process (the second has no key in
/// etcd while it waits); separate handles of one name — latches and
/// selectors are handles of their own — campaign against each other in
/// etcd, the later one on another lease from the client's pool (see
/// [`EtcdClient`]), so two candidates are never one identity in etcd.
///
/// # Under pause and partition
///
/// Guaranteed (clocks within 500 ppm of the server's): a [`Leadership`]'s
/// loss signal fires before etcd can expire the client's lease and let
/// another candidate win; fencing tokens strictly increase across terms;
/// proclaims and fenced writes are refused by etcd once our key is gone.
/// Not guaranteed: that a leader stops in time — a process paused right
/// after checking its signal runs on after another leader was elected; only
/// the fence stops its writes. A partitioned leader loses leadership at its
/// local deadline even if etcd still keeps the lease. Leaders elected by
/// `etcdctl elect` or Go's `concurrency.Election` have no fence of ours.
///
/// Only keys exactly one level below the prefix are candidates: Go's
/// package lets the elections `/a` and `/a/b` block each other (and its
/// `Leader()` may name a key of `/a/b` as the leader of `/a`); ours does
/// not. Mixing the two on nested names is still never unsafe — Go only
/// waits longer.
pub type Election = recipes_core::Election<EtcdElection>;

/// A won etcd election: its fence, loss signal, `proclaim`, and fenced
/// writes through [`lease`](recipes_core::Leadership::lease). Dropping it
/// resigns in the background.
///
/// Under pause and partition its loss signal fires before etcd can let
/// another candidate win (see [`Election`]); it cannot stop a leader paused
/// right after checking it — pass the token with every write.
pub type Leadership = recipes_core::Leadership<EtcdLock>;

/// The etcd election backend; use it through [`Election`], which documents
/// what holds under pause and partition. Its own addition is
/// [`observe`](EtcdElection::observe), reached with
/// [`Election::backend`](recipes_core::Election::backend).
#[derive(Clone)]
pub struct EtcdElection {
    client: EtcdClient,
    name: String,
    prefix: String,
    // Shared by clones: they are one handle.
    queue: HandleQueue,
}

impl EtcdElection {
    pub(crate) fn new(client: EtcdClient, name: &str) -> Result<EtcdElection> {
        validate_election_name(name)?;
        Ok(EtcdElection {
            client,
            name: name.to_owned(),
            prefix: key_prefix(name),
            queue: HandleQueue::default(),
        })
    }

    pub(crate) fn client(&self) -> &EtcdClient {
        &self.client
    }

    /// The key prefix its candidates' keys live under (`<name>/`).
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// Campaign with `value` until elected or `deadline` (on the runtime):
    /// the mutex's contention with a win confirmed by a write. The deadline
    /// bounds the wait only, so a try of a free election wins; every way
    /// out but a win deletes our key.
    pub(crate) async fn campaign_until(
        &self,
        value: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Option<EtcdLock>> {
        let (via, claim) = (Via::Handle(&self.queue), Claim::Campaign(value));
        let won = contend(&self.client, &self.name, &self.prefix, via, claim, deadline).await?;
        Ok(won.map(|a| {
            log::info!(
                "[{} key={}] leadership gained (fence {})",
                a.session.label(),
                a.key,
                a.fence
            );
            EtcdKey::held(self.client.clone(), a, "leadership")
        }))
    }
}

impl fmt::Debug for EtcdElection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdElection")
            .field("name", &self.name)
            .field("client", &self.client)
            .finish()
    }
}

impl ElectionBackend for EtcdElection {
    type Leadership = EtcdLock;

    fn name(&self) -> &str {
        &self.name
    }

    fn runtime(&self) -> &Runtime {
        self.client.runtime()
    }

    fn campaign_async(
        &self,
        value: Vec<u8>,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Option<EtcdLock>>> + Send + 'static {
        let this = self.clone();
        async move { this.campaign_until(&value, deadline).await }
    }

    fn candidates(&self) -> Result<Vec<LeaderInfo>> {
        let (client, prefix) = (self.client.clone(), self.prefix.clone());
        self.client.call("list candidates", async move {
            let session = client.live_session().await?;
            let candidates =
                read_candidates(&session.etcd()?, session.rpc_timeout(), &prefix).await?;
            Ok(candidates.into_iter().map(|c| c.info).collect())
        })
    }

    /// Resigning retries until the key is deleted or the session is lost,
    /// which its deadline bounds by a TTL; the delete in flight then gives
    /// up within an RPC timeout, and one more covers the retry pause and
    /// the latch's last step. Taken from the settings, not the live
    /// session: after the client closed there is none.
    fn close_timeout(&self) -> Duration {
        self.client.lease_span() + 2 * self.client.rpc_timeout()
    }

    fn observe(&self) -> Result<LeaderObserver> {
        EtcdElection::observe(self)
    }

    fn leader(&self) -> Result<Option<LeaderInfo>> {
        let (client, prefix) = (self.client.clone(), self.prefix.clone());
        self.client.call("read the leader", async move {
            let session = client.live_session().await?;
            let leader = read_leader(&session.etcd()?, session.rpc_timeout(), &prefix).await?;
            Ok(leader.map(|c| c.info))
        })
    }
}

/// Election names follow the lock names' rules; the message says which.
fn validate_election_name(name: &str) -> Result<()> {
    validate_name(name).map_err(|e| match e {
        Error::InvalidArgument(msg) => {
            Error::InvalidArgument(msg.replacen("etcd lock name", "etcd election name", 1))
        }
        other => other,
    })
}

impl EtcdClient {
    /// An election named `name` (etcd's `concurrency` layout: keys
    /// `<name>/<lease id>` holding the candidates' values), shared with Go's
    /// `concurrency.Election` and `etcdctl elect <name>`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name that is empty, does not start
    /// with `/`, ends with `/`, has an empty component or a control
    /// character.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), recipes_etcd::Error> {
    /// use std::time::Duration;
    /// let client = recipes_etcd::EtcdClient::connect(["127.0.0.1:2379"])?;
    /// let election = client.election("/elections/scheduler")?;
    /// let observer = election.backend().observe()?;
    /// if let Some(leader) = election.try_campaign_for(b"host-a", Duration::from_secs(5))? {
    ///     // Pass leader.token() with every write to the protected resource.
    ///     leader.proclaim(b"host-a: ready")?;
    ///     let seen = observer.recv_timeout(Duration::from_secs(5));
    ///     println!("observed {seen:?}, fence {}", leader.token());
    ///     leader.resign()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self, name: &str) -> Result<Election> {
        Ok(Election::from_backend(EtcdElection::new(
            self.clone(),
            name,
        )?))
    }
}
