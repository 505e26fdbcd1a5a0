//! [`ZkClient`] as the one client surface of `recipes-core`
//! ([`recipes_core::Client`]), and fenced writes with the same signature
//! as every backend's ([`FencedWrites`]).

use std::time::Duration;

use recipes_core::{BootInstant, Client, Contender, Result};
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::election::{Election, ZkElection};
use crate::error::from_zk;
use crate::latch::LeaderLatch;
use crate::mutex::{InterProcessMutex, ZkMutex};
use crate::names::validate_path;
use crate::selector::LeaderSelector;
use crate::semaphore::{InterProcessSemaphore, ZkSemaphore};
use crate::QueuedNode;

fn contender(node: QueuedNode) -> Contender {
    Contender {
        holder: node.path,
        created: node.czxid,
        value: node.data,
    }
}

impl ZkClient {
    /// A plain read of the node `path`: its data, `None` when it does not
    /// exist. Preceded by a `sync`, so it sees every write acknowledged
    /// before the call.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](recipes_core::Error::InvalidArgument) for
    /// a path ZooKeeper refuses; connection and read errors.
    pub fn read(&self, path: &str) -> Result<Option<Vec<u8>>> {
        validate_path(path)?;
        let (client, path) = (self.clone(), path.to_owned());
        self.call("read", async move {
            let session = client.live_session().await?;
            let zk = session.zk();
            match zk.sync(&path).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(from_zk(&format!("sync {path}"), e)),
            }
            match zk.get_data(&path).await {
                Ok((data, _)) => Ok(Some(data)),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(from_zk(&format!("read {path}"), e)),
            }
        })
    }
}

impl ZkClient {
    /// Make the server end this client's session now, exactly as it would
    /// after a pause or partition longer than the session timeout, without
    /// this client taking part: a second connection resumes the session
    /// with its credentials and closes it (ZooKeeper's own way to test
    /// expiry, as Curator's `KillSession`). The session's nodes go at once;
    /// this client learns of it like any expired client, and its guards'
    /// fenced writes are refused from then on. For drills, demos and tests.
    ///
    /// # Errors
    ///
    /// Connection errors within the connect timeout.
    pub fn kill_session(&self) -> Result<()> {
        let client = self.clone();
        let (info, timeout) = self.call("read the session", async move {
            let session = client.live_session().await?;
            Ok((session.zk().session().clone(), session.timeout()))
        })?;
        // Hold this client's runtime still meanwhile: it would reattach the
        // session at once, and the two connections would take it from each
        // other until one gives up.
        let (resume, held) = std::sync::mpsc::channel::<()>();
        self.runtime().spawn(async move {
            let _ = held.recv_timeout(timeout);
        });
        let killer = recipes_core::Runtime::new("recipes-zk-kill-session")?;
        let hosts = self.hosts().to_owned();
        let killed = killer.call("kill the session", timeout, async move {
            let other = zk::Client::connector()
                .with_session(info)
                .with_session_timeout(timeout)
                .connect(&hosts)
                .await
                .map_err(|e| from_zk(&format!("resume the session at {hosts}"), e))?;
            // Dropping a connected client sends CloseSession.
            drop(other);
            Ok(())
        });
        killer.shutdown(timeout);
        drop(resume);
        killed
    }
}

impl Client for ZkClient {
    type Mutex = ZkMutex;
    type Semaphore = ZkSemaphore;
    type Election = ZkElection;

    fn store(&self) -> &'static str {
        "zk"
    }

    fn mutex(&self, name: &str) -> Result<InterProcessMutex> {
        ZkClient::mutex(self, name)
    }

    fn semaphore(&self, name: &str, permits: u32) -> Result<InterProcessSemaphore> {
        ZkClient::semaphore(self, name, permits)
    }

    fn election(&self, name: &str) -> Result<Election> {
        ZkClient::election(self, name)
    }

    fn leader_latch(&self, name: &str, id: &str) -> Result<LeaderLatch> {
        ZkClient::leader_latch(self, name, id)
    }

    fn leader_selector(&self, name: &str, id: &str) -> Result<LeaderSelector> {
        ZkClient::leader_selector(self, name, id)
    }

    fn contenders(&self, name: &str) -> Result<Vec<Contender>> {
        let queue = ZkClient::contenders(self, name)?;
        Ok(queue.into_iter().map(contender).collect())
    }

    fn permits(&self, name: &str) -> Result<(Option<u32>, Vec<Contender>)> {
        let size = self.semaphore_size(name)?;
        let queue = ZkClient::contenders(self, &format!("{name}/leases"))?;
        Ok((size, queue.into_iter().map(contender).collect()))
    }

    fn read(&self, key: &str) -> Result<Option<Vec<u8>>> {
        ZkClient::read(self, key)
    }

    fn session_id(&self) -> Option<i64> {
        ZkClient::session_id(self)
    }

    fn granted_ttl(&self) -> Duration {
        self.session_timeout()
    }

    fn ping(&self) -> Result<Duration> {
        ZkClient::ping(self)
    }

    fn last_acknowledged(&self) -> Option<BootInstant> {
        ZkClient::last_acknowledged(self)
    }

    fn close_within(&self, grace: Duration) -> Result<()> {
        ZkClient::close_within(self, grace)
    }
}
