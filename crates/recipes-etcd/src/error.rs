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
