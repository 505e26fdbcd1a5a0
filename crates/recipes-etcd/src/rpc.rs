//! One etcd request: its deadline, its retries, its errors, its reply.

use std::future::Future;
use std::time::Duration;

use etcd_client::{GetOptions, GetResponse, Txn, TxnOpResponse, TxnResponse};
use recipes_core::store::{quote, resend_within, Backoff};
use recipes_core::{Error, Result};

/// gRPC status codes (their numbers are part of the gRPC protocol).
const INVALID_ARGUMENT: i32 = 3;
const DEADLINE_EXCEEDED: i32 = 4;
const PERMISSION_DENIED: i32 = 7;
const RESOURCE_EXHAUSTED: i32 = 8;
const UNAVAILABLE: i32 = 14;
const UNAUTHENTICATED: i32 = 16;

/// What etcd 3.4 says (as `INVALID_ARGUMENT`) when the credentials are
/// missing, wrong or stale.
const AUTH_REFUSALS: [&str; 3] = [
    "user name is empty",
    "authentication failed",
    "invalid auth token",
];

/// What etcd says (as `RESOURCE_EXHAUSTED`) to a write that would add
/// data while its NOSPACE alarm is raised: its database reached
/// `--quota-backend-bytes`. Only an operator clears it.
const NO_SPACE: &str = "database space exceeded";

/// The pause between sendings of an idempotent request.
const RESEND: Backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(200));

/// Map an etcd client error, saying what was being done.
///
/// Whatever says the connection broke is [`Error::ConnectionLoss`]
/// (retryable: the session may well be alive): gRPC `UNAVAILABLE`, a
/// status that tonic made locally from a transport error (a killed member
/// breaks HTTP/2, which shows as code `Unknown` or `Internal` with the
/// transport error as its source), etcd-client's transport and I/O errors,
/// and a watch or keep-alive stream that closed under us. A refusal by the
/// server (gRPC `INVALID_ARGUMENT`) is [`Error::InvalidArgument`]. An etcd
/// out of space is a [`Error::Backend`] that is not retryable, as Redis's
/// out of memory is: it stays so until an operator acts, and the message
/// says how.
pub(crate) fn from_etcd(what: &str, e: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    if connection_broke(&e) {
        log::debug!("{what}: {e}");
        return Error::ConnectionLoss;
    }
    match e {
        E::InvalidArgs(msg) => Error::invalid(format!("{what}: {msg}")),
        E::GRpcStatus(ref status) if auth_refused(status.code().into(), status.message()) => {
            Error::Unauthenticated {
                what: format!(
                    "{}: etcd refused the credentials ({}); pass the right user and password",
                    quote(what),
                    quote(status.message())
                ),
            }
        }
        E::GRpcStatus(ref status) if i32::from(status.code()) == PERMISSION_DENIED => {
            Error::PermissionDenied {
                what: format!("{}: the user's roles do not allow it", quote(what)),
            }
        }
        // A put with our lease after the server dropped it (revoked by
        // hand, expired while we were cut off) before the keep-alive said
        // so: the session is gone ([`lease_gone`](crate::session::lease_gone)).
        E::GRpcStatus(ref status) if status.message().contains("requested lease not found") => {
            log::debug!("{what}: {e}");
            Error::SessionExpired
        }
        E::GRpcStatus(ref status) if status.message().contains(NO_SPACE) => {
            let message = format!(
                "{what}: etcd is out of space (alarm NOSPACE: its database reached \
                 --quota-backend-bytes) and wrote nothing; compact and defragment it \
                 (etcdctl compact, etcdctl defrag), then `etcdctl alarm disarm`, or raise \
                 --quota-backend-bytes"
            );
            Error::backend(message, false, e)
        }
        E::GRpcStatus(ref status) if i32::from(status.code()) == INVALID_ARGUMENT => {
            let refusal = quote(status.message());
            Error::invalid(format!("{}: etcd refused it: {refusal}", quote(what)))
        }
        E::GRpcStatus(ref status) => {
            let code: i32 = status.code().into();
            let retryable = matches!(code, DEADLINE_EXCEEDED | RESOURCE_EXHAUSTED);
            Error::backend(format!("{what}: {e}"), retryable, e)
        }
        other => Error::backend(format!("{what}: {other}"), false, other),
    }
}

/// Whether etcd refused the client's credentials (or their absence).
fn auth_refused(code: i32, message: &str) -> bool {
    code == UNAUTHENTICATED
        || (code == INVALID_ARGUMENT && AUTH_REFUSALS.iter().any(|r| message.contains(r)))
}

/// Whether `e` says the connection broke, not that the server refused.
fn connection_broke(e: &etcd_client::Error) -> bool {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(status) => {
            i32::from(status.code()) == UNAVAILABLE || std::error::Error::source(status).is_some()
        }
        E::TransportError(_) | E::IoError(_) | E::WatchError(_) => true,
        // The server's "lease not found" is not (see `session::is_lease_not_found`).
        E::LeaseKeepAliveError(msg) => !msg.contains("not found"),
        _ => false,
    }
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

/// [`retrying`] for a read of `key` (a prefix or range as `options` say).
pub(crate) async fn retrying_get(
    etcd: &etcd_client::Client,
    timeout: Duration,
    key: &str,
    options: Option<GetOptions>,
) -> Result<GetResponse> {
    retrying_kv(etcd, &format!("read {key}"), timeout, |mut kv| {
        let options = options.clone();
        async move { kv.get(key, options).await }
    })
    .await
}

/// [`retrying`] for a request of the KV service, each send on that
/// service's client alone (a clone of the whole client copies every
/// service's); the first send takes the one made here.
async fn retrying_kv<T, F, Fut>(
    etcd: &etcd_client::Client,
    what: &str,
    timeout: Duration,
    mut request: F,
) -> Result<T>
where
    F: FnMut(etcd_client::KvClient) -> Fut,
    Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let mut first = Some(etcd.kv_client());
    retrying(what, timeout, || {
        request(first.take().unwrap_or_else(|| etcd.kv_client()))
    })
    .await
}

/// [`retrying`] for a transaction that means the same when applied twice.
pub(crate) async fn retrying_txn(
    etcd: &etcd_client::Client,
    what: &str,
    timeout: Duration,
    txn: &Txn,
) -> Result<TxnResponse> {
    retrying_kv(etcd, what, timeout, |mut kv| {
        let txn = txn.clone();
        async move { kv.txn(txn).await }
    })
    .await
}

/// [`retrying`] for a plain delete of `key`.
pub(crate) async fn retrying_delete(
    etcd: &etcd_client::Client,
    what: &str,
    timeout: Duration,
    key: &str,
) -> Result<()> {
    retrying_kv(etcd, what, timeout, |mut kv| async move {
        kv.delete(key, None).await
    })
    .await
    .map(drop)
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

/// The `index`th of a transaction's replies (`op_responses`, copied out
/// once), which must be a range read.
pub(crate) fn read_in(ops: &[TxnOpResponse], index: usize) -> Result<&GetResponse> {
    match ops.get(index) {
        Some(TxnOpResponse::Get(get)) => Ok(get),
        _ => Err(unexpected("a transaction reply without its reads")),
    }
}

/// The `index`th reply of a transaction, which must be a nested
/// transaction's.
pub(crate) fn nested_at(resp: &TxnResponse, index: usize) -> Result<TxnResponse> {
    match resp.op_responses().into_iter().nth(index) {
        Some(TxnOpResponse::Txn(txn)) => Ok(txn),
        _ => Err(unexpected(
            "a transaction reply without its nested transaction",
        )),
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
