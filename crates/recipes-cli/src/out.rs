//! Output to stdout that never panics.
//!
//! `print!` panics when stdout cannot be written: a closed pipe
//! (`recipes status NAME | head -0`; Rust ignores SIGPIPE, so the write
//! fails with EPIPE), a full disk (`> /dev/full`: ENOSPC), a gone terminal
//! (EIO). A command that prints writes through [`print()`] instead and, when
//! it fails, says so on stderr and exits [`exit::IO_ERROR`] (74) through
//! [`failed`]: the output is what was asked for, so losing it is no
//! success.

use std::io::{self, Write};

use crate::exit;

/// Write `text` to stdout and flush it, so that a failure shows here and
/// not in the flush at exit (which drops it).
///
/// # Errors
///
/// The write's or the flush's error.
pub fn print(text: &str) -> io::Result<()> {
    print_bytes(text.as_bytes())
}

/// [`print()`] for bytes.
///
/// # Errors
///
/// As for [`print()`].
pub fn print_bytes(bytes: &[u8]) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()
}

/// The exit status after stdout could not be written, said on stderr.
pub fn failed(e: &io::Error) -> i32 {
    say!("recipes: cannot write the output to stdout: {e}");
    exit::IO_ERROR
}

/// Why a command that reads the store and prints ended early.
#[derive(Debug)]
pub enum Failure {
    /// The store failed.
    Store(recipes_core::Error),
    /// stdout could not be written.
    Stdout(io::Error),
}

impl From<recipes_core::Error> for Failure {
    fn from(e: recipes_core::Error) -> Failure {
        Failure::Store(e)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure::Stdout(e)
    }
}
