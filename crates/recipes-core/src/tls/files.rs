//! Reading and checking a [`Tls`] setting's files, once for every backend.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::Tls;
use crate::error::{Error, Result};

/// A [`Tls`] setting with its files read and checked: the PEM text for the
/// client crates that take PEM, and the parsed certificates and key for
/// those that take a rustls configuration.
#[derive(Clone)]
pub struct TlsFiles {
    /// The setting the files were read from.
    pub tls: Tls,
    /// The CA bundle, as read.
    pub ca_pem: Vec<u8>,
    /// The client certificate chain and key, as read, for mutual TLS.
    pub identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    pub(super) roots: Vec<CertificateDer<'static>>,
    pub(super) identity: Option<Arc<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>>,
}

impl fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsFiles")
            .field("tls", &self.tls)
            .field("roots", &self.roots.len())
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Read and check the files: the CA bundle holds a certificate, the
    /// client certificate comes with its key and each holds what it says.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming the file and what to pass: a
    /// missing or unreadable file, a file that holds no PEM certificate
    /// (or key), a certificate without a key or a key without one.
    pub fn load(&self) -> Result<TlsFiles> {
        let ca_pem = read(&self.ca, "CA bundle", "--cacert")?;
        let roots = certificates(&self.ca, &ca_pem, "CA bundle")?;
        let identity_pem = match (&self.cert, &self.key) {
            (None, None) => None,
            (Some(cert), None) => {
                return Err(Error::invalid(format!(
                    "the TLS client certificate {} is given without its key: pass the PEM \
                     private key too (Tls::key, --key, RECIPES_KEY)",
                    cert.display()
                )))
            }
            (None, Some(key)) => {
                return Err(Error::invalid(format!(
                    "the TLS client key {} is given without its certificate: pass the PEM \
                     client certificate too (Tls::cert, --cert, RECIPES_CERT)",
                    key.display()
                )))
            }
            (Some(cert), Some(key)) => Some((
                read(cert, "client certificate", "--cert")?,
                read(key, "client key", "--key")?,
            )),
        };
        let identity = match (&identity_pem, &self.cert, &self.key) {
            (Some((cert_pem, key_pem)), Some(cert), Some(key)) => {
                let chain = certificates(cert, cert_pem, "client certificate")?;
                let private = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| {
                    Error::invalid(format!(
                        "the TLS client key {} holds no PEM private key (a BEGIN PRIVATE KEY, \
                         BEGIN RSA PRIVATE KEY or BEGIN EC PRIVATE KEY block): pass the key \
                         of the client certificate in PEM (--key)",
                        key.display()
                    ))
                })?;
                Some(Arc::new((chain, private)))
            }
            _ => None,
        };
        let files = TlsFiles {
            tls: self.clone(),
            ca_pem,
            identity_pem,
            roots,
            identity,
        };
        // Builds the configuration once, so that a key that does not match
        // its certificate is refused here, at connect, by name.
        files.client_config(super::verify::Verify::Full)?;
        Ok(files)
    }
}

/// The file at `path`, or what to pass instead.
fn read(path: &Path, what: &str, flag: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::invalid(format!(
            "the TLS {what} {} cannot be read ({e}): pass the path of a readable PEM file \
             ({flag})",
            path.display()
        ))
    })
}

/// The `CERTIFICATE` blocks of `pem`, at least one.
fn certificates(path: &Path, pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<_, _>>()
        .unwrap_or_default();
    if certs.is_empty() {
        return Err(Error::invalid(format!(
            "the TLS {what} {} holds no PEM certificate (a BEGIN CERTIFICATE block): pass the \
             certificate in PEM, not DER or a key",
            path.display()
        )));
    }
    Ok(certs)
}
