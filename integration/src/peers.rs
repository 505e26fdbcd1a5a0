//! Interop peers: Apache Curator (Java) and kazoo (Python) clients in their
//! own processes, driven over the [`worker`](crate::worker) line protocol,
//! so tests can check that their recipes and ours share one lock.
//!
//! The programs live in `integration/peers/`; each file's head lists its
//! requests. Both print `READY` once connected and answer every request line
//! with `OK [fields]` or `ERR <message>`; their logs go to a file under the
//! test's folder, quoted in every panic.
//!
//! - [`CuratorPeer`]: `CuratorPeer.java`, compiled once per test process
//!   with `javac -implicit:none` against Debian's Curator 5.4 jars
//!   ([`CURATOR_CLASSPATH`]) into a temp folder.
//! - [`KazooPeer`]: `kazoo_peer.py`, run by Debian's `/usr/bin/python3`,
//!   for which `python3-kazoo` (2.8) is installed — not by another `python3`
//!   earlier on `PATH`.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::test_dir::TestDir;
use crate::worker::Worker;

/// Where Debian installs Java libraries.
const JAVA_SHARE: &str = "/usr/share/java";

/// The jars (in `/usr/share/java`) the Curator peer compiles and runs with:
/// what the JVM actually loads classes from (`java -verbose:class`).
/// Curator's jars name most of them again in their manifests' `Class-Path`;
/// listing them keeps the classpath explicit. Neither netty nor jackson is
/// needed: the ZooKeeper client uses its NIO socket by default. The last
/// one, `slf4j-simple`, sends Curator's and ZooKeeper's logs to stderr,
/// hence to the peer's log file; only javac can do without it.
pub const CURATOR_CLASSPATH: &[&str] = &[
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "guava.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
];

/// The Python that has `python3-kazoo`.
pub const KAZOO_PYTHON: &str = "/usr/bin/python3";

/// The reply timeout (scaled) of the shorthand requests, beyond any wait
/// the request itself asks for.
const QUICK_REQUEST: Duration = Duration::from_secs(10);

/// The folder of the peers' programs (`integration/peers`).
pub fn peers_source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers")
}

fn jars() -> String {
    CURATOR_CLASSPATH
        .iter()
        .map(|jar| format!("{JAVA_SHARE}/{jar}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The folder holding `CuratorPeer.class`, compiled on first use. It lives
/// as long as the test process; a later run's [`TestDir`] sweep removes it.
fn curator_classes() -> &'static Path {
    static CLASSES: OnceLock<TestDir> = OnceLock::new();
    CLASSES
        .get_or_init(|| {
            let dir = TestDir::new("curator-peer-classes");
            javac(&dir, &peers_source_dir().join("CuratorPeer.java"));
            dir
        })
        .path()
}

/// A client of another library in its own process, driven over the
/// [`worker`](crate::worker) line protocol; `K` says which library.
///
/// Dropping it kills the process: its session then expires on the server
/// after the session timeout, unless the test sent [`exit`](Peer::exit).
#[derive(Debug)]
pub struct Peer<K> {
    worker: Worker,
    kind: PhantomData<K>,
}

/// Apache Curator 5.4 in a JVM (`peers/CuratorPeer.java`).
#[derive(Debug)]
pub enum Curator {}

/// kazoo 2.8 in Debian's Python (`peers/kazoo_peer.py`).
#[derive(Debug)]
pub enum Kazoo {}

/// An Apache Curator 5.4 client in a JVM: `InterProcessMutex`,
/// `InterProcessReadWriteLock`, `LeaderLatch` and `LeaderSelector` on
/// request.
///
/// Requests (see `peers/CuratorPeer.java`): `lock <path> [wait_ms]` →
/// `acquired` | `timeout`, `release`, `rwlock <path> read|write [wait_ms]`
/// → `acquired` | `timeout`, `rwrelease read|write`, `latch <path> <id>`, `is-leader`,
/// `await-leader <ms>` → `yes` | `no`, `close-latch`,
/// `selector <path> <id>`, `is-leading` → `yes` | `no`, `resign`,
/// `close-selector`, `children <path>`, `exit`.
///
/// A JVM takes about a second to start; a test should start at most two.
pub type CuratorPeer = Peer<Curator>;

/// A kazoo 2.8 client in a Python process: its `Lock`, plain or made with
/// `extra_lock_patterns=["-lock-"]` so that it also queues behind Curator's
/// (and our) `_c_<uuid>-lock-<seq>` nodes.
///
/// Requests (see `peers/kazoo_peer.py`): `lock <path> [wait_ms]` and
/// `lock-curator-aware <path> [wait_ms]` → `acquired` | `timeout`,
/// `release`, `children <path>`, `exit`.
pub type KazooPeer = Peer<Kazoo>;

impl Peer<Curator> {
    /// Compile the peer (once per process), start a JVM named `name`
    /// (messages, and its log `curator-<name>.log` under `log_dir`), connect
    /// it to `connect` with `session_timeout`, and wait until it is ready.
    ///
    /// # Panics
    ///
    /// When javac or java fails, or the peer does not connect in time.
    pub fn start(name: &str, connect: &str, session_timeout: Duration, log_dir: &Path) -> Self {
        let classes = curator_classes();
        let mut cmd = Command::new("java");
        // Client JVM settings for a fast start; timestamps make the log
        // comparable with the server's.
        cmd.args([
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-Xshare:auto",
        ])
        .arg("-Dorg.slf4j.simpleLogger.showDateTime=true")
        .arg("-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS")
        .arg("-cp")
        .arg(format!("{}:{}", classes.display(), jars()))
        .arg("CuratorPeer")
        .arg(connect)
        .arg(session_timeout.as_millis().to_string());
        let log = log_dir.join(format!("curator-{name}.log"));
        Peer::new(Worker::spawn(&format!("curator-{name}"), cmd, log))
    }
}

impl Peer<Kazoo> {
    /// Start a kazoo client named `name` (messages, and its log
    /// `kazoo-<name>.log` under `log_dir`), connected to `connect` with
    /// `session_timeout`, and wait until it is ready.
    ///
    /// # Panics
    ///
    /// When Debian's python3 or its kazoo is missing, or the peer does not
    /// connect in time.
    pub fn start(name: &str, connect: &str, session_timeout: Duration, log_dir: &Path) -> Self {
        let mut cmd = Command::new(KAZOO_PYTHON);
        cmd.arg("-u")
            .arg(peers_source_dir().join("kazoo_peer.py"))
            .arg(connect)
            .arg(session_timeout.as_millis().to_string())
            .env("PYTHONDONTWRITEBYTECODE", "1");
        let log = log_dir.join(format!("kazoo-{name}.log"));
        Peer::new(Worker::spawn(&format!("kazoo-{name}"), cmd, log))
    }

    /// `lock-curator-aware <path> <wait>`: a kazoo `Lock` made with
    /// `extra_lock_patterns=["-lock-"]`. `true` if acquired, `false` if the
    /// wait timed out.
    ///
    /// # Panics
    ///
    /// On an `ERR` reply or any other answer.
    pub fn lock_curator_aware_for(&mut self, path: &str, wait: Duration) -> bool {
        self.lock_request("lock-curator-aware", path, wait)
    }
}

impl<K> Peer<K> {
    fn new(worker: Worker) -> Self {
        Peer {
            worker,
            kind: PhantomData,
        }
    }

    /// Send `request` and wait up to `timeout` (scaled) for its reply:
    /// `Ok(fields)` for `OK fields`, `Err(message)` for `ERR message`.
    ///
    /// # Panics
    ///
    /// When no reply comes in time or the process is gone; the message
    /// quotes the peer's log.
    pub fn request(&mut self, request: &str, timeout: Duration) -> Result<String, String> {
        self.worker.request(request, timeout)
    }

    /// Like [`request`](Self::request), panicking on an `ERR` reply.
    pub fn ok(&mut self, request: &str, timeout: Duration) -> String {
        self.worker.ok(request, timeout)
    }

    /// `lock <path> <wait>`: `true` if acquired, `false` if the wait timed
    /// out. The reply may take the wait plus 10 s (scaled).
    ///
    /// # Panics
    ///
    /// On an `ERR` reply or any other answer.
    pub fn lock_for(&mut self, path: &str, wait: Duration) -> bool {
        self.lock_request("lock", path, wait)
    }

    fn lock_request(&mut self, op: &str, path: &str, wait: Duration) -> bool {
        let request = format!("{op} {path} {}", wait.as_millis());
        match self.ok(&request, wait + QUICK_REQUEST).as_str() {
            "acquired" => true,
            "timeout" => false,
            other => panic!("{request:?} answered {other:?}{}", self.log_tail()),
        }
    }

    /// `release` the held lock.
    ///
    /// # Panics
    ///
    /// On an `ERR` reply (nothing held, or the release failed).
    pub fn release(&mut self) {
        self.ok("release", QUICK_REQUEST);
    }

    /// The children of `path`, sorted, as the peer's client sees them.
    ///
    /// # Panics
    ///
    /// On an `ERR` reply (say, `path` does not exist).
    pub fn children(&mut self, path: &str) -> Vec<String> {
        let reply = self.ok(&format!("children {path}"), QUICK_REQUEST);
        reply
            .split(',')
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// Close the peer's recipes and session (`exit`), so that its nodes go
    /// now rather than at session expiry, and reap the process.
    ///
    /// # Panics
    ///
    /// On an `ERR` reply.
    pub fn exit(mut self) {
        self.ok("exit", QUICK_REQUEST);
        self.worker.kill();
    }

    /// The last lines of the peer's log, for panic messages.
    pub fn log_tail(&self) -> String {
        self.worker.log_tail()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.worker.pid()
    }

    /// SIGSTOP the process and wait until all its threads stand still.
    pub fn pause(&self) {
        self.worker.pause();
    }

    /// SIGCONT a paused process and wait until it runs.
    pub fn resume(&self) {
        self.worker.resume();
    }

    /// SIGKILL the process and reap it; its session expires later.
    pub fn kill(&mut self) {
        self.worker.kill();
    }
}

/// The one-shot Curator program `peers/<class>.java` (one request per
/// run, given as arguments after the connect string; its answer on
/// stdout), compiled into `dir`: the `java` command that runs it against
/// `connect`.
///
/// # Panics
///
/// When javac fails.
pub fn curator_program(dir: &TestDir, class: &str, connect: &str) -> Command {
    let classpath = curator_classpath(dir, class);
    let mut java = Command::new("java");
    java.args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp"])
        .arg(classpath)
        .arg(class)
        .arg(connect);
    java
}

/// The Curator program `peers/<class>.java`, compiled into `dir`: the
/// classpath that runs it (`dir` and the Curator jars), for a `java`
/// command of the caller's own (the bench's peers run with the JVM's full
/// compiler, not the quick start of [`curator_program`]).
///
/// # Panics
///
/// When javac fails.
pub fn curator_classpath(dir: &TestDir, class: &str) -> String {
    javac(dir, &peers_source_dir().join(format!("{class}.java")));
    format!("{}:{}", dir.path().display(), jars())
}

/// Run a one-shot peer's `cmd` to its end: its `OK …` line.
///
/// # Panics
///
/// When it fails or answers anything else; the message quotes its stderr.
pub fn one_shot_reply(mut cmd: Command) -> String {
    let out = cmd.output().expect("start the peer");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        out.status.success() && stdout.starts_with("OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Compile `source` against the Curator jars into `dir`.
fn javac(dir: &TestDir, source: &Path) {
    // javac's own JVM with C1 only and the serial GC: 1 s, not 2.
    let output = Command::new("javac")
        .args(["-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC"])
        .args(["-implicit:none", "-d"])
        .arg(dir.path())
        .args(["-cp", &jars()])
        .arg(source)
        .output()
        .unwrap_or_else(|e| panic!("cannot run javac (Debian's openjdk-17-jdk): {e}"));
    assert!(
        output.status.success(),
        "javac {} failed ({}):\n{}{}",
        source.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
