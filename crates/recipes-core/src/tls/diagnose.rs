//! Why a connect failed, asked of the server itself: some client crates
//! retry a failed handshake until their timeout and report only that (or
//! a plain client sees a TLS port as a server that hangs up). When such a
//! connect failed, one handshake of our own with the same files names
//! the problem.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::explain::Probe;
use super::problem::{classify, TlsProblem};
use super::verify::Checked;
use crate::error::Error;

/// How the store's port starts TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prelude {
    /// TLS from the first byte; a plain port hangs up on a ClientHello
    /// (etcd, ZooKeeper).
    None,
    /// TLS from the first byte; a plain port waits on a ClientHello but
    /// answers these plain bytes (Redis: `PING\r\n`).
    PlainAnswers(&'static [u8]),
    /// PostgreSQL's `SSLRequest`, answered `S` (TLS follows) or `N`.
    Postgres,
}

/// PostgreSQL's `SSLRequest`: length 8, the code 80877103.
pub(super) const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 4, 210, 22, 47];

/// How long the diagnosis waits, after a handshake that succeeded, for
/// the server's verdict on the client certificate (TLS 1.3 sends it after
/// the client's last handshake message).
const VERDICT_WAIT: Duration = Duration::from_millis(500);

impl Probe {
    /// Ask the first server what is wrong with TLS between us, within
    /// `within`: without TLS files, whether it speaks only TLS
    /// ([`TlsProblem::PlainClientTlsServer`]); with files, the problem
    /// one handshake with them meets. `None` when nothing TLS-related was
    /// found (the server does not answer, or the handshake succeeds).
    pub async fn diagnose(&self, within: Duration) -> Option<Error> {
        let (addr, target, files) = (&self.addr, &self.target, self.files.as_ref());
        let probe = async {
            let mut tcp = TcpStream::connect(addr).await.ok()?;
            if self.prelude == Prelude::Postgres {
                tcp.write_all(&SSL_REQUEST).await.ok()?;
                let mut answer = [0u8; 1];
                tcp.read_exact(&mut answer).await.ok()?;
                match (answer[0], files) {
                    (b'S', Some(_)) => {}
                    (_, Some(_)) => {
                        return Some(TlsProblem::TlsClientPlainServer.error(target, ""))
                    }
                    (_, None) => return None,
                }
            }
            let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h);
            match files {
                None => speaks_only_tls(tcp, addr, host, self.prelude, within)
                    .await
                    .then(|| TlsProblem::PlainClientTlsServer.error(target, "")),
                Some(files) => {
                    let config = files.client_config(self.verify).ok()?;
                    let name = files.server_name_for(host);
                    handshake(tcp, config, &name, self.sends_cert())
                        .await
                        .map(|(problem, detail)| problem.error(target, &detail))
                }
            }
        };
        let half = within / 2;
        match (self.prelude, files) {
            (Prelude::PlainAnswers(hello), Some(_)) => {
                if let Ok(found) = tokio::time::timeout(half, probe).await {
                    return found;
                }
                // No answer to our ClientHello: a plain port answers `hello`.
                let plain = tokio::time::timeout(within - half, plain_answer(addr, hello)).await;
                plain
                    .ok()
                    .flatten()
                    .map(|_| TlsProblem::TlsClientPlainServer.error(target, ""))
            }
            _ => tokio::time::timeout(within, probe).await.ok().flatten(),
        }
    }
}

/// The plain bytes a port that speaks only TLS is asked, besides a
/// ClientHello, when the store has none of its own: a line no TLS record
/// starts with.
const PLAIN_HELLO: &[u8] = b"PING\r\n";

/// How long the diagnosis waits for a plain answer at most: a port that
/// speaks only TLS says nothing to plain bytes, or hangs up at once.
const PLAIN_WAIT: Duration = Duration::from_millis(500);

/// Whether the server speaks TLS and nothing else: it answers a
/// ClientHello with a certificate, and plain bytes with silence, a hang-up
/// or a TLS alert. A port that answers plain bytes as well (an HTTP
/// proxy that also terminates TLS, a gateway in front of an unreachable
/// host) is not a TLS-only port, whatever it is: the connect's own error
/// says more than "speaks TLS" would.
async fn speaks_only_tls(
    tcp: TcpStream,
    addr: &str,
    host: &str,
    prelude: Prelude,
    within: Duration,
) -> bool {
    let hello = match prelude {
        Prelude::PlainAnswers(hello) => hello,
        _ => PLAIN_HELLO,
    };
    let wait = PLAIN_WAIT.min(within / 2);
    let plain = async {
        tokio::time::timeout(wait, plain_answer(addr, hello))
            .await
            .ok()
            .flatten()
    };
    let (tls, plain) = tokio::join!(speaks_tls(tcp, host), plain);
    tls && plain.is_none_or(is_tls_record)
}

/// The first byte the server at `addr` answers the plain bytes `hello`
/// with; `None` when it hangs up or the connection fails.
async fn plain_answer(addr: &str, hello: &[u8]) -> Option<u8> {
    let mut tcp = TcpStream::connect(addr).await.ok()?;
    tcp.write_all(hello).await.ok()?;
    let mut byte = [0u8; 1];
    matches!(tcp.read(&mut byte).await, Ok(1)).then_some(byte[0])
}

/// Whether `first` opens a TLS record a TLS-only server answers plain
/// bytes with: an alert (21) or a handshake (22).
fn is_tls_record(first: u8) -> bool {
    matches!(first, 21 | 22)
}

/// Whether the server answers a ClientHello with a certificate.
async fn speaks_tls(tcp: TcpStream, host: &str) -> bool {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let Ok(builder) =
        ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()
    else {
        return false;
    };
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Checked::refusing(provider)))
        .with_no_client_auth();
    let Ok(name) = ServerName::try_from(host.to_owned()) else {
        return false;
    };
    let refused = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .err();
    // Only a server that sent a certificate reaches our verifier.
    refused
        .as_ref()
        .and_then(|e| e.get_ref()?.downcast_ref::<rustls::Error>())
        .is_some_and(|r| {
            matches!(
                r,
                rustls::Error::InvalidCertificate(
                    rustls::CertificateError::ApplicationVerificationFailure
                )
            )
        })
}

/// The problem one handshake with `config` meets, including the server's
/// verdict on the client certificate that TLS 1.3 sends afterwards.
async fn handshake(
    tcp: TcpStream,
    config: Arc<ClientConfig>,
    name: &str,
    sent_cert: bool,
) -> Option<(TlsProblem, String)> {
    let name = ServerName::try_from(name.to_owned()).ok()?;
    let mut stream = match TlsConnector::from(config).connect(name, tcp).await {
        Ok(stream) => stream,
        Err(e) => return Some(io_problem(&e, sent_cert)),
    };
    let mut byte = [0u8; 1];
    match tokio::time::timeout(VERDICT_WAIT, stream.read(&mut byte)).await {
        Ok(Err(e)) => classify(&e, sent_cert),
        // No verdict (the server waits for our first request), or data.
        _ => None,
    }
}

/// The problem of a failed handshake: a rustls error, or the server
/// hanging up on our ClientHello (a plain port that read garbage).
fn io_problem(e: &std::io::Error, sent_cert: bool) -> (TlsProblem, String) {
    if let Some(found) = classify(e, sent_cert) {
        return found;
    }
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof
        | std::io::ErrorKind::ConnectionReset
        | std::io::ErrorKind::BrokenPipe => (TlsProblem::TlsClientPlainServer, e.to_string()),
        _ => (TlsProblem::Handshake, e.to_string()),
    }
}
