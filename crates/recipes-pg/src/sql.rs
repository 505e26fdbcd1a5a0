//! One PostgreSQL request: its error as core's [`Error`], and the raw
//! parameter that lets a caller's values cross to the runtime thread.

use std::error::Error as _;

use recipes_core::{quote, Error};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

/// Map a tokio-postgres error, saying what was being done.
///
/// A refused password or role is [`Error::Unauthenticated`], a missing
/// privilege [`Error::PermissionDenied`]; whatever says the connection
/// broke (a closed connection, an I/O error, the server shutting down or
/// terminating our backend, a server still starting) is
/// [`Error::ConnectionLoss`]: the session row lives on in the database.
pub(crate) fn from_pg(what: &str, e: tokio_postgres::Error) -> Error {
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        let said = quote(db.message());
        if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            return Error::Unauthenticated {
                what: format!(
                    "{what}: PostgreSQL refused the credentials ({said}); put the right user \
                     and password in the URL, as in postgres://user:password@host/db"
                ),
            };
        }
        if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            return Error::PermissionDenied {
                what: format!(
                    "{what}: {said}; grant the role the privileges recipes-pg's crate docs list"
                ),
            };
        }
        if broken_code(code) {
            log::debug!("{what}: {said}");
            return Error::ConnectionLoss;
        }
        let retryable = *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
            || *code == SqlState::LOCK_NOT_AVAILABLE
            || *code == SqlState::TOO_MANY_CONNECTIONS;
        return Error::backend(
            format!("{what}: PostgreSQL said {said} ({})", code.code()),
            retryable,
            e,
        );
    }
    if e.is_closed() || e.source().is_some_and(|s| s.is::<std::io::Error>()) {
        log::debug!("{what}: {e}");
        return Error::ConnectionLoss;
    }
    Error::backend(format!("{what}: {e}"), false, e)
}

/// Codes that mean the connection (or the server) went away, not that the
/// statement was refused.
fn broken_code(code: &SqlState) -> bool {
    [
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::CONNECTION_EXCEPTION,
        SqlState::CONNECTION_FAILURE,
        SqlState::CONNECTION_DOES_NOT_EXIST,
        SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
        SqlState::IDLE_SESSION_TIMEOUT,
    ]
    .contains(code)
}

/// A reply PostgreSQL should never give (a missing column, say).
pub(crate) fn unexpected(what: &str) -> Error {
    Error::Backend {
        message: format!("unexpected reply from PostgreSQL: {what}"),
        retryable: false,
        source: None,
    }
}

/// A parameter already encoded on the caller's thread, so that a blocking
/// caller's borrowed values can be sent to the runtime thread: the bytes
/// of `ToSql::to_sql` for its declared type, or SQL NULL.
#[derive(Debug, Clone)]
pub(crate) struct Encoded(pub(crate) Option<Vec<u8>>);

impl Encoded {
    /// Encode `value` as `ty`.
    pub(crate) fn new(value: &(dyn ToSql + Sync), ty: &Type) -> recipes_core::Result<Encoded> {
        let mut buf = bytes::BytesMut::new();
        match value.to_sql_checked(ty, &mut buf) {
            Ok(IsNull::Yes) => Ok(Encoded(None)),
            Ok(IsNull::No) => Ok(Encoded(Some(buf.to_vec()))),
            Err(e) => Err(Error::invalid(format!(
                "a statement parameter cannot be sent as {ty}: {e}; pass a value of that type"
            ))),
        }
    }
}

impl ToSql for Encoded {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            None => Ok(IsNull::Yes),
            Some(bytes) => {
                out.extend_from_slice(bytes);
                Ok(IsNull::No)
            }
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    to_sql_checked!();
}
