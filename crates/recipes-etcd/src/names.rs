//! Lock names and keys in etcd's `concurrency` layout.
//!
//! A lock named `/locks/x` lives under the key prefix `/locks/x/`; each
//! contender owns the key `<prefix><lease id in lowercase hex>`, exactly as
//! etcd's Go `concurrency.NewMutex(session, "/locks/x")` and
//! `etcdctl lock /locks/x` name theirs. Only keys exactly one level below
//! the prefix are contenders: `/locks/x/abc` counts for `/locks/x`,
//! `/locks/x/y/abc` (a contender of the lock `/locks/x/y`) does not.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use recipes_core::store::quote;
use recipes_core::{Error, Result};

/// A contender's key as the contend engine compares them: the bytes etcd
/// holds (another client's key need not be UTF-8).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Key(pub(crate) Vec<u8>);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(&self.0))
    }
}

/// Check the name of a lock, election or semaphore (`what`), saying what
/// to change when it is unusable.
pub(crate) fn validate_name(what: &str, name: &str) -> Result<()> {
    let limit = "the name is part of every key of the recipe";
    recipes_core::store::check_name(&format!("etcd {what} name"), name, limit, char::is_control)
}

/// Check a key that a plain read or a fenced write names, by the rules of
/// names: etcd itself refuses only an empty key, but a key that no name
/// could be is a mistake worth saying before anything is sent.
pub(crate) fn validate_key(key: &str) -> Result<()> {
    let limit = "a key is sent with every write";
    recipes_core::store::check_name("etcd key", key, limit, char::is_control)
}

/// The key prefix of the lock `name`: `name` followed by `/`.
pub(crate) fn key_prefix(name: &str) -> String {
    format!("{name}/")
}

/// The key that holds the size of a semaphore whose keys live under
/// `prefix`: its mark, which a lock or an election on the same name
/// refuses.
pub(crate) fn size_key(prefix: &str) -> String {
    format!("{prefix}config")
}

/// Another recipe's layout is at `prefix`: `found` (a key) shows it.
pub(crate) fn other_layout(prefix: &str, ours: &str, theirs: &str, found: &[u8]) -> Error {
    let name = prefix.strip_suffix('/').unwrap_or(prefix);
    Error::invalid(format!(
        "the etcd name {} holds {theirs} (its key {}), so {ours} cannot use it; \
         choose another name for it",
        quote(name),
        quote(&String::from_utf8_lossy(found))
    ))
}

/// The semaphore whose own names (`<sem>/locks`: its internal mutex,
/// `<sem>/leases`: its permits) `name` would be, if it is one of them, and
/// that semaphore's size key, which marks it.
pub(crate) fn enclosing_semaphore(name: &str) -> Option<(String, String)> {
    let (semaphore, last) = name.rsplit_once('/')?;
    let inside = !semaphore.is_empty() && matches!(last, "locks" | "leases");
    inside.then(|| (semaphore.to_owned(), size_key(&key_prefix(semaphore))))
}

/// A lock or election at `prefix` would be inside the semaphore
/// `semaphore`'s layout, which `found` (its size key) shows.
pub(crate) fn inside_semaphore(prefix: &str, semaphore: &str, found: &[u8]) -> Error {
    let name = prefix.strip_suffix('/').unwrap_or(prefix);
    Error::invalid(format!(
        "the etcd name {} is part of the semaphore {} (its key {}): a lock or election \
         there would join the semaphore's own queue; choose a name outside it",
        quote(name),
        quote(semaphore),
        quote(&String::from_utf8_lossy(found))
    ))
}

/// The key a contender holding `lease` owns under `prefix`.
pub(crate) fn contender_key(prefix: &str, lease: i64) -> String {
    format!("{prefix}{lease:x}")
}

/// Tells apart the permit keys (and read-write lock keys) of one lease. A
/// lease belongs to one client in one process, so a process-wide counter
/// makes `<lease>-<n>` unique.
static KEY_SEQ: AtomicU64 = AtomicU64::new(0);

/// A new permit key of `lease` under `prefix`: `<prefix><lease hex>-<n>`.
pub(crate) fn permit_key(prefix: &str, lease: i64) -> String {
    let seq = KEY_SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{lease:x}-{seq}")
}

/// Whether `key` is one this process names once: a permit's or a
/// read-write lock's, whose last part is `<lease hex>-<n>` ([`permit_key`],
/// [`rw_key`]). No later key of any process takes its name (the lease is
/// ours while the key lives, the counter never repeats); a mutex's or a
/// candidate's key (`<lease hex>`) is made again by each acquisition.
pub(crate) fn named_once(key: &str) -> bool {
    let last = key.rsplit('/').next().unwrap_or(key);
    last.contains('-') && is_contender("", last.as_bytes())
}

/// Where a read-write lock at `prefix` keeps its readers' keys, as Go's
/// `recipe.RWMutex` does: `<prefix>read/`.
pub(crate) fn read_prefix(prefix: &str) -> String {
    format!("{prefix}read/")
}

/// Where a read-write lock at `prefix` keeps its writers' keys:
/// `<prefix>write/`.
pub(crate) fn write_prefix(prefix: &str) -> String {
    format!("{prefix}write/")
}

/// A new key of a read-write lock's reader (`write`: writer) on `lease`:
/// `<prefix>read/<lease hex>-<n>`. Go's recipe names its own
/// `<prefix>read/<unix nanos>`; only the uniqueness of the last part
/// matters to either side.
pub(crate) fn rw_key(prefix: &str, write: bool, lease: i64) -> String {
    let side = if write { "write" } else { "read" };
    permit_key(&format!("{prefix}{side}/"), lease)
}

/// Where every reader key of `lease` at `prefix` lives (see [`rw_key`]):
/// `<prefix>read/<lease hex>-`, a prefix no other lease's keys share.
pub(crate) fn lease_readers(prefix: &str, lease: i64) -> String {
    format!("{}{lease:x}-", read_prefix(prefix))
}

/// Whether `key` is a contender of the lock at `prefix`: exactly one level
/// below it, named as the layout names contenders — a lease id in
/// lowercase hex (`etcdctl lock`, Go's `concurrency` package), or a permit's
/// `<lease hex>-<n>`. A semaphore's `config`, a nested lock's keys or any
/// other key never counts.
pub(crate) fn is_contender(prefix: &str, key: &[u8]) -> bool {
    let Some(rest) = key.strip_prefix(prefix.as_bytes()) else {
        return false;
    };
    let hex = |s: &[u8]| !s.is_empty() && s.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    match rest.iter().position(|&c| c == b'-') {
        None => hex(rest),
        Some(i) => {
            hex(&rest[..i])
                && !rest[i + 1..].is_empty()
                && rest[i + 1..].iter().all(u8::is_ascii_digit)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_keys_follow_the_go_recipe_layout() {
        let prefix = key_prefix("/rw/x");
        assert!(rw_key(&prefix, false, 0xab).starts_with("/rw/x/read/ab-"));
        assert!(rw_key(&prefix, false, 0xab).starts_with(&lease_readers(&prefix, 0xab)));
        assert!(!rw_key(&prefix, false, 0xabc).starts_with(&lease_readers(&prefix, 0xab)));
        assert!(rw_key(&prefix, true, 0xab).starts_with("/rw/x/write/ab-"));
        assert_ne!(rw_key(&prefix, true, 1), rw_key(&prefix, true, 1));
        assert_eq!(read_prefix(&prefix), "/rw/x/read/");
        assert_eq!(write_prefix(&prefix), "/rw/x/write/");
    }

    #[test]
    fn only_permit_and_read_write_keys_are_named_once() {
        let prefix = key_prefix("/a-b/x");
        assert!(named_once(&rw_key(&prefix, false, 0xab)));
        assert!(named_once(&rw_key(&prefix, true, 0xab)));
        assert!(named_once(&permit_key(&prefix, 0xab)));
        assert!(!named_once(&contender_key(&prefix, 0xab)));
        assert!(!named_once("/a/read/1700000000000000000"), "Go's");
        assert!(!named_once("/a/ab-"));
    }

    #[test]
    fn keys_follow_the_go_concurrency_layout() {
        let prefix = key_prefix("/locks/x");
        assert_eq!(prefix, "/locks/x/");
        assert_eq!(
            contender_key(&prefix, 0x694d_8b5e_2c1f_a00b),
            "/locks/x/694d8b5e2c1fa00b"
        );
    }

    #[test]
    fn only_keys_one_level_below_the_prefix_contend() {
        let p = "/a/";
        assert!(is_contender(p, b"/a/694d"));
        assert!(!is_contender(p, b"/a/b/694d"), "a nested lock's key");
        assert!(!is_contender(p, b"/a/"), "the prefix itself");
        assert!(!is_contender(p, b"/ab/694d"), "a sibling lock");
        assert!(!is_contender(p, b"/b/694d"));
        assert!(is_contender(p, b"/a/694d-12"), "a permit key");
        for other in [
            "/a/config",
            "/a/locks",
            "/a/leases",
            "/a/694D",
            "/a/694d-",
            "/a/-1",
        ] {
            assert!(!is_contender(p, other.as_bytes()), "{other}");
        }
    }
}
