//! One PostgreSQL request: its error as core's [`Error`], and the raw
//! parameter that lets a caller's values cross to the runtime thread.

use std::error::Error as _;

use recipes_core::store::quote;
use recipes_core::Error;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

/// Map a tokio-postgres error, saying what was being done.
///
/// A refused password or role is [`Error::Unauthenticated`], a missing
/// privilege [`Error::PermissionDenied`], a server that refuses writes (a
/// standby) [`Error::InvalidArgument`]; whatever says the connection
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
            return refused_credentials(what, db.message());
        }
        if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            return Error::PermissionDenied {
                what: format!(
                    "{what}: {said}; grant the role the privileges recipes-pg's crate docs list"
                ),
            };
        }
        if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
            return Error::invalid(format!(
                "{what}: the server refuses writes (PostgreSQL said {said}): it is a standby \
                 in recovery, or the role or database defaults to read-only transactions \
                 (default_transaction_read_only); connect to the primary, read-write"
            ));
        }
        if missing_code(code) {
            let message = format!(
                "{what}: the schema recipes, or one of its tables, is missing (PostgreSQL said \
                 {said}): it was dropped or truncated away behind the client's back"
            );
            return Error::backend(message, false, SchemaGone(e));
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

/// The server refused the user or password; `said` is its reason, shown
/// when it gave one.
pub(crate) fn refused_credentials(what: &str, said: &str) -> Error {
    let said = said.trim();
    let why = if said.is_empty() {
        String::new()
    } else {
        format!(": it said {}", quote(said))
    };
    Error::Unauthenticated {
        what: format!(
            "{what}: PostgreSQL refused the user or the password{why}; put a user that \
             exists on the server, and its password, in the URL, as in \
             postgres://user:password@host/db"
        ),
    }
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

/// Codes that say the schema `recipes` or one of its tables does not exist:
/// it was dropped (or restored without it) behind the client's back.
fn missing_code(code: &SqlState) -> bool {
    *code == SqlState::UNDEFINED_TABLE || *code == SqlState::INVALID_SCHEMA_NAME
}

/// Whether `e` says the schema `recipes`, or one of its tables, is
/// missing: every row of it is lost, so a holder in it has lost its lock,
/// and the schema must be created again before it is used.
pub(crate) fn is_schema_gone(e: &Error) -> bool {
    match e {
        Error::Backend {
            source: Some(s), ..
        } => s.downcast_ref::<SchemaGone>().is_some(),
        _ => false,
    }
}

/// The source of an error that says the schema or a table of it is
/// missing (see [`is_schema_gone`]).
#[derive(Debug)]
pub(crate) struct SchemaGone(pub(crate) tokio_postgres::Error);

impl std::fmt::Display for SchemaGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SchemaGone {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// The constraint a statement violated, when `e` says so.
pub(crate) fn violated(e: &Error) -> Option<String> {
    let Error::Backend {
        source: Some(s), ..
    } = e
    else {
        return None;
    };
    let db = s.downcast_ref::<tokio_postgres::Error>()?.as_db_error()?;
    db.constraint().map(str::to_owned)
}

/// The database clock in microseconds since the Unix epoch, as SQL: the
/// floor of every fence minted (`greatest(fence + 1, fence_floor!())`).
/// Each fence is at most the clock when it is minted (the `+ 1` wins only
/// while the clock has not moved past the last fence), so after the
/// schema is dropped or truncated, or an older backup restored, the next
/// fence is the clock, above every fence issued before.
macro_rules! fence_floor {
    () => {
        "(extract(epoch FROM clock_timestamp()) * 1000000)::int8"
    };
}
pub(crate) use fence_floor;

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
