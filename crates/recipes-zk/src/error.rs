//! From zookeeper-client's errors to ours.

use recipes_core::Error;
use zookeeper_client as zk;

/// Map a ZooKeeper client error, saying what was being done.
pub(crate) fn from_zk(what: &str, e: zk::Error) -> Error {
    match e {
        zk::Error::ConnectionLoss => Error::ConnectionLoss,
        zk::Error::SessionExpired => Error::SessionExpired,
        zk::Error::ClientClosed => Error::Closed,
        zk::Error::Timeout => Error::Indeterminate {
            what: format!("{what}: no reply from ZooKeeper in time"),
        },
        zk::Error::BadArguments(msg) => Error::invalid(format!("{what}: {msg}")),
        zk::Error::Throttled => Error::backend(format!("{what}: {e}"), true, e),
        other => Error::backend(format!("{what}: {other}"), false, other),
    }
}
