//! Free loopback ports that no other test — in this process or another test
//! binary running beside it — is handed at the same time.
//!
//! Binding `127.0.0.1:0` and releasing is not enough: the kernel hands out
//! such ports from the ephemeral range, where every outgoing client
//! connection also takes its local port, so the port can be gone before the
//! server binds it; and two test processes can be handed the same port.
//! Instead we pick random ports *below* the ephemeral range and hold an
//! exclusive `flock` on `<tmp>/recipes-it-ports/<port>` for as long as the
//! [`PortReservation`] lives. The lock is per open file, so it excludes other
//! threads of this process as well as other processes, and the kernel drops
//! it when a process dies, so a crashed run reserves nothing.

use std::collections::hash_map::RandomState;
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// A loopback port reserved for this process until dropped.
#[derive(Debug)]
pub struct PortReservation {
    port: u16,
    _lock: File,
}

impl PortReservation {
    /// The reserved port number.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }
}

/// Reserves a free loopback port.
///
/// # Panics
///
/// When no port can be reserved after many attempts (the lock folder is not
/// writable, or the range is exhausted).
pub fn reserve_port() -> PortReservation {
    let dir = lock_dir();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("cannot create port lock folder {}: {e}", dir.display());
    }
    let (low, high) = candidate_range();
    let mut last_error = None;
    for _ in 0..1000 {
        let port = low + (random_u64() % u64::from(high - low)) as u16;
        match try_reserve(&dir, port) {
            Ok(Some(reservation)) => return reservation,
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
    }
    panic!(
        "no free loopback port in {low}..{high} after 1000 attempts (last error: {last_error:?}; lock folder {})",
        dir.display()
    );
}

/// Reserves `n` distinct free loopback ports.
pub fn reserve_ports(n: usize) -> Vec<PortReservation> {
    (0..n).map(|_| reserve_port()).collect()
}

fn try_reserve(dir: &std::path::Path, port: u16) -> io::Result<Option<PortReservation>> {
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(port.to_string()))?;
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if !locked {
        return Ok(None);
    }
    // Someone outside the harness may be listening there.
    if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_err() {
        return Ok(None);
    }
    Ok(Some(PortReservation { port, _lock: lock }))
}

fn lock_dir() -> PathBuf {
    std::env::temp_dir().join("recipes-it-ports")
}

/// Ports below the kernel's ephemeral range (read from procfs), so outgoing
/// connections never take them.
fn candidate_range() -> (u16, u16) {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if ephemeral_low > 12_000 {
        (10_000, ephemeral_low)
    } else {
        // Unusual configuration: the ephemeral range starts low; use the top.
        (61_000, 65_535)
    }
}

fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_distinct_and_released_on_drop() {
        let ports = reserve_ports(50);
        let mut numbers: Vec<u16> = ports.iter().map(PortReservation::port).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), 50);
        let port = ports[0].port();
        assert!(
            try_reserve(&lock_dir(), port).unwrap().is_none(),
            "held port reserved twice"
        );
        drop(ports);
        assert!(
            try_reserve(&lock_dir(), port).unwrap().is_some(),
            "dropped port still held"
        );
    }
}
