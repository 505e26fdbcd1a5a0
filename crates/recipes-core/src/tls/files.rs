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
                refuse_old_version(cert, &chain[0])?;
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

/// Refuse a client certificate older than X.509 v3, which TLS libraries
/// (rustls's webpki among them) do not take: without this, its refusal
/// reads as a key that does not match.
fn refuse_old_version(path: &Path, cert: &CertificateDer<'_>) -> Result<()> {
    match x509_version(cert) {
        Some(v) if v < 3 => Err(Error::invalid(format!(
            "the TLS client certificate {} is an X.509 v{v} certificate, and TLS clients take \
             only v3 (openssl x509 -req makes a v1 certificate unless given extensions): \
             sign it again as v3, e.g. with `-extfile` holding \
             `extendedKeyUsage = clientAuth`, and pass that certificate (--cert)",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// The X.509 version (1, 2 or 3) of the DER certificate `der`, from its
/// `tbsCertificate`: an explicit `[0] INTEGER` version, or none for v1;
/// `None` when `der` is not a certificate (the parser then says why).
fn x509_version(der: &[u8]) -> Option<u8> {
    let certificate = der_body(der, 0x30)?;
    let tbs = der_body(certificate, 0x30)?;
    match tbs.first()? {
        // [0] EXPLICIT Version ::= INTEGER { v1(0), v2(1), v3(2) }
        0xa0 => {
            let version = der_body(der_body(tbs, 0xa0)?, 0x02)?;
            match version {
                [v @ 0..=2] => Some(v + 1),
                _ => None,
            }
        }
        // The serial number's INTEGER: no version field, so v1.
        0x02 => Some(1),
        _ => None,
    }
}

/// The contents of the DER element at the start of `der`, if it has tag
/// `tag` (a short or long definite length).
fn der_body(der: &[u8], tag: u8) -> Option<&[u8]> {
    let (&first, rest) = der.split_first()?;
    if first != tag {
        return None;
    }
    let (&len, rest) = rest.split_first()?;
    let (len, rest) = match len {
        0..=0x7f => (usize::from(len), rest),
        0x81..=0x84 => {
            let n = usize::from(len & 0x7f);
            let bytes = rest.get(..n)?;
            let len = bytes
                .iter()
                .fold(0usize, |acc, b| acc << 8 | usize::from(*b));
            (len, &rest[n..])
        }
        _ => return None,
    };
    rest.get(..len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SEQUENCE { SEQUENCE { version? INTEGER 1 ... } }`, the start of a
    /// certificate, with its lengths.
    fn certificate(tbs: &[u8]) -> Vec<u8> {
        let mut inner = vec![0x30, tbs.len() as u8];
        inner.extend_from_slice(tbs);
        let mut outer = vec![0x30, 0x81, inner.len() as u8];
        outer.extend(inner);
        outer
    }

    #[test]
    fn the_version_of_a_certificate_is_read_from_its_tbs() {
        let v3 = certificate(&[0xa0, 3, 0x02, 1, 2, 0x02, 1, 7]);
        let v1 = certificate(&[0x02, 1, 7]);
        assert_eq!(x509_version(&v3), Some(3));
        assert_eq!(x509_version(&v1), Some(1));
        assert_eq!(x509_version(b"not der"), None);
        assert_eq!(x509_version(&[0x30, 0x85, 0, 0, 0, 0, 0]), None);
        let path = Path::new("client.pem");
        let refused = refuse_old_version(path, &CertificateDer::from(v1));
        assert!(
            matches!(&refused, Err(Error::InvalidArgument(m)) if m.contains("X.509 v1")),
            "{refused:?}"
        );
        assert!(refuse_old_version(path, &CertificateDer::from(v3)).is_ok());
    }
}
