//! One request and its whole answer over a fresh loopback TCP connection,
//! with a hard timeout: what the 4lw and HTTP probes share, so a paused
//! server (which accepts but says nothing) reads as `TimedOut`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Connects to `addr`, writes `request` and reads until the server closes
/// the connection, all within `timeout`.
///
/// # Errors
///
/// Connection errors, and `TimedOut` with the message `timed_out()` when the
/// server does not finish its answer in time.
pub(crate) fn exchange(
    addr: SocketAddr,
    request: &[u8],
    timeout: Duration,
    timed_out: impl Fn() -> String,
) -> io::Result<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(request)?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, timed_out()));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(io::Error::new(io::ErrorKind::TimedOut, timed_out()));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(answer)
}
