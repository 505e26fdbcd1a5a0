//! [`PgClientBuilder`]: a client's settings, checked, and its connect.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::{quote, Runtime, Settings};
use recipes_core::tls::{Prelude, Probe, Verify};
use recipes_core::{Error, LossPolicy, Result, Tls};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::Config;

use crate::client::PgClient;
use crate::db::Db;
use crate::listen::Listener;

/// TCP keep-alive: idle time before the first probe, the time between
/// probes, and how many may go unanswered. A black-holed connection (the
/// listening one sends nothing for long) is then closed by the kernel
/// within about 8 s, not only noticed by our timeouts.
const KEEPALIVE: (Duration, Duration, u32) = (Duration::from_secs(5), Duration::from_secs(1), 3);

/// How often a waiter looks at the entry it waits for when no
/// notification came, by default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// How a client's mutexes and semaphores hold their locks; see the crate
/// docs' "Modes".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PgMode {
    /// Rows of `recipes.queue` under a session row that expires in
    /// database time: works through any pooler (the default).
    #[default]
    Lease,
    /// Advisory locks, each on a connection of its own whose session is
    /// the lease: needs a direct connection or a session-mode pool.
    Session,
}

impl FromStr for PgMode {
    type Err = Error;

    /// `lease` or `session`.
    fn from_str(s: &str) -> Result<PgMode> {
        match s {
            "lease" => Ok(PgMode::Lease),
            "session" => Ok(PgMode::Session),
            other => Err(Error::invalid(format!(
                "the PostgreSQL mode {} is neither lease nor session; write lease (rows, \
                 through any pooler) or session (advisory locks, direct connections)",
                quote(other)
            ))),
        }
    }
}

/// Settings for a [`PgClient`]; see [`PgClient::builder`].
#[derive(Clone)]
pub struct PgClientBuilder {
    pub(crate) url: String,
    pub(crate) listen_url: Option<String>,
    /// A user and password that replace the URL's.
    pub(crate) user: Option<(String, String)>,
    pub(crate) poll_interval: Duration,
    pub(crate) tls: Option<recipes_core::Tls>,
    pub(crate) settings: Settings,
    pub(crate) mode: PgMode,
    pub(crate) namespace: u32,
    pub(crate) loss_policy: LossPolicy,
}

impl fmt::Debug for PgClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |u: &str| {
            parse(u, self.user.as_ref())
                .map(|(_, s)| s)
                .unwrap_or_else(|_| "(invalid)".into())
        };
        f.debug_struct("PgClientBuilder")
            .field("url", &shown(&self.url))
            .field("listen_url", &self.listen_url.as_deref().map(shown))
            .field("poll_interval", &self.poll_interval)
            .field("tls", &self.tls)
            .field("settings", &self.settings)
            .field("mode", &self.mode)
            .field("namespace", &self.namespace)
            .field("loss_policy", &self.loss_policy)
            .finish()
    }
}

impl PgClientBuilder {
    recipes_core::settings_setters!(
        ttl = "On PostgreSQL the TTL of the session row, counted in database time \
               (`clock_timestamp()`), to the millisecond; it is granted as asked."
    );

    recipes_core::tls_setter!(
        "The URL's `sslmode` says how much is checked: `verify-full` (the default with \
         TLS) the chain and the host's name, `verify-ca` and `require` the chain only (as \
         libpq does with a CA); `disable` is refused with TLS, and `require` and above \
         without it."
    );

    /// The URL of the connection that `LISTEN`s for queue changes (default:
    /// the client's URL). Through a transaction-mode pooler (pgbouncer's
    /// `pool_mode = transaction`) give a direct URL of the server here: the
    /// pooler moves a listening backend to other clients, and waits then
    /// fall back to polling every [`poll_interval`](Self::poll_interval).
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

    /// Log in as `user` with `password`, in place of the URL's user and
    /// password (on the listening connection too): for a password kept
    /// out of the URL, read from a file or the environment. Neither
    /// `Debug` nor any message shows the password.
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// How often a waiter (and a held entry's loss watch) looks at the
    /// entry it waits for when no notification came (default
    /// [`DEFAULT_POLL_INTERVAL`]); never longer than that entry's session
    /// has left.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// How mutexes and semaphores hold their locks (default
    /// [`PgMode::Lease`]). Elections, latches and selectors run on queue
    /// rows in both modes: they need their candidates' values, which an
    /// advisory lock cannot carry.
    pub fn mode(mut self, mode: PgMode) -> Self {
        self.mode = mode;
        self
    }

    /// [`mode`](Self::mode)`(PgMode::Session)`: advisory locks on a
    /// dedicated connection each. [`connect`](Self::connect) refuses a URL
    /// behind a transaction-mode pooler.
    pub fn session_mode(self) -> Self {
        self.mode(PgMode::Session)
    }

    /// The first int of session mode's two-int advisory keys (default
    /// [`DEFAULT_NAMESPACE`](crate::DEFAULT_NAMESPACE)), so they never
    /// meet an application's own advisory locks: pick another if the
    /// application uses this one. Every client of one database must use
    /// the same. Not 0, nor 1919247223 (`'recw'`, lease mode's read-write
    /// lock gate).
    pub fn advisory_namespace(mut self, namespace: u32) -> Self {
        self.namespace = namespace;
        self
    }

    /// What a dropped connection means for the locks (as on ZooKeeper):
    /// [`LossPolicy::Deadline`] (the default) rides out a connection lost
    /// for less than the session's deadline — the client reconnects and
    /// renews, and its locks live on; [`LossPolicy::OnDisconnect`] fires
    /// the loss of every guard of the session whose connection is lost:
    /// the lease connection, which renews the session row, or the
    /// statement connection, in either mode. (A session-mode lock's own connection is its lease: losing it
    /// is loss under either policy.)
    pub fn loss_policy(mut self, policy: LossPolicy) -> Self {
        self.loss_policy = policy;
        self
    }

    /// The URL without its password, as messages show it; `None` when it
    /// is not a URL this client takes.
    pub fn redacted_url(&self) -> Option<String> {
        parse(&self.url, self.user.as_ref())
            .ok()
            .map(|(_, shown)| shown)
    }

    /// The statements' and the listener's connection: each URL's
    /// settings, what explains a failed connect, the URL as shown.
    fn validate(&self) -> Result<[((Config, Probe), String); 2]> {
        if self.user.as_ref().is_some_and(|(u, _)| u.is_empty()) {
            return Err(Error::invalid("the PostgreSQL user is empty; name a role"));
        }
        let main = self.connection(&self.url)?;
        let listen = self.connection(self.listen_url.as_deref().unwrap_or(&self.url))?;
        recipes_core::store::check_timeout("poll interval", self.poll_interval)?;
        if self.namespace == 0 {
            return Err(Error::invalid(
                "the advisory namespace 0 is what applications that do not think about \
                 namespaces use; pick another (the default is recipes_pg::DEFAULT_NAMESPACE)",
            ));
        }
        if self.namespace == RW_GATE_CLASS {
            return Err(Error::invalid(format!(
                "the advisory namespace {RW_GATE_CLASS} ('recw') is the one lease mode's \
                 read-write locks take their gate in (contend.sql); pick another (the default \
                 is recipes_pg::DEFAULT_NAMESPACE)"
            )));
        }
        self.settings.validate("the session TTL")?;
        Ok([main, listen])
    }

    /// The settings of `url` with its TLS and the builder's.
    fn connection(&self, url: &str) -> Result<((Config, Probe), String)> {
        let (url, tls) = split_tls(url, self.tls.as_ref())?;
        let (mut config, shown) = parse(&url, self.user.as_ref())?;
        let files = match &tls {
            Some((tls, _)) => Some(tls.load()?),
            None => None,
        };
        if files.is_some() {
            config.ssl_mode(SslMode::Require);
        }
        let mut probe = Probe::new(
            &url,
            format!("PostgreSQL at {shown}"),
            files,
            Prelude::Postgres,
        )
        .unanswered(format!("no PostgreSQL server at {shown}"), UNANSWERED);
        probe.verify = tls.map_or(Verify::Full, |(_, verify)| verify);
        Ok(((config, probe), shown))
    }

    /// Connect: start the runtime thread, connect, make sure the schema
    /// `recipes` exists in the version this crate knows (creating it on
    /// first use), and open the client's session.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for bad settings, a schema of another
    /// layout version, or session mode behind a transaction-mode pooler
    /// (the message names the fix); [`Error::Unauthenticated`] for a refused user or
    /// password; [`Error::PermissionDenied`] when the role may not use (or
    /// create) the schema; [`Error::Backend`] naming the URL when no server
    /// answered within the connect timeout.
    pub fn connect(self) -> Result<PgClient> {
        let (db, listener, rt) = self.prepare()?;
        PgClient::start(self, db, listener, rt)
    }

    /// Create the schema `recipes` if it does not exist (what the first
    /// [`connect`](Self::connect) does), without opening a session: for a
    /// role that may create it, ahead of applications whose roles may only
    /// use it (see the crate docs' privileges).
    ///
    /// # Errors
    ///
    /// As for [`connect`](Self::connect).
    pub fn init(self) -> Result<()> {
        let (_, _, rt) = self.prepare()?;
        rt.shutdown(self.settings.rpc_timeout);
        Ok(())
    }

    /// Check the settings, start the runtime, connect and make sure of the
    /// schema.
    fn prepare(&self) -> Result<(Arc<Db>, Listener, Runtime)> {
        let [(mut config, shown), (mut listen, listen_shown)] = self.validate()?;
        for (c, _) in [&mut config, &mut listen] {
            c.keepalives(true)
                .keepalives_idle(KEEPALIVE.0)
                .keepalives_interval(KEEPALIVE.1)
                .keepalives_retries(KEEPALIVE.2)
                .connect_timeout(self.settings.connect_timeout)
                .application_name("recipes");
        }
        let (rpc, connect) = (self.settings.rpc_timeout, self.settings.connect_timeout);
        let db = Arc::new(Db::new(config, shown.clone(), rpc, connect)?);
        let listener = Listener::new(Db::new(listen, listen_shown, rpc, connect)?);
        let rt = Runtime::new("recipes-pg")?;
        let probe = db.clone();
        let what = format!("connect to PostgreSQL at {shown}");
        let budget = connect.saturating_add(rpc.saturating_mul(3));
        let session = self.mode == PgMode::Session;
        let checked = rt.call(&what.clone(), budget.saturating_add(rpc), async move {
            let conn = probe.conn().await?;
            crate::schema::ensure(&conn, &what).await?;
            crate::schema::check_isolation(&conn, &what).await?;
            if session {
                crate::pooler::refuse_transaction_pooling(&probe).await?;
            }
            Ok(())
        });
        match checked {
            Ok(()) => {}
            Err(Error::Timeout { .. } | Error::ConnectionLoss) => return Err(db.unreachable()),
            Err(e) => return Err(e),
        }
        log::debug!("[pg={shown}] connected");
        Ok((db, listener, rt))
    }
}

/// The class of the two-int advisory locks lease mode's read-write locks
/// take as their gate (`recipes.rw_gate` in `contend.sql`): not a
/// namespace session mode may use (`advisory_lock.rs`, `gate_class!`).
const RW_GATE_CLASS: u32 = 1_919_247_223;

/// What to check when no server answered.
const UNANSWERED: &str = "the host and port are PostgreSQL's (5432 by default, pgbouncer's \
                          6432), not another store's";

/// libpq's TLS options, which tokio-postgres does not read: `url` without
/// them, and the TLS that they and `tls` ask for with how much of the
/// server's certificate is checked (`sslmode`: `verify-full` by default
/// with TLS, the chain only for `verify-ca` and `require`, as libpq does
/// with a CA). `sslrootcert`, `sslcert`, `sslkey` give the files when
/// `tls` does not.
fn split_tls(url: &str, tls: Option<&Tls>) -> Result<(String, Option<(Tls, Verify)>)> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let (mut mode, mut files, mut kept) = (None, [None, None, None], Vec::new());
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let slot = ["sslrootcert", "sslcert", "sslkey"]
            .iter()
            .position(|k| pair.split_once('=').is_some_and(|(key, _)| key == *k));
        match (pair.split_once('='), slot) {
            (Some(("sslmode", m)), _) => mode = Some(m.to_owned()),
            (Some((_, path)), Some(i)) => files[i] = Some(path.to_owned()),
            _ => kept.push(pair),
        }
    }
    let url = match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    };
    let refuse = |why: String| Err(Error::invalid(format!("PostgreSQL URL {why}")));
    let from_url = match files {
        [None, None, None] => None,
        [None, ..] => return refuse("has sslcert or sslkey without sslrootcert (the CA)".into()),
        [Some(ca), cert, key] => {
            let tls = Tls::new(ca);
            let tls = cert.map_or(tls.clone(), |c| tls.cert(c));
            Some(key.map_or(tls.clone(), |k| tls.key(k)))
        }
    };
    let tls = tls.cloned().or(from_url);
    let verify = match (mode.as_deref(), &tls) {
        (None | Some("verify-full"), Some(_)) => Verify::Full,
        (Some("verify-ca" | "require"), Some(_)) => Verify::ChainOnly,
        (None | Some("disable" | "allow" | "prefer"), None) => return Ok((url, None)),
        (Some(m @ ("require" | "verify-ca" | "verify-full")), None) => {
            return refuse(format!(
                "asks for sslmode={m} and no CA bundle is given: pass the TLS settings \
                 (Tls, --cacert) or sslrootcert=PATH"
            ))
        }
        (Some(m @ ("disable" | "allow" | "prefer")), Some(_)) => {
            return refuse(format!(
                "has sslmode={m} and TLS settings are given: say sslmode=verify-full (the \
                 default with TLS), verify-ca or require"
            ))
        }
        (Some(m), _) => {
            return refuse(format!(
                "has sslmode={}: write disable, require, verify-ca or verify-full",
                quote(m)
            ))
        }
    };
    Ok((url, tls.map(|t| (t, verify))))
}

/// A `postgres://` (or `postgresql://`) URL with a host, as
/// tokio-postgres reads it, its user and password replaced by `user`'s;
/// the URL without its password, for messages.
pub(crate) fn parse(url: &str, user: Option<&(String, String)>) -> Result<(Config, String)> {
    let hint = "write postgres://user:password@host:port/database, such as \
                postgres://recipes@127.0.0.1:5432/recipes";
    let refuse = |why: &str| Err(Error::invalid(format!("PostgreSQL URL {why}; {hint}")));
    let Some((scheme, _)) = url.split_once("://") else {
        return refuse("is not a URL (no scheme://)");
    };
    if scheme != "postgres" && scheme != "postgresql" {
        return refuse(&format!(
            "has the scheme {}://, not postgres://",
            quote(scheme)
        ));
    }
    let mut config = match Config::from_str(url) {
        Ok(c) => c,
        // Its message may quote the password.
        Err(_) => return refuse("cannot be read (a bad port, an unknown option, bad escapes)"),
    };
    if let Some((name, password)) = user {
        config.user(name).password(password);
    }
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    if hosts.is_empty() || hosts.iter().any(String::is_empty) {
        return refuse("names no host");
    }
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    let user = config.get_user().unwrap_or("");
    let db = config.get_dbname().unwrap_or(user);
    let at = if user.is_empty() {
        String::new()
    } else {
        format!("{user}@")
    };
    let port = if ports.is_empty() {
        String::new()
    } else {
        format!(":{}", ports.join(","))
    };
    let shown = format!("{scheme}://{at}{}{port}/{db}", hosts.join(","));
    Ok((config, shown))
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn urls_name_a_host_and_hide_the_password() {
        let (_, shown) = parse("postgres://u:secret@127.0.0.1:5433/db", None).unwrap();
        assert_eq!(shown, "postgres://u@127.0.0.1:5433/db");
        assert!(parse("postgresql://h/db", None).is_ok());
        for bad in [
            "",
            "127.0.0.1:5432",
            "http://h:5432/db",
            "postgres://h:port/db",
            "postgres:///db",
            "host=h user=u",
        ] {
            let e = parse(bad, None).expect_err(bad).to_string();
            assert!(e.contains("postgres://user:password@host"), "{bad}: {e}");
            assert!(!e.contains("secret"));
        }
    }
}
