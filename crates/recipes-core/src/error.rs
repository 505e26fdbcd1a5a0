//! The one error type every recipe returns.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::loss::LossReason;

/// A backend's own error, kept for [`std::error::Error::source`].
pub type BackendSource = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in a recipe.
///
/// Errors are data: they are `Clone`, carry what the caller needs to decide
/// what to do next, and answer two questions through predicates:
/// [`is_retryable`](Error::is_retryable) (the same call may succeed if made
/// again) and [`is_terminal`](Error::is_terminal) (the guard, session or
/// client that returned it will never work again).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The coordination session (ZooKeeper session, etcd lease) has expired
    /// on the server. Every guard of that session is lost.
    #[error("session expired: every lock, permit and leadership of that session is lost")]
    SessionExpired,

    /// The lease behind a guard may be gone: another holder may run now.
    #[error("lease lost: {reason}")]
    LeaseLost {
        /// Why the lease is considered lost.
        reason: LossReason,
    },

    /// The connection to the servers is down; the session may still be alive.
    #[error("connection to the coordination service lost")]
    ConnectionLoss,

    /// A write was sent but its outcome is unknown: it may or may not have
    /// been applied. Retry only if the write is idempotent.
    #[error("outcome unknown: {what}")]
    Indeterminate {
        /// What was being done.
        what: String,
    },

    /// A fenced write was refused because the fence no longer holds: a newer
    /// holder exists, or ours is gone.
    #[error("fenced write rejected: {what}")]
    FenceRejected {
        /// What was refused and why.
        what: String,
    },

    /// A call did not complete within its deadline (an RPC timeout, not an
    /// acquisition that timed out — that is `Ok(None)`).
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// What was being done.
        what: String,
        /// How long the caller waited.
        after: Duration,
    },

    /// The operation needs a lock, permit or leadership that is not held.
    #[error("not held: {what}")]
    NotHeld {
        /// What was expected to be held.
        what: String,
    },

    /// The client was closed, or its runtime thread is gone.
    #[error("client closed")]
    Closed,

    /// The store refused the client's credentials, or wants credentials
    /// and got none. Fix the configuration; retrying does not help.
    #[error("not authenticated: {what}")]
    Unauthenticated {
        /// What was refused and what to pass.
        what: String,
    },

    /// The credentials are valid but do not allow this operation on this
    /// node or key (a ZooKeeper ACL, an etcd role).
    #[error("permission denied: {what}")]
    PermissionDenied {
        /// The operation and the node or key.
        what: String,
    },

    /// TLS could not be set up with the server: the configuration does
    /// not fit it (a plain client on a TLS port, an unknown CA, no client
    /// certificate where one is required, …). The message says what to
    /// change; retrying with the same settings meets the same refusal.
    #[error("TLS: {what}")]
    Tls {
        /// What went wrong.
        problem: crate::tls::TlsProblem,
        /// The server, and what to change.
        what: String,
    },

    /// The caller passed something unusable; the message says what to change.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Any other error from the backend.
    #[error("{message}")]
    Backend {
        /// What failed, in words.
        message: String,
        /// Whether the same call may succeed if made again.
        retryable: bool,
        /// The backend's own error.
        #[source]
        source: Option<BackendSource>,
    },
}

impl Error {
    /// The variant's name in snake case (`connection_loss`): the `kind`
    /// label of the error metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::SessionExpired => "session_expired",
            Error::LeaseLost { .. } => "lease_lost",
            Error::ConnectionLoss => "connection_loss",
            Error::Indeterminate { .. } => "indeterminate",
            Error::FenceRejected { .. } => "fence_rejected",
            Error::Timeout { .. } => "timeout",
            Error::NotHeld { .. } => "not_held",
            Error::Closed => "closed",
            Error::Unauthenticated { .. } => "unauthenticated",
            Error::PermissionDenied { .. } => "permission_denied",
            Error::Tls { .. } => "tls",
            Error::InvalidArgument(_) => "invalid_argument",
            Error::Backend { .. } => "backend",
        }
    }

    /// The same call may succeed if it is made again (connection trouble, a
    /// timed-out RPC, a transient backend error). An [`Error::Indeterminate`]
    /// write is not retryable in general: it may already have been applied.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::ConnectionLoss | Error::Timeout { .. } => true,
            Error::Backend { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// The guard, session or client that returned this error will never work
    /// again: drop it and start over (a new acquisition, a new client).
    /// [`Error::Tls`] is terminal and not retryable, as
    /// [`Error::Unauthenticated`] is: the server refused the client's
    /// configuration (its CA, certificate, name or port), and only a new
    /// client with other settings gets past it; an expired certificate
    /// needs a renewed one, not another try.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Error::SessionExpired
                | Error::LeaseLost { .. }
                | Error::Unauthenticated { .. }
                | Error::Tls { .. }
                | Error::Closed
                | Error::NotHeld { .. }
                | Error::FenceRejected { .. }
        )
    }

    /// A backend error with its source.
    pub fn backend<E>(message: impl fmt::Display, retryable: bool, source: E) -> Error
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Error::Backend {
            message: message.to_string(),
            retryable,
            source: Some(Arc::new(source)),
        }
    }

    /// This error, seen from a write: a write that got no reply in time, or
    /// whose connection dropped under it, may or may not have been applied,
    /// so [`Error::Timeout`] and [`Error::ConnectionLoss`] become
    /// [`Error::Indeterminate`]. Every other error is kept as it is.
    ///
    /// The one rule on every backend: a read or a ping that got no reply is
    /// `Timeout`; a write (a fenced put or delete, a proclaim, a release)
    /// that got no confirmation is `Indeterminate`.
    pub fn unconfirmed(self) -> Error {
        match self {
            Error::Timeout { what, after } => Error::Indeterminate {
                what: format!("{what}: no reply within {after:?}"),
            },
            Error::ConnectionLoss => Error::Indeterminate {
                what: "the connection dropped before the reply".into(),
            },
            other => other,
        }
    }

    /// An [`Error::InvalidArgument`] with the given message.
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::InvalidArgument(message.into())
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_partition_the_variants_sensibly() {
        assert!(Error::ConnectionLoss.is_retryable());
        assert!(!Error::ConnectionLoss.is_terminal());
        let timeout = Error::Timeout {
            what: "get".into(),
            after: Duration::from_secs(1),
        };
        assert!(timeout.is_retryable() && !timeout.is_terminal());
        let indeterminate = Error::Indeterminate {
            what: "create".into(),
        };
        assert!(!indeterminate.is_retryable() && !indeterminate.is_terminal());
        for terminal in [
            Error::SessionExpired,
            Error::LeaseLost {
                reason: LossReason::DeadlineExpired,
            },
            Error::Closed,
            Error::FenceRejected { what: "x".into() },
            Error::NotHeld { what: "x".into() },
        ] {
            assert!(terminal.is_terminal(), "{terminal:?}");
            assert!(!terminal.is_retryable(), "{terminal:?}");
        }
        let invalid = Error::invalid("name must not be empty");
        assert!(!invalid.is_retryable() && !invalid.is_terminal());
        assert_eq!(
            invalid.to_string(),
            "invalid argument: name must not be empty"
        );
    }

    #[test]
    fn backend_error_keeps_its_source_and_clones() {
        let io = std::io::Error::other("boom");
        let e = Error::backend("connect failed", true, io);
        let c = e.clone();
        assert!(c.is_retryable());
        let src = std::error::Error::source(&c).expect("source kept");
        assert_eq!(src.to_string(), "boom");
    }

    #[test]
    fn error_is_send_sync_static() {
        fn assert_traits<T: Send + Sync + 'static + Clone>() {}
        assert_traits::<Error>();
    }
}
