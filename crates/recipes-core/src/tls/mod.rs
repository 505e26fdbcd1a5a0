//! Transport security, the same on every backend: one [`Tls`] setting (a
//! CA bundle, an optional client certificate and key, an optional server
//! name), its files loaded and checked once ([`TlsFiles`]), the rustls
//! client configuration built from them, and handshake failures turned
//! into one typed [`Error::Tls`](crate::Error::Tls) saying what to change
//! ([`TlsProblem`]); a connect that failed without saying why is explained
//! by one handshake of our own ([`Probe`]).
//!
//! Every client crate of the backends speaks rustls 0.23 with the ring
//! provider; [`install_provider`] makes ring the process default, so that
//! the crates that build their own configuration agree with ours.

mod chain;
mod diagnose;
mod explain;
mod files;
mod problem;
mod verify;

use std::fmt;
use std::path::{Path, PathBuf};

pub use chain::server_chain;
pub use diagnose::Prelude;
pub use explain::{error_in, explain, Probe};
pub use files::TlsFiles;
pub use problem::{classify, TlsProblem};
pub use verify::{install_provider, Verify};

/// What a connect's runtime call waits beyond the connect timeout, so
/// that [`Probe::connect`], which answers within it, is the one to answer.
pub const CALL_MARGIN: std::time::Duration = std::time::Duration::from_millis(500);

/// How a client reaches its store over TLS: the CA bundle that signed the
/// servers' certificates, and for mutual TLS the client's certificate and
/// key; all PEM files, read at connect.
///
/// ```
/// use recipes_core::Tls;
///
/// let tls = Tls::new("/etc/recipes/ca.pem")
///     .cert("/etc/recipes/client.pem")
///     .key("/etc/recipes/client-key.pem");
/// assert_eq!(tls.ca(), std::path::Path::new("/etc/recipes/ca.pem"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Tls {
    ca: PathBuf,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    server_name: Option<String>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Paths only: the files' contents (a private key) are never shown.
        f.debug_struct("Tls")
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl Tls {
    /// TLS that trusts the certificates `ca` (a PEM bundle: one or more
    /// `CERTIFICATE` blocks) signed.
    pub fn new(ca: impl Into<PathBuf>) -> Tls {
        Tls {
            ca: ca.into(),
            cert: None,
            key: None,
            server_name: None,
        }
    }

    /// Present the client certificate (a PEM chain, the client's first)
    /// to servers that ask for one (mutual TLS); give its [`key`](Tls::key)
    /// too.
    pub fn cert(mut self, cert: impl Into<PathBuf>) -> Tls {
        self.cert = Some(cert.into());
        self
    }

    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1) of the client
    /// [`cert`](Tls::cert).
    pub fn key(mut self, key: impl Into<PathBuf>) -> Tls {
        self.key = Some(key.into());
        self
    }

    /// Check the server's certificate against `name` instead of the host
    /// the client connects to (for servers reached by an address their
    /// certificate does not name). On etcd and PostgreSQL; ZooKeeper's and
    /// Redis's client crates always check the host they connect to, and
    /// refuse it.
    pub fn server_name(mut self, name: impl Into<String>) -> Tls {
        self.server_name = Some(name.into());
        self
    }

    /// The CA bundle's path.
    pub fn ca(&self) -> &Path {
        &self.ca
    }

    /// The client certificate's path, if one is given.
    pub fn cert_path(&self) -> Option<&Path> {
        self.cert.as_deref()
    }

    /// The client key's path, if one is given.
    pub fn key_path(&self) -> Option<&Path> {
        self.key.as_deref()
    }

    /// The server name override, if one is given.
    pub fn server_name_override(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// Refuse a server name override on a backend whose client crate
    /// cannot check another name than the host it connects to.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when one
    /// is set, naming `backend`.
    pub fn refuse_server_name(&self, backend: &str) -> crate::Result<()> {
        match &self.server_name {
            None => Ok(()),
            Some(name) => Err(crate::Error::invalid(format!(
                "a TLS server name override ({name:?}) is not supported on {backend}: its \
                 client checks the certificate against the host it connects to; connect by \
                 a name or address the server's certificate holds, and drop the override"
            ))),
        }
    }
}

/// The scheme a store URL should have — `secure` with TLS, `plain`
/// without — and the rest of `url` after the one written (`None` when
/// none was). `Err` says why the written one does not fit, for the
/// backend's [`Error::InvalidArgument`](crate::Error::InvalidArgument).
///
/// # Errors
///
/// The reason, in words: a secure scheme without TLS settings, a plain
/// one with them, another scheme.
pub fn check_scheme<'a>(
    url: &'a str,
    plain: &'static str,
    secure: &'static str,
    tls: bool,
) -> std::result::Result<(&'static str, Option<&'a str>), String> {
    let scheme = if tls { secure } else { plain };
    match url.split_once("://") {
        None => Ok((scheme, None)),
        Some((s, rest)) if s == scheme => Ok((scheme, Some(rest))),
        Some((s, _)) if s == secure => Err(format!(
            "asks for TLS ({secure}://) and no CA bundle is given (Tls, --cacert)"
        )),
        Some((s, _)) if s == plain => Err(format!("is plain {plain}:// and TLS is given")),
        Some((s, _)) => Err(format!("has the scheme {s}://, not {scheme}://")),
    }
}

/// The `tls` setter of a client builder whose `tls` field holds an
/// `Option<Tls>`; `$doc` says what the store's URL does with it.
#[macro_export]
macro_rules! tls_setter {
    ($doc:literal) => {
        /// Connect over TLS (see [`Tls`](recipes_core::Tls)): the CA bundle
        /// checks the server's certificate, a client certificate and key
        /// make it mutual TLS. The files are read and checked at connect;
        /// a mismatch with the server is
        /// [`Error::Tls`](recipes_core::Error::Tls), saying what to change.
        #[doc = $doc]
        pub fn tls(mut self, tls: recipes_core::Tls) -> Self {
            self.tls = Some(tls);
            self
        }
    };
}

/// `builder` with `tls` when given: `set` is its TLS setter
/// (`EtcdClientBuilder::tls`, …), for code that has an `Option`.
pub fn with_tls<B, T>(builder: B, tls: Option<T>, set: fn(B, T) -> B) -> B {
    match tls {
        Some(tls) => set(builder, tls),
        None => builder,
    }
}
