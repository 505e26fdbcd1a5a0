//! Recipe names, keys and holders on PostgreSQL.
//!
//! A recipe named `/locks/x` has one row in `recipes.names` (its queue
//! counter, its fence, its kind) and its contenders are rows of
//! `recipes.queue`; a contender's *holder* is `<name>/<entry uuid>`, so it
//! reads like the other stores' node paths and keys. A semaphore `/sems/x`
//! is three names: `/sems/x` (kind `semaphore`, holding the size),
//! `/sems/x/locks` (its internal mutex) and `/sems/x/leases` (its permits).
//! A read-write lock's row is of kind `rwlock` (lease mode) or
//! `advisory-rw` (session mode); a name keeps one recipe and one mode, and
//! every other is refused with the layout it holds named.

use recipes_core::store::quote;
use recipes_core::{Error, Result};

/// What PostgreSQL text cannot hold.
fn refused(c: char) -> bool {
    c == '\0' || c.is_control()
}

/// Check the name of a lock, election or semaphore (`what`).
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a name core refuses (see
/// [`recipes_core::store::check_name`]).
///
/// Core refuses names over [`recipes_core::MAX_NAME_BYTES`], which a btree
/// entry (at most a third of a page: 2,704 bytes at the default 8 KiB)
/// holds.
pub(crate) fn validate_name(what: &str, name: &str) -> Result<()> {
    let limit = "PostgreSQL indexes the name, and a btree row holds at most about 2,700 bytes";
    recipes_core::store::check_name(&format!("PostgreSQL {what} name"), name, limit, refused)
}

/// Check a key that a plain read or a fenced write names, by the rules of
/// names.
pub(crate) fn validate_key(key: &str) -> Result<()> {
    validate_name("key", key)
}

/// The holder of the entry `entry` of the queue `name`.
pub(crate) fn holder(name: &str, entry: &uuid::Uuid) -> String {
    format!("{name}/{entry}")
}

/// The entry named by a holder `<name>/<uuid>`.
pub fn entry_of(holder: &str) -> Option<(&str, uuid::Uuid)> {
    let (name, entry) = holder.rsplit_once('/')?;
    Some((name, entry.parse().ok()?))
}

/// The semaphore whose own names (`<sem>/locks`: its internal mutex,
/// `<sem>/leases`: its permits) `name` would be, if it is one of them.
pub(crate) fn enclosing_semaphore(name: &str) -> Option<&str> {
    let (semaphore, last) = name.rsplit_once('/')?;
    let inside = !semaphore.is_empty() && matches!(last, "locks" | "leases");
    inside.then_some(semaphore)
}

/// The semaphore whose permit key (in session mode, `<sem>/leases/<i>`)
/// `name` would be, if it is one.
pub(crate) fn permit_semaphore(name: &str) -> Option<&str> {
    let (leases, slot) = name.rsplit_once('/')?;
    let digits = !slot.is_empty() && slot.bytes().all(|b| b.is_ascii_digit());
    let semaphore = leases.strip_suffix("/leases").filter(|s| !s.is_empty())?;
    digits.then_some(semaphore)
}

/// The semaphore whose queue (`<sem>/locks`, `<sem>/leases`) or permit
/// key (`<sem>/leases/<i>`) `name` would be, if any.
pub(crate) fn semaphore_of(name: &str) -> Option<&str> {
    enclosing_semaphore(name).or_else(|| permit_semaphore(name))
}

/// A lock or election named `name` would be inside the layout of the
/// semaphore `semaphore` (its row in `recipes.names` says so).
pub(crate) fn inside_semaphore(name: &str, semaphore: &str) -> Error {
    Error::invalid(format!(
        "the PostgreSQL name {} is part of the semaphore {} (its row in recipes.names): a \
         lock or election there would share the semaphore's own entries; choose a name \
         outside it",
        quote(name),
        quote(semaphore)
    ))
}

/// What a name whose row in `recipes.names` is of `kind` holds, with its
/// article.
pub(crate) fn kind_shown(kind: &str) -> &'static str {
    match kind {
        "semaphore" => "a semaphore",
        "permits" => "a lease-mode semaphore's permits",
        "advisory" => "a session-mode lock",
        "advisory-permits" => "a session-mode semaphore's permits",
        "rwlock" => "a lease-mode read-write lock (rows of recipes.queue with a role)",
        "advisory-rw" => "a session-mode read-write lock (an advisory key, shared or exclusive)",
        "counter" => "a shared counter (its value in recipes.names)",
        "barrier" => "a barrier",
        "double-barrier" => "a double barrier",
        "group" => "a group",
        _ => "a lease-mode lock or election",
    }
}

/// The name `name` holds another recipe (`found`, its kind), so a `ours`
/// cannot use it.
pub(crate) fn other_layout(name: &str, ours: &str, found: &str) -> Error {
    let say = kind_shown;
    let session = |kind: &str| kind.starts_with("advisory");
    let other_mode = match (session(found), session(ours)) {
        (true, false) if ours != "semaphore" => Some("session mode"),
        (false, true) if found != "semaphore" => Some("lease mode"),
        _ => None,
    };
    let (theirs, ours) = (say(found), say(ours));
    let quoted = quote(name);
    match other_mode {
        Some(mode) => {
            let (builder, flag) = match mode {
                "session mode" => ("PgClientBuilder::session_mode()", "--pg-mode session"),
                _ => ("PgMode::Lease, the default", "--pg-mode lease"),
            };
            Error::invalid(format!(
                "the PostgreSQL name {quoted} holds {theirs}, so {ours} cannot use it: the \
                 two modes' locks do not exclude each other; connect in {mode} ({builder}, \
                 {flag}) as the name's other users do, or choose another name for it"
            ))
        }
        None => Error::invalid(format!(
            "the PostgreSQL name {quoted} holds {theirs}, so {ours} cannot use it; choose \
             another name for it"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_name_their_entry() {
        let e = uuid::Uuid::new_v4();
        let h = holder("/locks/x", &e);
        assert_eq!(entry_of(&h), Some(("/locks/x", e)));
        assert_eq!(entry_of("/locks/x/job-1"), None);
    }

    #[test]
    fn a_semaphores_own_names_are_found() {
        assert_eq!(enclosing_semaphore("/s/locks"), Some("/s"));
        assert_eq!(enclosing_semaphore("/s/leases"), Some("/s"));
        assert_eq!(enclosing_semaphore("/s/other"), None);
        assert_eq!(enclosing_semaphore("/locks"), None);
        assert_eq!(permit_semaphore("/s/leases/0"), Some("/s"));
        assert_eq!(permit_semaphore("/s/leases/12"), Some("/s"));
        assert_eq!(permit_semaphore("/s/leases/x"), None);
        assert_eq!(permit_semaphore("/s/leases/"), None);
        assert_eq!(permit_semaphore("/leases/0"), None);
        assert_eq!(permit_semaphore("/s/other/0"), None);
    }

    #[test]
    fn a_read_write_locks_name_is_named_in_refusals_both_ways() {
        let said = |e: Error| e.to_string();
        let on_rw = said(other_layout("/x", "lock", "rwlock"));
        assert!(on_rw.contains("lease-mode read-write lock"), "{on_rw}");
        let on_lock = said(other_layout("/x", "rwlock", "lock"));
        assert!(
            on_lock.contains("so a lease-mode read-write lock"),
            "{on_lock}"
        );
        let across = said(other_layout("/x", "rwlock", "advisory-rw"));
        assert!(across.contains("session mode"), "{across}");
        let sem = said(other_layout("/x", "semaphore", "advisory-rw"));
        assert!(sem.contains("session-mode read-write lock"), "{sem}");
    }

    #[test]
    fn names_fit_an_index() {
        assert!(validate_name("lock", "/a/b").is_ok());
        let long = format!("/{}", "x".repeat(recipes_core::MAX_NAME_BYTES));
        assert!(validate_name("lock", &long).is_err());
        assert!(validate_name("lock", "/a\u{0}b").is_err());
    }
}
