//! Test certificates, made at run time (never checked in): a CA, server
//! certificates for `127.0.0.1` and `localhost` (a good one, an expired
//! one, one not yet valid, one for another name), client certificates, and
//! a second CA with a client certificate of its own.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::run_shared::{self, Record, RunShared, SharedSlots};
use crate::test_dir::TestDir;

pub use recipes_core::tls::with_tls;

/// A certificate and its key, PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

/// Every certificate the TLS tests need, in one folder.
#[derive(Debug)]
pub struct TestPki {
    /// The CA the servers trust and the good certificates come from.
    pub ca: PathBuf,
    /// A CA nobody trusts.
    pub other_ca: PathBuf,
    /// The server's certificate: `127.0.0.1` and `localhost`.
    pub server: CertFiles,
    /// A server certificate that expired in 2020.
    pub expired_server: CertFiles,
    /// A server certificate valid from 2090 on.
    pub future_server: CertFiles,
    /// A server certificate for `db.example.com` only.
    pub wrong_name_server: CertFiles,
    /// A server certificate that expires 10 days after it was made.
    pub expiring_server: CertFiles,
    /// A client certificate of [`ca`](Self::ca).
    pub client: CertFiles,
    /// A client certificate of [`other_ca`](Self::other_ca).
    pub other_client: CertFiles,
    dir: TestDir,
}

/// A test server's TLS: its certificate, the CA it trusts for client
/// certificates, and whether it requires one. The harness's own clients
/// read through a plain port beside the TLS one.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The CA bundle: clients' certificates are checked against it, and
    /// the harness's clients check the server's.
    pub ca: PathBuf,
    /// The server's certificate and key.
    pub server: CertFiles,
    /// Whether a client certificate is required (mutual TLS).
    pub client_auth: bool,
}

impl TestPki {
    /// One set of certificates shared by every test of this test binary
    /// (under nextest by its test processes until the run ends, see
    /// `run_shared.rs`, as the servers that use them are).
    pub fn shared() -> &'static TestPki {
        static SHARED: SharedSlots<TestPki> = SharedSlots::new();
        run_shared::shared(&SHARED, ())
    }

    /// A new set of certificates in a folder of its own.
    ///
    /// # Panics
    ///
    /// When a certificate cannot be made or written.
    pub fn generate() -> TestPki {
        let pki = TestPki::in_dir(TestDir::new("pki"));
        let (ca, ca_pem) = authority("recipes test CA");
        let (other, other_pem) = authority("another CA");
        write(&pki.ca, &ca_pem);
        write(&pki.other_ca, &other_pem);
        let local = ["127.0.0.1", "localhost"];
        leaf(&ca, &local, Leaf::Server, Validity::Now, &pki.server);
        leaf(
            &ca,
            &local,
            Leaf::Server,
            Validity::Past,
            &pki.expired_server,
        );
        leaf(
            &ca,
            &local,
            Leaf::Server,
            Validity::Future,
            &pki.future_server,
        );
        leaf(
            &ca,
            &local,
            Leaf::Server,
            Validity::Expiring,
            &pki.expiring_server,
        );
        let other_name = ["db.example.com"];
        leaf(
            &ca,
            &other_name,
            Leaf::Server,
            Validity::Now,
            &pki.wrong_name_server,
        );
        let client = ["recipes-client"];
        leaf(&ca, &client, Leaf::Client, Validity::Now, &pki.client);
        leaf(
            &other,
            &client,
            Leaf::Client,
            Validity::Now,
            &pki.other_client,
        );
        // The servers run as other users (PostgreSQL): readable by all.
        for entry in std::fs::read_dir(pki.dir.path()).expect("list the pki folder") {
            let path = entry.expect("an entry").path();
            set_mode(&path, 0o644);
        }
        set_mode(pki.dir.path(), 0o755);
        pki
    }

    /// The certificates' files in `dir` (written or not).
    fn in_dir(dir: TestDir) -> TestPki {
        let at = |name: &str| dir.path().join(name);
        let files = |base: &str| CertFiles {
            cert: at(&format!("{base}.pem")),
            key: at(&format!("{base}-key.pem")),
        };
        TestPki {
            ca: at("ca.pem"),
            other_ca: at("other-ca.pem"),
            server: files("server"),
            expired_server: files("expired"),
            future_server: files("future"),
            wrong_name_server: files("wrong-name"),
            expiring_server: files("expiring"),
            client: files("client"),
            other_client: files("other-client"),
            dir,
        }
    }

    /// The folder of the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// TLS trusting the CA, with the good client certificate.
    pub fn client_tls(&self) -> recipes_core::Tls {
        recipes_core::Tls::new(&self.ca)
            .cert(&self.client.cert)
            .key(&self.client.key)
    }

    /// A server's TLS with the good server certificate; mutual when
    /// `client_auth`.
    pub fn server_tls(&self, client_auth: bool) -> ServerTls {
        self.server_tls_with(&self.server, client_auth)
    }

    /// A server's TLS with the certificate `server` (an expired one, one
    /// for another name).
    pub fn server_tls_with(&self, server: &CertFiles, client_auth: bool) -> ServerTls {
        ServerTls {
            ca: self.ca.clone(),
            server: server.clone(),
            client_auth,
        }
    }

    /// The worker's `tls <ca> <cert> <key>` words for the good client
    /// certificate (see `bin/worker/main.rs`).
    pub fn worker_tls(&self) -> String {
        let (ca, client) = (self.ca.display(), &self.client);
        format!(
            "tls {ca} {} {}",
            client.cert.display(),
            client.key.display()
        )
    }

    /// TLS trusting the CA, without a client certificate.
    pub fn ca_only(&self) -> recipes_core::Tls {
        recipes_core::Tls::new(&self.ca)
    }
}

/// What a leaf certificate is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Leaf {
    Server,
    Client,
}

/// When a leaf certificate is valid.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Validity {
    Now,
    Past,
    Future,
    /// From 2024 until 10 days from now.
    Expiring,
}

/// A self-signed CA and its PEM.
fn authority(name: &str) -> (CertifiedIssuer<'static, KeyPair>, String) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().expect("CA key");
    let issuer = CertifiedIssuer::self_signed(params, key).expect("self-signed CA");
    let pem = issuer.pem();
    (issuer, pem)
}

/// A certificate for `names` signed by `ca`, written to `files`.
fn leaf(
    ca: &CertifiedIssuer<'static, KeyPair>,
    names: &[&str],
    kind: Leaf,
    validity: Validity,
    files: &CertFiles,
) {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names.clone()).expect("leaf params");
    params
        .distinguished_name
        .push(DnType::CommonName, names[0].as_str());
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = match kind {
        Leaf::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
        Leaf::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
    };
    let (from, until) = match validity {
        Validity::Now | Validity::Expiring => ((2024, 1, 1), (2124, 1, 1)),
        Validity::Past => ((2019, 1, 1), (2020, 1, 1)),
        Validity::Future => ((2090, 1, 1), (2124, 1, 1)),
    };
    params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
    params.not_after = rcgen::date_time_ymd(until.0, until.1, until.2);
    if validity == Validity::Expiring {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970");
        let in_ten_days = now + std::time::Duration::from_secs(10 * 86_400);
        params.not_after = rcgen::date_time_ymd(1970, 1, 1) + in_ten_days;
    }
    let key = KeyPair::generate().expect("leaf key");
    let cert = params.signed_by(&key, ca).expect("signed leaf");
    write(&files.cert, &cert.pem());
    write(&files.key, &key.serialize_pem());
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let permissions = std::fs::Permissions::from_mode(mode);
    std::fs::set_permissions(path, permissions)
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

impl RunShared for TestPki {
    type Config = ();
    const KIND: &'static str = "pki";

    fn start_shared((): ()) -> TestPki {
        TestPki::generate()
    }

    fn record(&self) -> Record {
        Record {
            pid: None,
            dir: self.dir().to_owned(),
            log: self.dir().to_owned(),
            label: "pki".to_owned(),
            addrs: Vec::new(),
        }
    }

    fn adopt((): (), record: Record) -> TestPki {
        TestPki::in_dir(TestDir::adopted(record.dir))
    }
}
