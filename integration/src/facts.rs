//! What [`ZkFacts`](crate::ZkFacts) and [`EtcdFacts`](crate::EtcdFacts)
//! share: bounded connects and queries, panics that quote the server logs,
//! and waits that retry errors until their deadline.
//!
//! `target` is the servers as messages name them (a connect string, a list
//! of endpoints).

use std::cell::RefCell;
use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use crate::env::scale;
use crate::logs::ServerLogs;
use crate::runtime::block_on_timeout;
use crate::wait::wait_for_with;

/// Upper bound (scaled) of one fact query.
pub(crate) const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `connect` for at most 10 s (scaled) and returns the client.
///
/// # Panics
///
/// When it fails, or does not finish in time ("no `established` `target`");
/// the message quotes `logs`.
pub(crate) fn connect<C, E: Display>(
    target: &str,
    established: &str,
    connect: impl Future<Output = Result<C, E>>,
    logs: &ServerLogs,
) -> C {
    match block_on_timeout(scale(Duration::from_secs(10)), connect) {
        Some(Ok(client)) => client,
        Some(Err(e)) => panic!(
            "fact client cannot connect to {target}: {e}\n{}",
            logs.tail()
        ),
        None => panic!(
            "fact client: no {established} {target} in 10 s (scaled)\n{}",
            logs.tail()
        ),
    }
}

/// Runs `query` for at most [`QUERY_TIMEOUT`] (scaled); the error names
/// `what` and `target`.
pub(crate) fn query<T, E: Display>(
    what: &str,
    target: &str,
    query: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match block_on_timeout(scale(QUERY_TIMEOUT), query) {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(format!("{what} on {target}: {e}")),
        None => Err(format!(
            "{what} on {target}: no answer in {QUERY_TIMEOUT:?} (scaled)"
        )),
    }
}

/// The value, or a panic with the error and `logs`.
pub(crate) fn or_panic<T>(result: Result<T, String>, logs: &ServerLogs) -> T {
    result.unwrap_or_else(|why| panic!("{why}\n{}", logs.tail()))
}

/// Waits until `probe` says true; errors are retried and the last one is
/// quoted in the panic.
///
/// # Panics
///
/// After `upper_bound` (scaled); the message quotes `logs`.
pub(crate) fn wait_true(
    desc: &str,
    upper_bound: Duration,
    mut probe: impl FnMut() -> Result<bool, String>,
    logs: &ServerLogs,
) {
    let last_error = RefCell::new(None);
    wait_for_with(
        desc,
        upper_bound,
        || match probe() {
            Ok(true) => Some(()),
            Ok(false) => None,
            Err(e) => {
                *last_error.borrow_mut() = Some(e);
                None
            }
        },
        || format!("last error: {:?}\n{}", last_error.borrow(), logs.tail()),
    );
}

/// Waits until the names `list` returns satisfy `condition` and returns
/// them; errors are retried.
///
/// # Panics
///
/// After `upper_bound` (scaled); the message quotes the last answer and
/// `logs`.
pub(crate) fn wait_names(
    desc: &str,
    upper_bound: Duration,
    mut list: impl FnMut() -> Result<Vec<String>, String>,
    mut condition: impl FnMut(&[String]) -> bool,
    logs: &ServerLogs,
) -> Vec<String> {
    let last = RefCell::new(None);
    wait_for_with(
        desc,
        upper_bound,
        || {
            let names = list();
            let done = matches!(&names, Ok(names) if condition(names));
            if done {
                names.ok()
            } else {
                *last.borrow_mut() = Some(names);
                None
            }
        },
        || format!("last seen: {:?}\n{}", last.borrow(), logs.tail()),
    )
}
