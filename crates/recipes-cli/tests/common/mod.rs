//! Helpers shared by the `recipes` binary's test files: the store under
//! test, a scratch scene per test, starting and watching `recipes`.

#![allow(dead_code)]

use std::fs;
use std::io::Read as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use integration::env::command_without_recipes_env;
use integration::{
    wait_for, wait_until, EtcdServer, PgFacts, PgServer, Proxy, RedisServer, ZkServer,
};

pub mod doctor;

pub const BIN: &str = env!("CARGO_BIN_EXE_recipes");

/// Upper bound (scaled by the harness) for a `recipes` run that should end.
pub const RUN_BOUND: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug)]
pub enum Store {
    Zk,
    Etcd,
    Pg,
    /// PostgreSQL with `--pg-mode session` (advisory locks).
    PgSession,
    Redis,
}

impl Store {
    /// The store's flags: the backend's and, for session mode, the mode.
    pub fn flag(self) -> Vec<String> {
        let flags: &[&str] = match self {
            Store::Zk => &["--zk", &ZkServer::shared().connect_string()],
            Store::Etcd => &["--etcd", &EtcdServer::shared().endpoint()],
            Store::Pg => &["--pg", &PgServer::shared().url()],
            Store::PgSession => &["--pg", &PgServer::shared().url(), "--pg-mode", "session"],
            Store::Redis => &["--redis", &RedisServer::shared().url()],
        };
        flags.iter().map(|f| (*f).to_owned()).collect()
    }

    /// The shared server's client address.
    pub fn addr(self) -> SocketAddr {
        match self {
            Store::Zk => ZkServer::shared().client_addr(),
            Store::Etcd => EtcdServer::shared().client_addr(),
            Store::Pg | Store::PgSession => PgServer::shared().addr(),
            Store::Redis => RedisServer::shared().addr(),
        }
    }

    /// The backend flag for a client that reaches the server through
    /// `proxy`.
    pub fn flag_via(self, proxy: &Proxy) -> Vec<String> {
        let pg = format!("postgres://postgres@{}/recipes", proxy.addr());
        let flags: &[&str] = match self {
            Store::Zk => &["--zk", &proxy.addr().to_string()],
            Store::Etcd => &["--etcd", &format!("http://{}", proxy.addr())],
            Store::Pg => &["--pg", &pg],
            Store::PgSession => &["--pg", &pg, "--pg-mode", "session"],
            Store::Redis => &["--redis", &format!("redis://{}", proxy.addr())],
        };
        flags.iter().map(|f| (*f).to_owned()).collect()
    }

    /// Delete `holder` (node path or key) as an operator would by hand:
    /// its holder's loss signal fires.
    pub fn delete(self, holder: &str) {
        match self {
            Store::Zk => ZkServer::shared().facts().delete(holder),
            Store::Etcd => EtcdServer::shared().facts().delete(holder),
            Store::Pg => PgFacts::new(PgServer::shared().addr()).delete(holder),
            Store::PgSession => panic!("session mode's holders are advisory locks, not rows"),
            Store::Redis => {
                let (queue, member) = redis_holder(holder);
                let server = RedisServer::shared();
                let _: i64 = server.cmd(&["ZREM", &format!("{{recipes}}:q:{queue}"), member]);
                let lock = format!("{{recipes}}:lock:{queue}");
                if server.cmd::<Option<String>>(&["GET", &lock]).as_deref() == Some(member) {
                    let _: i64 = server.cmd(&["DEL", &lock]);
                }
            }
        }
    }

    /// Wait until the store no longer has `holder` (node path or key).
    pub fn wait_gone(self, holder: &str) {
        match self {
            Store::Zk => ZkServer::shared()
                .facts()
                .wait_gone(holder, Duration::from_secs(20)),
            Store::Etcd => EtcdServer::shared()
                .facts()
                .wait_gone(holder, Duration::from_secs(20)),
            Store::PgSession => panic!("session mode's holders are advisory locks, not rows"),
            Store::Pg => {
                let facts = PgFacts::new(PgServer::shared().addr());
                let bound = integration::scale(Duration::from_secs(20));
                integration::wait_until("the holder's row is gone", bound, || {
                    !facts.exists(holder)
                });
            }
            // Gone once its session expired and it holds nothing: its keys
            // are swept by the renewal of a live client (one lives here,
            // renewing every 333 ms), or the next connect.
            Store::Redis => {
                let server = RedisServer::shared();
                let live = recipes_redis::RedisClient::builder(server.url())
                    .ttl(Duration::from_secs(1))
                    .connect()
                    .expect("a live client");
                wait_until("the holder is gone", Duration::from_secs(20), || {
                    let (queue, member) = redis_holder(holder);
                    let session = member.split('-').next().unwrap_or_default();
                    let alive: bool = server.cmd(&["EXISTS", &format!("{{recipes}}:s:{session}")]);
                    let lock = format!("{{recipes}}:lock:{queue}");
                    let held =
                        server.cmd::<Option<String>>(&["GET", &lock]).as_deref() == Some(member);
                    !alive && !held
                });
                let _ = recipes_core::Client::close(live);
            }
        }
    }
}

/// A Redis holder `<queue>/<member>`, split.
fn redis_holder(holder: &str) -> (&str, &str) {
    holder
        .rsplit_once('/')
        .expect("a Redis holder is <queue>/<member>")
}

/// A fresh name and scratch folder per test.
pub struct Scene {
    pub name: String,
    pub dir: PathBuf,
}

impl Scene {
    pub fn new(test: &str) -> Scene {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("recipes-cli-{pid}-{test}-{n}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scene {
            name: format!("/cli-tests/{test}-{pid}-{n}"),
            dir,
        }
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `recipes` with no `RECIPES_*` from the test's own environment.
pub fn recipes() -> Command {
    let mut cmd = command_without_recipes_env(BIN);
    cmd.stdin(Stdio::null());
    cmd
}

pub fn with_store(store: Store, ttl: &str) -> Command {
    let mut cmd = recipes();
    cmd.args(store.flag()).args(["--ttl", ttl]);
    cmd
}

/// Run to completion; status and stderr.
pub fn run(cmd: &mut Command) -> (ExitStatus, String) {
    let out = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn code(cmd: &mut Command) -> i32 {
    let (status, stderr) = run(cmd);
    status
        .code()
        .unwrap_or_else(|| panic!("recipes died by a signal: {status:?}; stderr: {stderr}"))
}

pub fn read_when_written(path: &Path) -> String {
    wait_for(&format!("{} is written", path.display()), RUN_BOUND, || {
        fs::read_to_string(path).ok().filter(|s| s.ends_with('\n'))
    })
}

pub fn wait_exit(child: &mut Child) -> ExitStatus {
    wait_for("recipes exits", RUN_BOUND, || child.try_wait().unwrap())
}

/// A process is gone: no /proc entry, or a zombie nobody reaped yet.
pub fn process_gone(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

pub fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill has no memory preconditions.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

/// Start `recipes lock` holding NAME with a CMD that writes its pid and
/// holder to `ready` and then runs `sleep 30`. Returns the child and what
/// CMD wrote (`pid holder fence`).
pub fn hold(store: Store, ttl: &str, scene: &Scene, extra: &[&str]) -> (Child, Vec<String>) {
    let mut sub = vec!["lock", scene.name.as_str()];
    sub.extend_from_slice(extra);
    start_holder(with_store(store, ttl), &sub, scene, "exec sleep 30")
}

/// Start `base` with the subcommand `sub` and a CMD that writes its pid,
/// holder and fence to `ready`, then runs the shell code `then`. Returns
/// the child (stderr piped) and what CMD wrote.
pub fn start_holder(
    mut base: Command,
    sub: &[&str],
    scene: &Scene,
    then: &str,
) -> (Child, Vec<String>) {
    let ready = scene.file("ready");
    let script = format!(
        "echo \"$$ $RECIPES_HOLDER $RECIPES_FENCE\" > {}.tmp && mv {0}.tmp {0} && {then}",
        ready.display()
    );
    let child = base
        .args(sub)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let line = read_when_written(&ready);
    (child, line.split_whitespace().map(str::to_owned).collect())
}

/// Everything the exited `child` wrote to its piped stderr.
pub fn stderr_of(child: &mut Child) -> String {
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr).unwrap();
    }
    stderr
}

/// `recipes` with lease `ttl` on `store`, reached through `proxy`.
pub fn through(proxy: &Proxy, store: Store, ttl: &str) -> Command {
    let mut cmd = recipes();
    cmd.args(store.flag_via(proxy)).args(["--ttl", ttl]);
    cmd
}

/// stdout of a `recipes` run on `store` that must exit 0, trimmed.
pub fn stdout_ok(store: Store, args: &[&str]) -> String {
    let out = recipes()
        .args(store.flag())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "recipes {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Kills what a failed test left running (a writer that would run on for
/// ever); does nothing when the test passed.
pub struct KillOnPanic(pub Vec<u32>);

impl Drop for KillOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for &pid in &self.0 {
                // SAFETY: kill has no memory preconditions.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGKILL);
                }
            }
        }
    }
}
