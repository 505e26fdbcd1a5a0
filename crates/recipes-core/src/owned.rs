//! The entries a client's tickets and guards own ([`OwnedEntries`]), for a
//! store whose data can come back older than the client left it (a
//! PostgreSQL backup restored, a Redis AOF replayed without its last
//! writes): a release the store lost brings back an entry of the client's
//! live session that nothing of the client owns, and its lock is held by no
//! one until the session ends. About once a TTL ([`AUDIT_EVERY`] renewal
//! intervals) core's renewal loop runs the store's
//! [`audit`](crate::store::LeaseStore::audit), which lists its session's
//! entries and releases the [`strays`](OwnedEntries::strays).
//!
//! An entry is registered before its enter is sent and stays so while its
//! ticket, its guard or its removal lives ([`Owned`]), so an enter in
//! flight is never taken for a stray; one listed and then removed by its
//! owner before the comparison is a stray whose release finds nothing.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

use parking_lot::Mutex;

/// Every how many renewal intervals of a session its entries are audited
/// ([`LeaseStore::audit`](crate::store::LeaseStore::audit)): about once a
/// TTL (a renewal comes every third of it).
pub const AUDIT_EVERY: u32 = 3;

/// The entries (of any session) that a client's tickets and guards own.
#[derive(Debug)]
pub struct OwnedEntries<K>(Mutex<HashSet<K>>);

impl<K> Default for OwnedEntries<K> {
    fn default() -> Self {
        OwnedEntries(Mutex::new(HashSet::new()))
    }
}

impl<K: Hash + Eq + Clone> OwnedEntries<K> {
    /// Register `entry` as owned while the handle lives.
    pub fn register(self: &Arc<Self>, entry: K) -> Owned<K> {
        self.0.lock().insert(entry.clone());
        Owned {
            entries: self.clone(),
            entry,
        }
    }

    /// The `listed` entries that nothing owns now.
    pub fn strays(&self, listed: impl IntoIterator<Item = K>) -> Vec<K> {
        let owned = self.0.lock();
        listed.into_iter().filter(|e| !owned.contains(e)).collect()
    }
}

/// An entry registered as owned until this drops.
#[derive(Debug)]
pub struct Owned<K: Hash + Eq> {
    entries: Arc<OwnedEntries<K>>,
    entry: K,
}

impl<K: Hash + Eq> Drop for Owned<K> {
    fn drop(&mut self) {
        self.entries.0.lock().remove(&self.entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_owned_while_its_handle_lives() {
        let entries = Arc::new(OwnedEntries::default());
        let a = entries.register("a");
        let b = entries.register("b");
        assert_eq!(entries.strays(["a", "b", "c"]), ["c"]);
        drop(a);
        assert_eq!(entries.strays(["a", "b", "c"]), ["a", "c"]);
        drop(b);
        assert_eq!(entries.strays(["b"]), ["b"]);
    }
}
