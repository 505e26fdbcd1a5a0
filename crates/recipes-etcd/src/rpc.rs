//! One etcd request: its deadline, its retries, its errors, its reply.

use std::future::Future;
use std::time::Duration;

use etcd_client::{GetResponse, Txn, TxnOpResponse, TxnResponse};
use recipes_core::{resend_within, within, Backoff, Error, Result};

/// gRPC status codes (their numbers are part of the gRPC protocol).
const DEADLINE_EXCEEDED: i32 = 4;
const RESOURCE_EXHAUSTED: i32 = 8;
const UNAVAILABLE: i32 = 14;

/// The pause between sendings of an idempotent request.
const RESEND: Backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(200));

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
/// [`Error::unconfirmed`].
pub(crate) async fn rpc<T, F>(what: &str, timeout: Duration, request: F) -> Result<T>
where
    F: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    within(what, timeout, async {
        request.await.map_err(|e| from_etcd(what, e))
    })
    .await
}

/// Run an idempotent request for at most `timeout`, sending it again after
/// a retryable failure (core's [`resend_within`]): etcd-client keeps
/// routing some requests to a member that died (they fail with
/// `Unavailable`) until it notices.
///
/// Only for requests that mean the same when applied twice: reads, guarded
/// deletes, our create-if-absent transactions, a revoke.
pub(crate) async fn retrying<T, F, Fut>(what: &str, timeout: Duration, request: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    resend_within(what, timeout, RESEND, |e| from_etcd(what, e), request).await
}

/// [`retrying`] for a transaction that means the same when applied twice.
pub(crate) async fn retrying_txn(
    etcd: &etcd_client::Client,
    what: &str,
    timeout: Duration,
    txn: &Txn,
) -> Result<TxnResponse> {
    retrying(what, timeout, || {
        let (mut etcd, txn) = (etcd.clone(), txn.clone());
        async move { etcd.txn(txn).await }
    })
    .await
}

/// The revision of a transaction's reply.
pub(crate) fn header_revision(resp: &TxnResponse) -> Result<i64> {
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| unexpected("a transaction reply without a header"))
}

/// The `index`th reply of a transaction, which must be a range read.
pub(crate) fn read_at(resp: &TxnResponse, index: usize) -> Result<GetResponse> {
    match resp.op_responses().into_iter().nth(index) {
        Some(TxnOpResponse::Get(get)) => Ok(get),
        _ => Err(unexpected("a transaction reply without its reads")),
    }
}

/// A reply etcd should never give.
pub(crate) fn unexpected(what: &str) -> Error {
    Error::Backend {
        message: format!("unexpected reply from etcd: {what}"),
        retryable: false,
        source: None,
    }
}
