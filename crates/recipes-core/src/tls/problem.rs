//! What went wrong in a TLS handshake, classified once for every backend
//! from the rustls error in the failure's source chain.

use std::error::Error as StdError;
use std::fmt;

use rustls::{AlertDescription, CertificateError};

use crate::error::Error;

/// What went wrong setting up TLS with a server; carried by
/// [`Error::Tls`], whose message says what to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TlsProblem {
    /// The client was not told to use TLS, and the server speaks only TLS.
    PlainClientTlsServer,
    /// The client speaks TLS, and the server does not (a plain port).
    TlsClientPlainServer,
    /// The server requires a client certificate (mutual TLS), and the
    /// client has none.
    ClientCertRequired,
    /// The server refused the client's certificate (not signed by a CA it
    /// trusts, or expired).
    ClientCertRejected,
    /// The server's certificate is not signed by the CA bundle given.
    UnknownCa,
    /// The server's certificate is expired or not yet valid.
    CertificateExpired,
    /// The server's certificate does not name the host connected to (nor
    /// the server name override).
    WrongServerName,
    /// Any other handshake failure.
    Handshake,
}

impl TlsProblem {
    /// The label of the problem in snake case, as metrics and logs show it.
    pub fn label(self) -> &'static str {
        match self {
            TlsProblem::PlainClientTlsServer => "plain_client_tls_server",
            TlsProblem::TlsClientPlainServer => "tls_client_plain_server",
            TlsProblem::ClientCertRequired => "client_cert_required",
            TlsProblem::ClientCertRejected => "client_cert_rejected",
            TlsProblem::UnknownCa => "unknown_ca",
            TlsProblem::CertificateExpired => "certificate_expired",
            TlsProblem::WrongServerName => "wrong_server_name",
            TlsProblem::Handshake => "handshake",
        }
    }

    /// The [`Error::Tls`] of this problem with `target` (`etcd at
    /// https://10.0.0.1:2379`), saying what to change; `detail` is the
    /// TLS library's word, shown where it helps (dates, alerts).
    pub fn error(self, target: &str, detail: &str) -> Error {
        let what = match self {
            TlsProblem::PlainClientTlsServer => format!(
                "{target} speaks TLS and this client was not told to: give the CA bundle \
                 (Tls::new(ca), --cacert), and for mutual TLS the client certificate and key"
            ),
            TlsProblem::TlsClientPlainServer => format!(
                "{target} does not speak TLS: connect to its TLS port, or drop the TLS \
                 settings (the CA bundle, https://, rediss://, sslmode) for a plain port"
            ),
            TlsProblem::ClientCertRequired => format!(
                "{target} requires a client certificate (mutual TLS) and none was sent: \
                 pass the client certificate and key (Tls::cert and Tls::key, --cert and --key)"
            ),
            TlsProblem::ClientCertRejected => format!(
                "{target} refused the client certificate ({detail}): pass a certificate \
                 signed by a CA the server trusts, and valid now"
            ),
            TlsProblem::UnknownCa => format!(
                "the certificate of {target} is not signed by the CA bundle given: pass the \
                 CA that signed the server's certificate (--cacert)"
            ),
            TlsProblem::CertificateExpired => format!(
                "the certificate of {target} is expired or not yet valid ({detail}): renew \
                 the server's certificate, or check this host's clock"
            ),
            TlsProblem::WrongServerName => format!(
                "the certificate of {target} does not name the host connected to: connect \
                 by a name or address the certificate holds, or set the name to check \
                 (Tls::server_name, --server-name)"
            ),
            TlsProblem::Handshake => format!("the TLS handshake with {target} failed ({detail})"),
        };
        Error::Tls {
            problem: self,
            what,
        }
    }
}

impl fmt::Display for TlsProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The TLS problem behind `e`, if its source chain holds a rustls error
/// (directly, or inside an `io::Error`); `sent_cert` says whether the
/// client presented a certificate (a TLS 1.2 server's bare handshake
/// failure then means it wanted one). Returns the problem and the rustls
/// error's text.
pub fn classify(e: &(dyn StdError + 'static), sent_cert: bool) -> Option<(TlsProblem, String)> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(r) = rustls_error(e) {
            return Some((of_rustls(r, sent_cert), r.to_string()));
        }
        next = e.source();
    }
    None
}

/// `e` as a rustls error, looking inside an `io::Error` and an `Arc` (whose
/// `source` skip the error they wrap).
fn rustls_error<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    if let Some(r) = e.downcast_ref::<rustls::Error>() {
        return Some(r);
    }
    if let Some(shared) = e.downcast_ref::<crate::error::BackendSource>() {
        return rustls_error(&**shared);
    }
    let io = e.downcast_ref::<std::io::Error>()?;
    rustls_error(io.get_ref()?)
}

/// The problem a rustls error names.
pub(super) fn of_rustls(e: &rustls::Error, sent_cert: bool) -> TlsProblem {
    use CertificateError as C;
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer | C::BadSignature => TlsProblem::UnknownCa,
            C::Expired
            | C::ExpiredContext { .. }
            | C::NotValidYet
            | C::NotValidYetContext { .. } => TlsProblem::CertificateExpired,
            C::NotValidForName | C::NotValidForNameContext { .. } => TlsProblem::WrongServerName,
            _ => TlsProblem::Handshake,
        },
        rustls::Error::AlertReceived(alert) => match alert {
            AlertDescription::CertificateRequired => TlsProblem::ClientCertRequired,
            AlertDescription::HandshakeFailure
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateExpired
            | AlertDescription::AccessDenied
            | AlertDescription::DecryptError => match sent_cert {
                false => TlsProblem::ClientCertRequired,
                true => TlsProblem::ClientCertRejected,
            },
            _ => TlsProblem::Handshake,
        },
        // The peer answered, with something that is not TLS.
        rustls::Error::InvalidMessage(_)
        | rustls::Error::InappropriateMessage { .. }
        | rustls::Error::InappropriateHandshakeMessage { .. } => TlsProblem::TlsClientPlainServer,
        _ => TlsProblem::Handshake,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rustls_errors_are_found_through_io_errors_and_named() {
        let unknown = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, unknown);
        let wrapped = Error::backend("connect", true, io);
        let (problem, _) = classify(&wrapped, false).expect("found");
        assert_eq!(problem, TlsProblem::UnknownCa);
        let required = rustls::Error::AlertReceived(AlertDescription::CertificateRequired);
        assert_eq!(of_rustls(&required, false), TlsProblem::ClientCertRequired);
        let bad = rustls::Error::AlertReceived(AlertDescription::BadCertificate);
        assert_eq!(of_rustls(&bad, true), TlsProblem::ClientCertRejected);
        assert!(classify(&std::io::Error::other("plain"), false).is_none());
    }

    #[test]
    fn every_message_says_what_to_change() {
        let e = TlsProblem::ClientCertRequired.error("etcd at https://h:1", "");
        assert_eq!(e.kind(), "tls");
        assert!(e.to_string().contains("--cert"), "{e}");
        assert!(!e.is_retryable() && e.is_terminal());
    }
}
