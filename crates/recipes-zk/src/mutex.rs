//! `InterProcessMutex`: Curator's mutex layout, fenced by the lock node's
//! czxid.
//!
//! Layout: `<path>/_c_<uuid>-lock-<seq10>`, ephemeral-sequential, under
//! container parents, a fresh uuid per acquisition. The holder is the node
//! with the lowest sequence; a waiter watches only its predecessor.

use crate::client::ZkClient;

/// A mutex shared with every process, Java (Curator) ones included, that
/// locks the same path; see [`recipes_core::Mutex`] for the API and what
/// holds under pause and partition. Made by
/// [`Client::mutex`](crate::Client::mutex).
pub type InterProcessMutex = recipes_core::Mutex<ZkMutex>;

/// The ZooKeeper mutex backend: core's queue lock over this client's
/// verbs (`locks.rs`); use it through [`InterProcessMutex`].
pub type ZkMutex = recipes_core::store::QueueLock<ZkClient>;
