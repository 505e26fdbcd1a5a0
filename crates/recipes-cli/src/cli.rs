//! The command line: global options, subcommands, and how usage errors
//! become exit status 64.

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use recipes_core::LockKind;

use crate::choose::choose_backend;
pub use crate::choose::BackendChoice;
use crate::duration::parse_duration;
use crate::generated::print_generated;
use crate::generated::CompletionsArgs;
use crate::help::{
    DOCTOR_EXAMPLES, ELECT_EXAMPLES, LOCK_EXAMPLES, MAIN_EXAMPLES, SEMAPHORE_EXAMPLES,
    STATUS_EXAMPLES,
};
use crate::{exit, out};

/// Run a command under a distributed lock, semaphore permit or leadership,
/// over ZooKeeper, etcd, PostgreSQL or Redis — like flock(1), across machines, with fencing.
#[derive(Debug, Parser)]
#[command(name = "recipes", version, after_help = MAIN_EXAMPLES)]
pub struct Cli {
    /// ZooKeeper connect string, e.g. 127.0.0.1:2181,127.0.0.1:2182.
    #[arg(long, env = "RECIPES_ZK", value_name = "HOSTS", global = true)]
    pub zk: Option<String>,

    /// etcd endpoints, comma-separated, e.g. 127.0.0.1:2379.
    #[arg(long, env = "RECIPES_ETCD", value_name = "ENDPOINTS", global = true)]
    pub etcd: Option<String>,

    /// PostgreSQL URL, e.g. postgres://app:secret@db:5432/app (the schema
    /// recipes, created on first use).
    #[arg(long, env = "RECIPES_PG", value_name = "URL", global = true)]
    pub pg: Option<String>,

    /// How --pg holds locks: lease (rows, through any pooler) or session
    /// (advisory locks on a connection each; a direct URL or a
    /// session-mode pool).
    #[arg(
        long,
        env = "RECIPES_PG_MODE",
        value_name = "MODE",
        default_value = "lease",
        value_parser = |s: &str| s.parse::<recipes_pg::PgMode>().map_err(|e| e.to_string()),
        global = true
    )]
    pub pg_mode: recipes_pg::PgMode,

    /// Redis URL of a single node, e.g. redis://127.0.0.1:6379 (with
    /// :PASSWORD@ before the host if it wants one; rediss:// with
    /// --cacert).
    #[arg(long, env = "RECIPES_REDIS", value_name = "URL", global = true)]
    pub redis: Option<String>,

    /// ZooKeeper session timeout, etcd lease, PostgreSQL or Redis session
    /// TTL, from 1s to 24h (2s, 1500ms, 1m).
    #[arg(
        long,
        env = "RECIPES_TTL",
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_duration,
        allow_hyphen_values = true,
        global = true
    )]
    pub ttl: Duration,

    /// Participant id (default: host name and pid, e.g. web-1-4242).
    #[arg(long, value_name = "ID", global = true)]
    pub id: Option<String>,

    /// Authenticate as USER (etcd: a user of its RBAC; ZooKeeper: a
    /// digest identity, whose nodes only it may change; PostgreSQL: the
    /// role, in place of the URL's; Redis: an ACL user, `default` for
    /// requirepass). The password comes from RECIPES_PASSWORD or
    /// --password-file, never from the command line.
    #[arg(long, env = "RECIPES_USER", value_name = "USER", global = true)]
    pub user: Option<String>,

    /// With --zk: authenticate --user with SASL DIGEST-MD5 (a user of the
    /// ensemble's JAAS Server section; a wrong password fails at connect)
    /// instead of as a digest identity.
    #[arg(long, env = "RECIPES_ZK_SASL", global = true)]
    pub zk_sasl: bool,

    /// A file whose first line is the password of --user.
    #[arg(
        long,
        env = "RECIPES_PASSWORD_FILE",
        value_name = "FILE",
        global = true
    )]
    pub password_file: Option<std::path::PathBuf>,

    /// CA bundle (PEM) that signed the servers' certificates: connect over
    /// TLS (etcd https://, Redis rediss://, PostgreSQL sslmode=verify-full
    /// unless the URL says verify-ca or require, ZooKeeper's secure client
    /// port).
    #[arg(long, env = "RECIPES_CACERT", value_name = "FILE", global = true)]
    pub cacert: Option<std::path::PathBuf>,

    /// Client certificate (PEM) for mutual TLS, with --key and --cacert.
    #[arg(long, env = "RECIPES_CERT", value_name = "FILE", global = true)]
    pub cert: Option<std::path::PathBuf>,

    /// Private key (PEM) of --cert.
    #[arg(long, env = "RECIPES_KEY", value_name = "FILE", global = true)]
    pub key: Option<std::path::PathBuf>,

    /// The name the server's certificate must hold, when it is not the
    /// host connected to (etcd and PostgreSQL).
    #[arg(long, env = "RECIPES_SERVER_NAME", value_name = "NAME", global = true)]
    pub server_name: Option<String>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The TLS settings of --cacert, --cert, --key, --server-name; the
    /// files are read at connect.
    ///
    /// # Errors
    ///
    /// A message when --cert, --key or --server-name come without
    /// --cacert.
    pub fn tls(&self) -> Result<Option<recipes_core::Tls>, String> {
        let Some(ca) = &self.cacert else {
            if self.cert.is_some() || self.key.is_some() || self.server_name.is_some() {
                return Err(
                    "--cert, --key and --server-name need --cacert (RECIPES_CACERT): \
                            the CA bundle that signed the server's certificate"
                        .into(),
                );
            }
            return Ok(None);
        };
        use recipes_core::tls::with_tls;
        let tls = recipes_core::Tls::new(ca);
        let tls = with_tls(tls, self.cert.clone(), |t, cert| t.cert(cert));
        let tls = with_tls(tls, self.key.clone(), |t, key| t.key(key));
        Ok(Some(with_tls(tls, self.server_name.clone(), |t, n| {
            t.server_name(n)
        })))
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Hold a mutex on NAME while CMD runs; --read NAME or --write NAME
    /// for a side of a read-write lock; several names all at once.
    #[command(after_help = LOCK_EXAMPLES)]
    Lock(LockArgs),
    /// Hold one of N permits on NAME while CMD runs.
    #[command(after_help = SEMAPHORE_EXAMPLES)]
    Semaphore(SemaphoreArgs),
    /// Become leader on NAME, run CMD while leading, resign when it exits.
    #[command(after_help = ELECT_EXAMPLES)]
    Elect(ElectArgs),
    /// Show who holds NAME, with fences, and who waits, in order.
    #[command(after_help = STATUS_EXAMPLES)]
    Status(StatusArgs),
    /// Read, set or add to the shared counter NAME.
    Count(crate::count::CountArgs),
    /// Set, remove or wait for the barrier NAME.
    Barrier(crate::barrier::BarrierArgs),
    /// Enter the double barrier NAME (wait until --count members are in),
    /// run CMD, then leave (wait until every member left). --wait bounds
    /// the enter and the leave each (exit 75 when it passes).
    DoubleBarrier(crate::double_barrier::DoubleBarrierArgs),
    /// Show the members of the group NAME with their data and the view's
    /// version (--watch: on every change).
    Members(crate::members::MembersArgs),
    /// Be a member of the group NAME (id: --id) while CMD runs; CMD is
    /// stopped when the membership is lost.
    Join(crate::join::JoinArgs),
    /// Check a live deployment for the settings that void a lock: one line
    /// per check (ok, warn, fail, skip), what it found, what to change.
    /// Exit 0 when nothing fails, 2 on a failure, 1 on a warning with
    /// --strict.
    #[command(after_help = DOCTOR_EXAMPLES)]
    Doctor(DoctorArgs),
    /// Print a completion script for SHELL (bash, zsh, fish), generated
    /// from this command's definition.
    Completions(CompletionsArgs),
    /// Print the man page (roff), generated from this command's
    /// definition.
    Man,
}

impl Command {
    /// The run options of `lock`, `semaphore` and `elect`.
    pub fn run_options(&self) -> Option<&RunOptions> {
        match self {
            Command::Lock(a) => Some(&a.run),
            Command::Semaphore(a) => Some(&a.run),
            Command::Elect(a) => Some(&a.run),
            Command::DoubleBarrier(a) => Some(&a.run),
            Command::Join(a) => Some(&a.run),
            Command::Members(_)
            | Command::Status(_)
            | Command::Count(_)
            | Command::Barrier(_)
            | Command::Doctor(_)
            | Command::Completions(_)
            | Command::Man => None,
        }
    }

    /// The lock, semaphore or election name the command is about.
    pub fn name(&self) -> &str {
        match self {
            Command::Lock(a) => a.parts.first().map_or("", |(name, _)| name),
            Command::Semaphore(a) => &a.name,
            Command::Elect(a) => &a.name,
            Command::Status(a) => &a.name,
            Command::Count(a) => a.op.name(),
            Command::Barrier(a) => a.op.name(),
            Command::DoubleBarrier(a) => &a.name,
            Command::Members(a) => &a.name,
            Command::Join(a) => &a.name,
            Command::Doctor(_) | Command::Completions(_) | Command::Man => "",
        }
    }

    /// Every name the command is about (several for a multi-lock).
    pub fn names(&self) -> Vec<&str> {
        match self {
            Command::Lock(a) => a.parts.iter().map(|(name, _)| name.as_str()).collect(),
            Command::Doctor(_) | Command::Completions(_) | Command::Man => Vec::new(),
            _ => vec![self.name()],
        }
    }
}

/// How to wait, and what to do on conflict and loss.
#[derive(Debug, Args)]
pub struct RunOptions {
    /// Give up (exit 75) if not acquired within DURATION.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = parse_duration,
        allow_hyphen_values = true,
        conflicts_with = "no_wait"
    )]
    pub wait: Option<Duration>,

    /// Give up (exit 75) unless acquired at once.
    #[arg(long)]
    pub no_wait: bool,

    /// After SIGTERM for a lease at risk or lost: how long CMD may take to
    /// stop before SIGKILL (cut short when the lease is lost).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5s",
        value_parser = parse_duration,
        allow_hyphen_values = true
    )]
    pub grace: Duration,

    /// Keep the lock, permit or leadership at least this long after it
    /// was acquired, even when CMD ends sooner (ShedLock's
    /// `lockAtLeastFor`): a scheduler on a skewed clock that fires again
    /// a little early finds it still held and does not run the job twice.
    /// A signal or the lease's loss ends the wait early.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = parse_duration,
        allow_hyphen_values = true
    )]
    pub hold_at_least: Option<Duration>,

    /// Serve the metrics (see the guide's table) as Prometheus text at
    /// http://ADDR/metrics while this runs, for long-running holders.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,

    /// Exit status when not acquired in time.
    #[arg(long, value_name = "N", default_value_t = exit::CONFLICT as u8)]
    pub conflict_exit_code: u8,

    /// Exit status when the lease is lost.
    #[arg(long, value_name = "N", default_value_t = exit::LOST as u8)]
    pub lost_exit_code: u8,

    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `recipes lock`.
#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock: a path such as /locks/nightly-report. With several names
    /// (and --read, --write) all are taken, all or nothing.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// Take the read side of the read-write lock NAME (repeat for more).
    #[arg(long, value_name = "NAME")]
    pub read: Vec<String>,
    /// Take the write side of the read-write lock NAME (repeat for more).
    #[arg(long, value_name = "NAME")]
    pub write: Vec<String>,
    /// Every name with what to take on it, in command-line order (filled
    /// in by [`parse`]).
    #[arg(skip)]
    pub parts: Vec<(String, LockKind)>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub run: RunOptions,
}

/// `recipes semaphore`.
#[derive(Debug, Args)]
pub struct SemaphoreArgs {
    /// The semaphore: a path such as /sem/backup.
    pub name: String,
    /// How many permits exist (the same for every holder).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub permits: u32,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub run: RunOptions,
}

/// `recipes elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The election: a path such as /elections/scheduler.
    pub name: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub run: RunOptions,
}

/// `recipes status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The lock, read-write lock, semaphore or election to show.
    pub name: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Keep watching: show the status again on every change (the store's
    /// watches, not polling) until Ctrl-C; with --json, one object per
    /// change.
    #[arg(long)]
    pub watch: bool,
}

/// `recipes doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print one JSON object (every check, and the exit status) instead
    /// of text.
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when a check warns (and none fails).
    #[arg(long)]
    pub strict: bool,
    /// Where the application's names live: the doctor's own lock is taken
    /// under it, and on etcd the user's rights on it are checked.
    #[arg(long, value_name = "PREFIX", default_value = "/recipes-doctor/")]
    pub prefix: String,
}

/// Parse the command line. `Err` is the exit status after help, version,
/// completions, the man page or
/// a usage error has been printed.
pub fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Result<(Cli, BackendChoice), i32> {
    let matches = match Cli::command().try_get_matches_from(args) {
        Ok(m) => m,
        // A usage error goes to stderr (nobody to tell if that fails);
        // help and version are the output asked for.
        Err(e) if e.use_stderr() => {
            let _ = e.print();
            return Err(exit::USAGE);
        }
        Err(e) => {
            use std::io::Write as _;
            let printed = e.print().and_then(|()| std::io::stdout().flush());
            return Err(printed.map_or_else(|e| out::failed(&e), |()| 0));
        }
    };
    let mut cli = Cli::from_arg_matches(&matches).map_err(|e| {
        let _ = e.print();
        exit::USAGE
    })?;
    if let (Command::Lock(a), Some(("lock", m))) = (&mut cli.command, matches.subcommand()) {
        a.parts = lock_parts(m).map_err(|msg| {
            say!("recipes: {msg}");
            exit::USAGE
        })?;
    }
    if matches!(cli.command, Command::Completions(_) | Command::Man) {
        return Err(match print_generated(&cli.command) {
            Ok(()) => 0,
            Err(e) => out::failed(&e),
        });
    }
    let backend = choose_backend(&cli, &matches).map_err(|msg| {
        say!("recipes: {msg}");
        exit::USAGE
    })?;
    Ok((cli, backend))
}

/// `recipes lock`'s names in command-line order, each with what to take.
fn lock_parts(m: &ArgMatches) -> Result<Vec<(String, LockKind)>, String> {
    let mut parts = Vec::new();
    let kinds = [
        ("names", LockKind::Mutex),
        ("read", LockKind::Read),
        ("write", LockKind::Write),
    ];
    for (id, kind) in kinds {
        if let (Some(names), Some(at)) = (m.get_many::<String>(id), m.indices_of(id)) {
            parts.extend(at.zip(names).map(|(i, name)| (i, name.clone(), kind)));
        }
    }
    if parts.is_empty() {
        return Err("lock needs a NAME (a mutex), --read NAME or --write NAME".into());
    }
    parts.sort_by_key(|(i, _, _)| *i);
    let parts: Vec<(String, LockKind)> = parts
        .into_iter()
        .map(|(_, name, kind)| (name, kind))
        .collect();
    // A multi-lock's list is refused before connecting, as a bad name is.
    recipes_core::check_multi_lock(&crate::locks::borrowed(&parts)).map_err(|e| e.to_string())?;
    Ok(parts)
}

/// The participant id: `--id`, or `<host name>-<pid>`.
pub fn participant_id(cli: &Cli) -> String {
    if let Some(id) = &cli.id {
        return id.clone();
    }
    format!("{}-{}", host_name(), std::process::id())
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most
    // that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
