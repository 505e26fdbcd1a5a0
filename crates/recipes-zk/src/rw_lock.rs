//! `InterProcessReadWriteLock`: Curator 5.4's read-write lock layout,
//! fenced by the node's czxid.
//!
//! Layout: readers `<path>/_c_<uuid>-__READ__<seq10>` and writers
//! `<path>/_c_<uuid>-__WRIT__<seq10>`, ephemeral-sequential in one folder,
//! so one sequence orders both; Curator sorts them by the number after the
//! marker, we by the sequence suffix — the same order. A reader holds when
//! no writer is ahead and watches the nearest writer ahead; a writer holds
//! when first and watches the node just ahead (the engine's
//! [`Rule::ReadWrite`]; Curator's reader watches the first writer ahead
//! instead, which admits it at the same moment).
//!
//! **Downgrade** is one `multi`: create the ephemeral, *non*-sequential
//! reader `<path>/_c_<fresh uuid>-__READ__<the writer's own seq10>` and
//! delete the writer's node, atomically. No listing ever shows the lock
//! without one of the two, and the reader's name carries the writer's
//! sequence number, so it sorts exactly where the writer was, for Curator
//! too: a writer queued behind (ours or Curator's) wakes at the writer's
//! deletion, lists again, finds the reader ahead and waits on it; a reader
//! queued behind finds no writer ahead and enters. The name cannot clash:
//! its uuid is fresh, and later nodes get higher sequences (the server's
//! counter is the folder's child version, which every create and delete
//! moves on). The read lease keeps the writer's fence (its czxid) and
//! watches, fences and releases the new node.

use recipes_core::store::HeldLease;
use recipes_core::{Error, Result};

use crate::client::ZkClient;
use crate::names::{fresh_uuid, reader_in_place_of};
use crate::node_lease::{ZkNode, ZkNodeLease};

/// A read-write lock shared with every process, Java ones using Curator's
/// `InterProcessReadWriteLock` included, that locks the same path; see
/// [`recipes_core::RwLock`] for the API (fair, downgrade, no upgrade) and
/// the meaning of its fences. Made by
/// [`Client::rw_lock`](recipes_core::Client::rw_lock).
pub type InterProcessReadWriteLock = recipes_core::RwLock<ZkRwLock>;

/// The ZooKeeper read-write lock backend: core's queue lock over this
/// client's verbs (`locks.rs`); use it through
/// [`InterProcessReadWriteLock`].
pub type ZkRwLock = recipes_core::store::QueueLock<ZkClient>;

/// One `multi` puts a reader with the writer's sequence in the writer's
/// place (see the module's docs).
pub(crate) fn downgrade(write: ZkNodeLease) -> Result<ZkNodeLease> {
    let Some(reader) = reader_in_place_of(write.holder(), &fresh_uuid()) else {
        let holder = write.holder().to_owned();
        write.release_in_background();
        return Err(Error::invalid(format!(
            "{holder} is not a read-write lock's writer node: only a write lease of this \
             lock can be downgraded"
        )));
    };
    ZkNode::replace(write, reader)
}
