//! The rustls client configuration of a [`TlsFiles`]: the CA bundle's
//! roots, the client identity, and the server name checked.

use std::sync::Arc;

use parking_lot::Mutex;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use super::TlsFiles;
use crate::error::{Error, Result};

/// Make ring the process's default rustls provider, unless the
/// application installed one: the client crates that build their own
/// configuration (ZooKeeper's, Redis's) would otherwise panic when more
/// than one provider is compiled in. Backends call it before connecting
/// over TLS.
pub fn install_provider() {
    // An error means a default is installed already: keep it.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// The chain to the CA bundle, the validity dates and the server name.
    Full,
    /// The chain and the dates, not the name (PostgreSQL's `verify-ca`,
    /// and `require` with a CA, as libpq does).
    ChainOnly,
}

impl TlsFiles {
    /// The rustls configuration of these files: the CA bundle's roots, the
    /// client identity when given, and the server name checked as `verify`
    /// says, against [`Tls::server_name`](super::Tls::server_name) when set.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the CA bundle holds no usable
    /// certificate or the client key does not match its certificate.
    pub fn client_config(&self, verify: Verify) -> Result<Arc<ClientConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(self.roots.iter().cloned());
        let ca = self.tls.ca().display();
        let refuse_ca = || {
            Error::invalid(format!(
                "the TLS CA bundle {ca} holds no usable CA certificate: pass the PEM \
                 certificate of the CA that signed the server's certificate (--cacert)"
            ))
        };
        if added == 0 {
            return Err(refuse_ca());
        }
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|_| refuse_ca())?;
        let name = match self.tls.server_name_override() {
            None => None,
            Some(n) => Some(ServerName::try_from(n.to_owned()).map_err(|_| {
                Error::invalid(format!(
                    "the TLS server name {n:?} is neither a DNS name nor an IP address"
                ))
            })?),
        };
        let verifier = Arc::new(Checked {
            inner: Some(inner),
            provider: provider.clone(),
            name,
            verify,
            record: None,
        });
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::invalid(format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match &self.identity {
            None => builder.with_no_client_auth(),
            Some(identity) => {
                let (chain, key) = (identity.0.clone(), identity.1.clone_key());
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    let cert = self.tls.cert_path().map(|p| p.display().to_string());
                    let key = self.tls.key_path().map(|p| p.display().to_string());
                    Error::invalid(format!(
                        "the TLS client key {} cannot be used with the certificate {} ({e}): \
                         pass the key that belongs to that certificate (--key)",
                        key.unwrap_or_default(),
                        cert.unwrap_or_default()
                    ))
                })?
            }
        };
        Ok(Arc::new(config))
    }

    /// The name the server's certificate is checked against when the
    /// client connects to `host`: the override, or `host` itself.
    pub fn server_name_for(&self, host: &str) -> String {
        self.tls
            .server_name_override()
            .unwrap_or(host.trim_start_matches('[').trim_end_matches(']'))
            .to_owned()
    }
}

/// webpki's check, with the server name replaced by the override and the
/// name check skipped for [`Verify::ChainOnly`]. Nothing is accepted that
/// webpki refuses for another reason. Without webpki (`inner` `None`) it
/// refuses every certificate: what the diagnosis uses to learn whether a
/// port speaks TLS at all (a server that sent a certificate does) without
/// trusting anything.
#[derive(Debug)]
pub(super) struct Checked {
    pub(super) inner: Option<Arc<WebPkiServerVerifier>>,
    pub(super) provider: Arc<CryptoProvider>,
    pub(super) name: Option<ServerName<'static>>,
    pub(super) verify: Verify,
    /// Without webpki, where the chain shown is kept (then accepted: a
    /// connection that only reads the chain, see `chain.rs`).
    pub(super) record: Option<Arc<Mutex<Vec<Vec<u8>>>>>,
}

impl Checked {
    /// The verifier that refuses every certificate.
    pub(super) fn refusing(provider: Arc<CryptoProvider>) -> Checked {
        Checked {
            inner: None,
            provider,
            name: None,
            verify: Verify::Full,
            record: None,
        }
    }

    /// The verifier that keeps the chain it is shown in `record` and
    /// accepts it.
    pub(super) fn recording(
        provider: Arc<CryptoProvider>,
        record: Arc<Mutex<Vec<Vec<u8>>>>,
    ) -> Checked {
        Checked {
            record: Some(record),
            ..Checked::refusing(provider)
        }
    }
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(inner) = &self.inner else {
            if let Some(record) = &self.record {
                let mut chain = record.lock();
                chain.push(end_entity.to_vec());
                chain.extend(intermediates.iter().map(|c| c.to_vec()));
                return Ok(ServerCertVerified::assertion());
            }
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ));
        };
        let name = self.name.as_ref().unwrap_or(server_name);
        match inner.verify_server_cert(end_entity, intermediates, name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if self.verify == Verify::ChainOnly => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
