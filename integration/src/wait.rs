//! Waiting on facts with a deadline.
//!
//! A sleep is never synchronization: tests poll a condition the server can
//! answer (a node is gone, a lease is expired, a watch is registered) until
//! it holds or a deadline passes. Every timeout given to these helpers is an
//! **upper bound** and is stretched by [`scale`](crate::env::scale()) here —
//! callers pass the unscaled value and must not scale it again.

use std::time::{Duration, Instant};

use crate::env::scale;

/// How often a condition is polled. Short, because the conditions are cheap
/// loopback queries and tests should not pay for the poll interval.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Polls `condition` until it returns `true`.
///
/// `upper_bound` is scaled by `RECIPES_TEST_SLOW`.
///
/// # Panics
///
/// When the scaled deadline passes; the message names `desc` and the time
/// waited.
pub fn wait_until(desc: &str, upper_bound: Duration, condition: impl FnMut() -> bool) {
    wait_until_with(desc, upper_bound, condition, String::new);
}

/// Like [`wait_until`], and appends `context()` (typically server logs) to
/// the panic message.
///
/// # Panics
///
/// When the scaled deadline passes.
pub fn wait_until_with(
    desc: &str,
    upper_bound: Duration,
    mut condition: impl FnMut() -> bool,
    context: impl FnOnce() -> String,
) {
    wait_for_with(desc, upper_bound, || condition().then_some(()), context);
}

/// Polls `probe` until it returns `Ok(value)` and returns the value; once
/// `upper_bound` (scaled) has passed, panics with `timed_out(time waited,
/// the last error)`. Unlike [`wait_for_with`], no last look and no generic
/// message: for waits that report their own state.
///
/// # Panics
///
/// When the scaled deadline passes.
pub(crate) fn poll_until_ok<T, E>(
    upper_bound: Duration,
    mut probe: impl FnMut() -> Result<T, E>,
    timed_out: impl FnOnce(Duration, E) -> String,
) -> T {
    let limit = scale(upper_bound);
    let start = Instant::now();
    loop {
        let last = match probe() {
            Ok(value) => return value,
            Err(last) => last,
        };
        if start.elapsed() > limit {
            panic!("{}", timed_out(start.elapsed(), last));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Polls `probe` until it returns `Some(value)` and returns the value.
///
/// `upper_bound` is scaled by `RECIPES_TEST_SLOW`.
///
/// # Panics
///
/// When the scaled deadline passes.
pub fn wait_for<T>(desc: &str, upper_bound: Duration, probe: impl FnMut() -> Option<T>) -> T {
    wait_for_with(desc, upper_bound, probe, String::new)
}

/// Like [`wait_for`], and appends `context()` (typically server logs) to the
/// panic message.
///
/// # Panics
///
/// When the scaled deadline passes.
pub fn wait_for_with<T>(
    desc: &str,
    upper_bound: Duration,
    mut probe: impl FnMut() -> Option<T>,
    context: impl FnOnce() -> String,
) -> T {
    let limit = scale(upper_bound);
    let start = Instant::now();
    loop {
        if let Some(value) = probe() {
            return value;
        }
        if start.elapsed() >= limit {
            // One last look: the condition may have become true while we slept.
            if let Some(value) = probe() {
                return value;
            }
            let context = context();
            let sep = if context.is_empty() { "" } else { "\n" };
            panic!(
                "timed out waiting until {desc}: not true after {:?} (upper bound {upper_bound:?} scaled by {}){sep}{context}",
                start.elapsed(),
                crate::env::SLOW_FACTOR_VAR,
            );
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Whether `condition` holds at some point within `window`, polled; `true`
/// as soon as it does. For a test that gives something that must not
/// happen (with the fix) the chance to happen: `window` is the time it is
/// given, not an upper bound to wait for, so it is not scaled.
pub fn seen_within(window: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + window;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}
