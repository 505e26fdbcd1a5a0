//! One shared server per test binary under nextest, as under `cargo test`.
//!
//! nextest runs every test in a process of its own, so a `shared()` server
//! kept in a process static (`OnceLock`) started once *per test*: a JVM, an
//! `initdb` or an etcd per test, most of the suite's time. Under nextest
//! (`NEXTEST_RUN_ID` set) the first test process of a binary that asks for a
//! shared server starts it *detached* (its own session, no parent-death
//! signal) in a folder of the run, and records where it listens; the next
//! test processes of the same binary and the same run attach to it. So the
//! tests of one binary share one server exactly as the threads of one
//! `cargo test` process do (each test keeps to its own names), and no
//! server is shared between binaries.
//!
//! One keeper per run (a shell loop, also detached) waits until the nextest
//! process is gone (it exited, or it was killed), then kills every recorded
//! server with its process group and removes the run's folder. Under plain
//! `cargo test`, or with `RECIPES_TEST_SHARED=process`, nothing here is
//! used: the server lives in the process and dies with it, as before.

use std::cell::RefCell;
use std::collections::hash_map::DefaultHasher;
use std::fs::{File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use crate::process::ManagedProcess;

/// What another test process needs to use a server this one started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// The server's pid (`None` for files without a process, such as the
    /// test certificates).
    pub pid: Option<u32>,
    /// The server's folder.
    pub dir: PathBuf,
    /// Its log file.
    pub log: PathBuf,
    /// Its name in messages.
    pub label: String,
    /// Its addresses, in an order of the server type's own.
    pub addrs: Vec<SocketAddr>,
}

impl Record {
    /// The record of a server run by `process` in `dir`, listening on
    /// `addrs`.
    pub(crate) fn of(process: &ManagedProcess, dir: &Path, addrs: Vec<SocketAddr>) -> Record {
        Record {
            pid: process.pid(),
            dir: dir.to_owned(),
            log: process.log_path().to_owned(),
            label: process.label().to_owned(),
            addrs,
        }
    }

    /// A handle of the recorded process (see [`ManagedProcess::adopted`]).
    pub(crate) fn process(&self) -> ManagedProcess {
        ManagedProcess::adopted(&self.label, &self.log, self.pid)
    }

    fn to_text(&self) -> String {
        let addrs: Vec<String> = self.addrs.iter().map(ToString::to_string).collect();
        format!(
            "pid {}\ndir {}\nlog {}\nlabel {}\naddrs {}\n",
            self.pid.map_or("-".to_owned(), |p| p.to_string()),
            self.dir.display(),
            self.log.display(),
            self.label,
            addrs.join(" ")
        )
    }

    fn parse(text: &str) -> Option<Record> {
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        };
        let pid = match field("pid")? {
            "-" => None,
            p => Some(p.parse().ok()?),
        };
        let addrs = field("addrs")?
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<Vec<SocketAddr>, _>>()
            .ok()?;
        Some(Record {
            pid,
            dir: PathBuf::from(field("dir")?),
            log: PathBuf::from(field("log")?),
            label: field("label")?.to_owned(),
            addrs,
        })
    }
}

thread_local! {
    /// While this thread starts a run-shared server: the folder its
    /// [`TestDir`](crate::test_dir::TestDir)s go in.
    static STARTING: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// Where a [`TestDir`](crate::test_dir::TestDir) goes instead of the usual
/// root, while this thread starts a run-shared server.
pub(crate) fn starting_root() -> Option<PathBuf> {
    STARTING.with(|s| s.borrow().clone())
}

/// Whether this thread is starting a run-shared server: its processes are
/// spawned detached, to outlive this process.
pub(crate) fn starting() -> bool {
    STARTING.with(|s| s.borrow().is_some())
}

/// The nextest run this process is a test of.
struct Run {
    dir: PathBuf,
    /// The nextest process: the parent of every test process.
    runner: u32,
}

impl Run {
    fn current() -> Option<Run> {
        if std::env::var("RECIPES_TEST_SHARED").is_ok_and(|v| v == "process") {
            return None;
        }
        let id = std::env::var("NEXTEST_RUN_ID").ok()?;
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return None;
        }
        // SAFETY: getppid has no preconditions.
        let runner = u32::try_from(unsafe { libc::getppid() }).ok()?;
        // A process a test started (a worker, an example) inherits the
        // variables but is not a test: it keeps its servers to itself.
        let comm = std::fs::read_to_string(format!("/proc/{runner}/comm")).ok()?;
        if !comm.trim().contains("nextest") {
            return None;
        }
        // Short names: PostgreSQL's socket path must fit in 107 bytes.
        let short: String = id
            .chars()
            .filter(char::is_ascii_hexdigit)
            .take(12)
            .collect();
        let dir = std::env::temp_dir().join("recipes-it-shared").join(short);
        std::fs::create_dir_all(&dir).ok()?;
        let run = Run { dir, runner };
        run.ensure_keeper();
        Some(run)
    }

    /// Starts the run's keeper unless one runs.
    fn ensure_keeper(&self) {
        static ENSURED: OnceLock<()> = OnceLock::new();
        ENSURED.get_or_init(|| {
            let _lock = lock(&self.dir.join("keeper.lock"));
            let pid_file = self.dir.join("keeper");
            let running = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|p| p.trim().parse::<u32>().ok())
                .is_some_and(alive);
            if running {
                return;
            }
            let mut keeper = Command::new("/bin/sh");
            keeper
                .args(["-c", KEEPER, "recipes-it-keeper"])
                .arg(self.runner.to_string())
                .arg(&self.dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            detach(&mut keeper);
            match keeper.spawn() {
                Ok(child) => {
                    let _ = std::fs::write(&pid_file, child.id().to_string());
                }
                Err(e) => panic!("cannot start the shared servers' keeper: {e}"),
            }
        });
    }
}

/// Waits until the nextest process is gone, kills every recorded server
/// (with its process group: PostgreSQL's backends), moves the folders a
/// failed test kept to the harness's usual root (swept after a day, see
/// `test_dir.rs`) and removes the run's folder. Arguments: the nextest pid, the run's folder.
const KEEPER: &str = r#"
runner=$1; dir=$2
while [ -d "/proc/$runner" ]; do sleep 1; done
pids=
for f in "$dir"/*.pid; do [ -f "$f" ] && pids="$pids $(cat "$f")"; done
for p in $pids; do kill -KILL -- "-$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
i=0
while [ "$i" -lt 100 ]; do
  alive=
  for p in $pids; do
    if [ -e "/proc/$p" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$p/status" 2>/dev/null; then alive=1; fi
  done
  [ -z "$alive" ] && break
  sleep 0.1; i=$((i + 1))
done
for kept in "$dir"/*/*/KEPT-AFTER-PANIC; do
  [ -e "$kept" ] || continue
  from=${kept%/KEPT-AFTER-PANIC}
  mkdir -p "$(dirname "$dir")/../recipes-it"
  mv "$from" "$(dirname "$dir")/../recipes-it/0-kept-$(basename "$from")" 2>/dev/null
done
rm -rf "$dir"
"#;

/// Makes `command`'s process the leader of a session of its own: it keeps
/// running when this test process ends, and nextest's signals to the test's
/// process group do not reach it.
pub(crate) fn detach(command: &mut Command) {
    // SAFETY: setsid is async-signal-safe; nothing is allocated.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Whether `pid` runs (and is not a zombie).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X')),
        Err(_) => false,
    }
}

/// An exclusive `flock` on `path`, held until the file is dropped.
fn lock(path: &Path) -> File {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        panic!(
            "cannot lock {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    file
}

/// This test binary's file name (`etcd_conformance-0123abcd`).
fn binary() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name()?.to_str().map(str::to_owned))
        .unwrap_or_else(|| "tests".to_owned())
}

/// A short, stable name for `value`'s `Debug` text (a server's settings).
pub(crate) fn key_of(kind: &str, value: &impl std::fmt::Debug) -> String {
    let mut hasher = DefaultHasher::new();
    format!("{value:?}").hash(&mut hasher);
    format!("{kind}-{:012x}", hasher.finish() >> 16)
}

/// The server `key` of this test binary: under nextest the one that an
/// earlier test process of this run started (`adopt` turns its record
/// into a handle), or a new one (`start`, detached, recorded with
/// `record`); otherwise `start()`.
pub(crate) fn get_or_start<S>(
    key: &str,
    start: impl FnOnce() -> S,
    record: impl FnOnce(&S) -> Record,
    adopt: impl FnOnce(Record) -> S,
) -> S {
    let Some(run) = Run::current() else {
        return start();
    };
    let name = key_of(key.split('-').next().unwrap_or(key), &(binary(), key));
    let _lock = lock(&run.dir.join(format!("{name}.lock")));
    let record_path = run.dir.join(format!("{name}.record"));
    let found = std::fs::read_to_string(&record_path)
        .ok()
        .and_then(|text| Record::parse(&text))
        .filter(|r| r.pid.is_none_or(alive) && r.dir.exists());
    if let Some(found) = found {
        return adopt(found);
    }
    let folder = run.dir.join(&name);
    std::fs::create_dir_all(&folder)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", folder.display()));
    let outer = STARTING.with(|s| s.replace(Some(folder)));
    let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(start));
    STARTING.with(|s| *s.borrow_mut() = outer);
    let server = started.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    let rec = record(&server);
    if let Some(pid) = rec.pid {
        write_atomically(&run.dir.join(format!("{name}.pid")), &format!("{pid}\n"));
    }
    write_atomically(&record_path, &rec.to_text());
    server
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// A server type that test processes of one run can share.
pub(crate) trait RunShared: Sized + Send + Sync + 'static {
    /// Its settings; their `Debug` text tells shared servers apart.
    type Config: std::fmt::Debug + Clone;
    /// The name of its kind, in file names (`zk`, `etcd`).
    const KIND: &'static str;
    /// Starts a server with `config` (in this process).
    fn start_shared(config: Self::Config) -> Self;
    /// What another test process needs to use it.
    fn record(&self) -> Record;
    /// A handle of the server with `config` that `record` describes.
    fn adopt(config: Self::Config, record: Record) -> Self;
}

/// The server with `config` shared by every test of this test binary:
/// once per process (kept in `slots`), and under nextest once per run.
pub(crate) fn shared<S: RunShared>(
    slots: &'static SharedSlots<S>,
    config: S::Config,
) -> &'static S {
    let key = key_of(S::KIND, &config);
    slots.get(&key, || {
        get_or_start(
            &key,
            || S::start_shared(config.clone()),
            S::record,
            |record| S::adopt(config.clone(), record),
        )
    })
}

/// Process-wide handles of shared servers, one per settings key, each
/// started (or attached to) once.
pub(crate) struct SharedSlots<S: 'static> {
    slots: Mutex<Vec<(String, &'static OnceLock<S>)>>,
}

impl<S: Send + Sync + 'static> SharedSlots<S> {
    pub(crate) const fn new() -> SharedSlots<S> {
        SharedSlots {
            slots: Mutex::new(Vec::new()),
        }
    }

    /// The handle for `key`, made with `make` on first use.
    pub(crate) fn get(&self, key: &str, make: impl FnOnce() -> S) -> &'static S {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            match slots.iter().find(|(k, _)| k == key) {
                Some((_, slot)) => *slot,
                None => {
                    let slot: &'static OnceLock<S> = Box::leak(Box::new(OnceLock::new()));
                    slots.push((key.to_owned(), slot));
                    slot
                }
            }
        };
        slot.get_or_init(make)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let record = Record {
            pid: Some(42),
            dir: PathBuf::from("/tmp/a b"),
            log: PathBuf::from("/tmp/a b/server.log"),
            label: "zk".to_owned(),
            addrs: vec![
                "127.0.0.1:1".parse().unwrap(),
                "127.0.0.1:2".parse().unwrap(),
            ],
        };
        assert_eq!(Record::parse(&record.to_text()), Some(record.clone()));
        let files = Record {
            pid: None,
            addrs: Vec::new(),
            ..record
        };
        assert_eq!(Record::parse(&files.to_text()), Some(files));
    }

    #[test]
    fn keys_follow_the_settings() {
        assert_eq!(key_of("zk", &(1, "a")), key_of("zk", &(1, "a")));
        assert_ne!(key_of("zk", &(1, "a")), key_of("zk", &(2, "a")));
    }
}
