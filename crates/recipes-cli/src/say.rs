//! Messages to stderr that never panic.
//!
//! `eprintln!` panics when stderr cannot be written (a closed pipe — Rust
//! ignores SIGPIPE, so EPIPE; EIO from a gone terminal; ENOSPC), and an
//! unwinding `recipes` drops its lock guard, so the lock could be released
//! before the keeper has killed CMD's tree. A message nobody can read is
//! dropped instead.

/// `eprintln!` that drops the message when stderr cannot be written.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
