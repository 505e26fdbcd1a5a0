//! Checks of what callers name and what the store holds, with one set of
//! messages for every store: a recipe's name, and a semaphore's stored
//! size.

use crate::error::{Error, Result};
use crate::limits::{quote, MAX_NAME_BYTES};

/// Check a recipe name as every store needs it, saying what to change: at
/// most [`MAX_NAME_BYTES`], absolute (`/…`), no trailing `/`, no empty
/// component, no character `refused` says no. `kind` opens each message
/// (`etcd lock name`, `ZooKeeper path`); `limit` says why names are short
/// (`PostgreSQL indexes the name`).
///
/// # Errors
///
/// [`Error::InvalidArgument`] saying what is wrong and what to write.
pub fn check_name(kind: &str, name: &str, limit: &str, refused: fn(char) -> bool) -> Result<()> {
    let shown = quote(name);
    let bad = |why: &str| Err(Error::invalid(format!("{kind} {shown} {why}")));
    if name.len() > MAX_NAME_BYTES {
        let len = name.len();
        return bad(&format!(
            "is {len} bytes long; names and keys are at most {MAX_NAME_BYTES} bytes on every \
             store ({limit}): use at most {MAX_NAME_BYTES} bytes"
        ));
    }
    if name.is_empty() {
        return bad("is empty; give a name such as /locks/nightly-report");
    }
    if !name.starts_with('/') {
        return bad("must start with '/', as in /locks/nightly-report");
    }
    if name.ends_with('/') {
        return bad(
            "must not end with '/': the recipe's keys live below the name, so write \
             /locks/nightly-report, not /locks/nightly-report/",
        );
    }
    if name[1..].split('/').any(str::is_empty) {
        return bad("has an empty component ('//'); remove the doubled '/'");
    }
    match name.chars().find(|&c| refused(c)) {
        Some(c) => bad(&format!(
            "contains the character {c:?} (U+{:04X}), which names may not hold; use \
             printable characters",
            c as u32
        )),
        None => Ok(()),
    }
}

/// Check the size a client asks for the semaphore `what` (`the etcd
/// semaphore /sems/x`).
///
/// # Errors
///
/// [`Error::InvalidArgument`] for no permits at all.
pub fn check_permits(what: &str, permits: u32) -> Result<()> {
    match permits {
        0 => Err(Error::invalid(format!(
            "{what} needs at least one permit; ask for 1 or more"
        ))),
        _ => Ok(()),
    }
}

/// Check the size `stored` at `config` for the semaphore `what` (`the etcd
/// semaphore /sems/x`) against the `permits` this client asked for.
///
/// # Errors
///
/// [`Error::InvalidArgument`] saying what to change: the stored size
/// differs, or `config` holds no size in canonical decimal.
pub fn check_stored_size(what: &str, config: &str, stored: &[u8], permits: u32) -> Result<()> {
    if stored == permits.to_string().as_bytes() {
        return Ok(());
    }
    // Only the canonical decimal counts: stores compare the bytes.
    let text = String::from_utf8_lossy(stored);
    match text.parse::<u32>() {
        Ok(n) if n != permits => Err(Error::invalid(format!(
            "{what} has {n} permits (stored in {config}); this client asked for {permits}: \
             ask for {n}, or use another name (to resize it, stop every user and delete \
             {config})"
        ))),
        _ => Err(Error::invalid(format!(
            "{config} holds {text:?}, not the size of {what}: use another name, or, if \
             nothing uses it, delete {config}"
        ))),
    }
}

/// The refusal of the semaphore `semaphore` of `store` (`etcd`, `Redis`,
/// …) whose permits' name `<semaphore>/leases` holds `theirs` (`a lock or
/// election`), whose entries its permits would count.
pub fn permits_name_taken(store: &str, semaphore: &str, theirs: &str) -> Error {
    Error::invalid(format!(
        "the {store} name {} holds {theirs}, and the {store} semaphore {} keeps its permits \
         under that name (their entries would be counted together); choose another name for \
         the semaphore, or for the other recipe",
        quote(&format!("{semaphore}/leases")),
        quote(semaphore)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_with_a_hint() {
        let check = |name| check_name("etcd lock name", name, "too long", char::is_control);
        for good in ["/a", "/locks/x", "/locks/x-y_z.1", "/ünïcode/ok"] {
            check(good).unwrap();
        }
        for (bad, hint) in [
            ("", "is empty"),
            ("locks/x", "must start with '/'"),
            ("/locks/x/", "must not end with '/'"),
            ("/", "must not end with '/'"),
            ("/a//b", "empty component"),
            ("/a\nb", "the character '\\n'"),
            ("/a\u{0}b", "(U+0000)"),
        ] {
            match check(bad) {
                Err(Error::InvalidArgument(msg)) => assert!(msg.contains(hint), "{bad:?}: {msg}"),
                other => panic!("{bad:?}: expected InvalidArgument, got {other:?}"),
            }
        }
        let long = format!("/{}", "x".repeat(MAX_NAME_BYTES));
        assert!(matches!(check(&long), Err(Error::InvalidArgument(m)) if m.contains("too long")));
    }

    #[test]
    fn a_stored_size_says_what_to_change() {
        assert!(check_stored_size("the semaphore /s", "/s/config", b"3", 3).is_ok());
        let msg = |stored: &[u8]| match check_stored_size("the semaphore /s", "/s/c", stored, 3) {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(msg(b"4").contains("has 4 permits"));
        assert!(msg(b"four").contains("not the size"));
        assert!(
            msg(b"03").contains("not the size"),
            "only the canonical form"
        );
    }
}
