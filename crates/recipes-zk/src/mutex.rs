//! `InterProcessMutex`: Curator's mutex layout, fenced by the lock node's
//! czxid.
//!
//! Layout: `<path>/_c_<uuid>-lock-<seq10>`, ephemeral-sequential, under
//! container parents, a fresh uuid per acquisition. The holder is the node
//! with the lowest sequence; a waiter watches only its predecessor.
//!
//! # Under pause and partition
//!
//! The guard's loss signal fires when the session's local deadline passes
//! without an acknowledged heartbeat, when the server expires the session,
//! when our node is deleted, and (with `LossPolicy::OnDisconnect`) on any
//! disconnect. A process paused past the session timeout finds its signal
//! fired when it resumes; anything it writes after that must carry the
//! fence, which the store (the fenced writes of [`ZkNodeLease`]) or the resource
//! ([`recipes_core::FenceGate`]) refuses once a newer holder wrote.

use std::time::Instant;

use recipes_core::{MutexBackend, Result};

use crate::client::ZkClient;
use crate::driver::{Contender, NodeDriver};
use crate::names::{validate_path, LOCK};
use crate::node_lease::{ZkNode, ZkNodeLease};

/// A mutex shared with every process, Java (Curator) ones included, that
/// locks the same path.
///
/// Holding it is a lease: see the [module](crate) notes on what holds under
/// pause and partition. Fence every write with the guard's token.
pub type InterProcessMutex = recipes_core::Mutex<ZkMutex>;

/// The ZooKeeper mutex backend; use it through [`InterProcessMutex`], made
/// by [`ZkClient::mutex`].
#[derive(Debug, Clone)]
pub struct ZkMutex {
    driver: NodeDriver,
}

impl ZkMutex {
    pub(crate) fn new(client: ZkClient, path: &str) -> Result<ZkMutex> {
        validate_path(path)?;
        let contender = Contender {
            dir: path.to_owned(),
            lock_name: LOCK,
            data: Vec::new(),
            max_leases: 1,
        };
        Ok(ZkMutex {
            driver: NodeDriver::new(&client, contender),
        })
    }
}

impl MutexBackend for ZkMutex {
    type Lease = ZkNodeLease;

    fn name(&self) -> &str {
        &self.driver.contender.dir
    }

    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<ZkNodeLease>> {
        let (driver, client) = (self.driver.clone(), &self.driver.client);
        let acquired = client.runtime().call_until("lock", None, async move {
            driver
                .acquire(deadline.map(tokio::time::Instant::from_std))
                .await
        })?;
        Ok(acquired.map(|a| ZkNode::held(client.clone(), a)))
    }
}

impl ZkClient {
    /// A mutex at `path` (Curator's `InterProcessMutex` layout).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](recipes_core::Error::InvalidArgument) for a path ZooKeeper refuses (empty, not
    /// absolute, trailing `/`, control characters, under `/zookeeper`).
    pub fn mutex(&self, path: &str) -> Result<InterProcessMutex> {
        Ok(InterProcessMutex::from_backend(ZkMutex::new(
            self.clone(),
            path,
        )?))
    }
}
