//! One request's deadline, and the resending of an idempotent one.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::error::{Error, Result};

/// `fut`, or [`Error::Timeout`] naming `what` once `timeout` passed.
///
/// # Errors
///
/// Those of `fut`, and the timeout.
pub async fn within<T>(
    what: &str,
    timeout: Duration,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| Error::Timeout {
            what: what.to_owned(),
            after: timeout,
        })?
}

/// Run an idempotent request for at most `timeout`, sending it again
/// after a retryable failure (as `map` turns the client's error into
/// ours), with `backoff`'s pauses; a pause that would end past the
/// deadline is not taken.
///
/// Only for requests that mean the same when applied twice.
///
/// # Errors
///
/// The first failure that is not retryable, the last one, or
/// [`Error::Timeout`].
pub async fn resend_within<T, E, F, Fut>(
    what: &str,
    timeout: Duration,
    mut backoff: Backoff,
    map: impl Fn(E) -> Error,
    mut request: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, E>>,
{
    let deadline = Instant::now() + timeout;
    let sending = async {
        loop {
            let e = match request().await {
                Ok(value) => return Ok(value),
                Err(e) => map(e),
            };
            let pause = backoff.next_pause();
            if !e.is_retryable() || Instant::now() + pause >= deadline {
                return Err(e);
            }
            log::debug!("{what} failed: {e}; retrying");
            tokio::time::sleep(pause).await;
        }
    };
    within(what, timeout, sending).await
}

/// Run `attempt` until it succeeds, pausing with `backoff` after each
/// failure, or until a failure finds `give_up()` true: a cleanup that must
/// be done (a delete, a revoke) unless what it cleans up went by itself.
/// Returns whether it succeeded.
pub async fn until_done<F, Fut>(
    what: &str,
    mut backoff: Backoff,
    give_up: impl Fn() -> bool,
    mut attempt: F,
) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    loop {
        match attempt().await {
            Ok(()) => return true,
            Err(e) if give_up() => {
                log::debug!("{what} failed: {e}; giving up");
                return false;
            }
            Err(e) => {
                log::warn!("{what} failed: {e}; retrying");
                backoff.pause().await;
            }
        }
    }
}
