//! The certificate chain a server shows in its handshake, for a
//! deployment check (`recipes doctor` reads each certificate's expiry):
//! one handshake of our own that only reads the chain. It sends no
//! request, so it trusts nothing it was shown.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use super::diagnose::{Prelude, SSL_REQUEST};
use super::verify::Checked;

/// The chain (DER, the server's own certificate first) that the server
/// at `host:port` shows in a TLS handshake for the name `name`, its TLS
/// opened as `prelude` says; each step within `within`. A server that
/// refuses us afterwards (no client certificate sent) has shown its chain
/// by then.
///
/// # Errors
///
/// The connection's, or that the server showed no certificate (a
/// PostgreSQL server that does not offer TLS).
pub fn server_chain(
    host: &str,
    port: u16,
    name: &str,
    prelude: Prelude,
    within: Duration,
) -> std::io::Result<Vec<Vec<u8>>> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("resolves to no address"))?;
    let mut tcp = TcpStream::connect_timeout(&addr, within)?;
    tcp.set_read_timeout(Some(within))?;
    tcp.set_write_timeout(Some(within))?;
    if prelude == Prelude::Postgres {
        tcp.write_all(&SSL_REQUEST)?;
        let mut answer = [0u8; 1];
        tcp.read_exact(&mut answer)?;
        if answer[0] != b'S' {
            return Err(std::io::Error::other("the server does not offer TLS"));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let record = Arc::new(Mutex::new(Vec::new()));
    let verifier = Checked::recording(provider.clone(), record.clone());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    let name = ServerName::try_from(name.to_owned()).map_err(std::io::Error::other)?;
    let mut conn = ClientConnection::new(Arc::new(config), name).map_err(std::io::Error::other)?;
    let mut handshake = Ok(());
    while handshake.is_ok() && conn.is_handshaking() {
        handshake = conn.complete_io(&mut tcp).map(|_| ());
    }
    let chain = std::mem::take(&mut *record.lock());
    match (chain.is_empty(), handshake) {
        (false, _) => Ok(chain),
        (true, Err(e)) => Err(e),
        (true, Ok(())) => Err(std::io::Error::other("the server showed no certificate")),
    }
}
