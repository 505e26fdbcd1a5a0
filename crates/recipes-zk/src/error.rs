//! From zookeeper-client's errors to ours.

use recipes_core::Error;
use zookeeper_client as zk;

/// Whether `e` means the connection failed under the request: its outcome
/// is unknown and the session may well be alive. zookeeper-client reports
/// a connection that stopped answering as a custom error ("no response from
/// connection in …"), not as `ConnectionLoss`.
pub(crate) fn connection_trouble(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Timeout
    )
}

/// Map a ZooKeeper client error, saying what was being done.
pub(crate) fn from_zk(what: &str, e: zk::Error) -> Error {
    match e {
        zk::Error::ConnectionLoss | zk::Error::Custom(_) => Error::ConnectionLoss,
        zk::Error::SessionExpired => Error::SessionExpired,
        zk::Error::ClientClosed => Error::Closed,
        zk::Error::Timeout => Error::Indeterminate {
            what: format!("{what}: no reply from ZooKeeper in time"),
        },
        zk::Error::BadArguments(msg) => Error::invalid(format!("{what}: {msg}")),
        zk::Error::NoAuth => Error::PermissionDenied {
            what: format!(
                "{what}: the node's ACL does not allow this client; connect with the \
                 credentials of the node's owner (digest)"
            ),
        },
        zk::Error::AuthFailed => Error::Unauthenticated {
            what: format!("{what}: ZooKeeper refused the credentials"),
        },
        zk::Error::Throttled => Error::backend(format!("{what}: {e}"), true, e),
        other => Error::backend(format!("{what}: {other}"), false, other),
    }
}

/// A read that failed with connection trouble is retryable: it changed
/// nothing and the session may well be alive.
pub(crate) fn read_error(what: &str, e: zk::Error) -> Error {
    if connection_trouble(&e) {
        Error::ConnectionLoss
    } else {
        from_zk(what, e)
    }
}
