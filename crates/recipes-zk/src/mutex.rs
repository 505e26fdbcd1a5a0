//! `InterProcessMutex`: Curator's mutex layout, fenced by the lock node's
//! czxid.
//!
//! Layout: `<path>/_c_<uuid>-lock-<seq10>`, ephemeral-sequential, under
//! container parents, a fresh uuid per acquisition. The holder is the node
//! with the lowest sequence; a waiter watches only its predecessor.

use std::time::Instant;

use recipes_core::store::engine::Rule;
use recipes_core::store::MutexBackend;
use recipes_core::Result;

use crate::client::ZkClient;
use crate::driver::{Contender, NodeDriver};
use crate::names::{validate_path, LOCK};
use crate::node_lease::ZkNodeLease;

/// A mutex shared with every process, Java (Curator) ones included, that
/// locks the same path; see [`recipes_core::Mutex`] for the API and what
/// holds under pause and partition. Made by
/// [`Client::mutex`](crate::Client::mutex).
pub type InterProcessMutex = recipes_core::Mutex<ZkMutex>;

/// The ZooKeeper mutex backend; use it through [`InterProcessMutex`].
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
            rule: Rule::Mutex,
            outside_semaphores: true,
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

    fn runtime(&self) -> &recipes_core::store::Runtime {
        self.driver.client.runtime()
    }

    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<ZkNodeLease>> {
        self.driver.acquire_lease("lock", deadline)
    }
}
