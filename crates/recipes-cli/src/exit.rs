//! Exit statuses of `recipes`, after BSD `sysexits.h` where one fits.

use recipes_core::Error;

/// Bad command line or unusable name (`EX_USAGE`).
pub const USAGE: i32 = 64;
/// The backend could not be reached or failed (`EX_UNAVAILABLE`).
pub const UNAVAILABLE: i32 = 69;
/// Default: not acquired within `--wait` / at once with `--no-wait`
/// (`EX_TEMPFAIL`).
pub const CONFLICT: i32 = 75;
/// Default: the lease was lost while CMD ran or before it started
/// (`EX_PROTOCOL`).
pub const LOST: i32 = 76;
/// The store refused the credentials or the operation (`EX_NOPERM`).
pub const NO_PERMISSION: i32 = 77;
/// TLS does not fit the server: a plain client on a TLS port, an unknown
/// CA, a refused or missing client certificate (`EX_CONFIG`).
pub const CONFIG: i32 = 78;
/// stdout could not be written: a closed pipe, a full disk
/// (`EX_IOERR`).
pub const IO_ERROR: i32 = 74;
/// CMD's keeper process could not be started (`EX_OSERR`).
pub const OS_ERROR: i32 = 71;
/// CMD could not be executed (as `env(1)`): found but not runnable.
pub const CANNOT_EXECUTE: i32 = 126;
/// CMD was not found (as `env(1)`).
pub const NOT_FOUND: i32 = 127;

/// The exit status for a backend error: bad input is a usage error,
/// everything else means the service was not usable.
pub fn for_error(err: &Error) -> i32 {
    match err {
        Error::InvalidArgument(_) => USAGE,
        Error::Unauthenticated { .. } | Error::PermissionDenied { .. } => NO_PERMISSION,
        Error::Tls { .. } => CONFIG,
        _ => UNAVAILABLE,
    }
}

/// The shell's convention for a process ended by signal `n`.
pub fn for_signal(n: i32) -> i32 {
    128 + n
}
