//! From etcd-client's errors to ours.

use recipes_core::Error;

/// gRPC status codes (their numbers are part of the gRPC protocol).
const DEADLINE_EXCEEDED: i32 = 4;
const RESOURCE_EXHAUSTED: i32 = 8;
const UNAVAILABLE: i32 = 14;

/// Map an etcd client error, saying what was being done.
pub(crate) fn from_etcd(what: &str, e: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    match e {
        E::InvalidArgs(msg) => Error::invalid(format!("{what}: {msg}")),
        E::GRpcStatus(ref status) => {
            let code: i32 = status.code().into();
            if code == UNAVAILABLE {
                return Error::ConnectionLoss;
            }
            let retryable = matches!(code, DEADLINE_EXCEEDED | RESOURCE_EXHAUSTED);
            Error::backend(format!("{what}: {e}"), retryable, e)
        }
        E::TransportError(_) | E::IoError(_) => Error::backend(format!("{what}: {e}"), true, e),
        other => Error::backend(format!("{what}: {other}"), false, other),
    }
}

/// Await one etcd request for at most `timeout`, mapping its error.
///
/// A timed-out read is [`Error::Timeout`] (retryable). A timed-out write's
/// outcome is unknown: callers that cannot repeat it blindly map that with
/// [`indeterminate`].
pub(crate) async fn rpc<T, F>(
    what: &str,
    timeout: std::time::Duration,
    request: F,
) -> Result<T, Error>
where
    F: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(from_etcd(what, e)),
        Err(_) => Err(Error::Timeout {
            what: what.to_owned(),
            after: timeout,
        }),
    }
}

/// A write whose reply did not come: it may or may not have been applied.
pub(crate) fn indeterminate(e: Error) -> Error {
    match e {
        Error::Timeout { what, after } => Error::Indeterminate {
            what: format!("{what}: no reply within {after:?}"),
        },
        Error::ConnectionLoss => Error::Indeterminate {
            what: "the connection dropped before the reply".into(),
        },
        other => other,
    }
}

/// Run an idempotent request for at most `timeout`, sending it again after
/// a retryable failure: etcd-client keeps routing some requests to a member
/// that died (they fail with `Unavailable`) until it notices.
///
/// Only for requests that mean the same when applied twice: reads, guarded
/// deletes, our create-if-absent transaction, a revoke.
pub(crate) async fn retrying<T, F, Fut>(
    what: &str,
    timeout: std::time::Duration,
    mut request: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = std::time::Duration::from_millis(10);
    loop {
        match tokio::time::timeout_at(deadline, request()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => {
                let e = from_etcd(what, e);
                if !e.is_retryable() || tokio::time::Instant::now() + pause >= deadline {
                    return Err(e);
                }
                log::debug!("{what} failed: {e}; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_millis(200));
            }
            Err(_) => {
                return Err(Error::Timeout {
                    what: what.to_owned(),
                    after: timeout,
                })
            }
        }
    }
}
