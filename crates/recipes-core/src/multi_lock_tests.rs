//! The multi-lock's name checks.

use super::*;

fn check(names: &[&str]) -> Result<()> {
    let mut parts: Vec<_> = names.iter().map(|n| (*n, LockKind::Mutex)).collect();
    parts.sort_by(|a, b| a.0.cmp(b.0));
    check_names(&parts)
}

fn refused(names: &[&str], says: &str) {
    match check(names) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(says), "{names:?}: {m}"),
        other => panic!("{names:?}: {other:?}"),
    }
}

#[test]
fn distinct_names_that_do_not_nest_are_accepted() {
    check(&["/a", "/b", "/ab", "/a-b", "/c/d"]).unwrap();
    check(&["locks/a", "locks/ab"]).unwrap();
}

#[test]
fn an_empty_list_a_name_twice_and_nested_names_are_refused() {
    refused(&[], "at least one name");
    refused(&["/a", "/b", "/a"], "twice");
    refused(&["/a", "/a/b"], "nest");
    refused(&["/x/", "/x/y"], "nest");
    refused(&["jobs", "jobs/1"], "nest");
}

#[test]
fn more_names_than_the_limit_are_refused() {
    let names: Vec<String> = (0..=MAX_MULTI_LOCK_NAMES)
        .map(|i| format!("/n{i}"))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    refused(&names, "over the limit");
    check(&names[..MAX_MULTI_LOCK_NAMES]).unwrap();
}
