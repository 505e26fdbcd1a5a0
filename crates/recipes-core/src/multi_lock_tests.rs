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

fn keyed<'a>(parts: &[&'a str], keys: &[i64]) -> Result<Vec<&'a str>> {
    let parts: Vec<_> = parts.iter().map(|n| (*n, LockKind::Mutex)).collect();
    by_keys(parts, keys).map(|p| p.into_iter().map(|(n, _)| n).collect())
}

#[test]
fn names_are_taken_in_the_order_of_the_stores_keys() {
    assert_eq!(
        keyed(&["/a", "/b", "/c"], &[7, -3, 0]).unwrap(),
        ["/b", "/c", "/a"]
    );
}

#[test]
fn two_names_of_one_key_are_refused_and_a_short_answer_is_an_error() {
    match keyed(&["/a", "/b", "/c"], &[5, 1, 5]) {
        Err(Error::InvalidArgument(m)) => {
            assert!(
                m.contains("\"/a\" and \"/c\"") && m.contains("one key"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        keyed(&["/a", "/b"], &[1]),
        Err(Error::Backend { .. })
    ));
}
