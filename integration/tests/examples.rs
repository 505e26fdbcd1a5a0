//! The runnable examples (`cargo run --example NAME`), each run once, all at once,
//! against real servers: each exits by itself with status 0 and tells the
//! story it promises. The binaries come from the workspace build
//! (`cargo build --workspace --examples`, which `scripts/test` runs first).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use integration::env::command_without_recipes_env;
use integration::{wait_for, EtcdServer, PgServer, RedisServer, ZkServer};

/// Upper bound (scaled by the harness) for one example's run; the longest
/// runs about 15 s by design.
const RUN_BOUND: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug)]
enum Store {
    Zk,
    Etcd,
    Pg,
    Redis,
}

/// The built example `name`, next to this test's own binary.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo build --workspace --examples` first (scripts/test does)",
        path.display()
    );
    path
}

/// Run example `name` against `store`'s shared server; its stdout.
fn run(name: &str, store: Store) -> String {
    let mut cmd = command_without_recipes_env(example(name));
    match store {
        Store::Zk => cmd.env("RECIPES_ZK", ZkServer::shared().connect_string()),
        Store::Etcd => cmd.env(
            "RECIPES_ETCD",
            EtcdServer::shared().client_addr().to_string(),
        ),
        Store::Pg => cmd.env("RECIPES_PG", PgServer::shared().url()),
        Store::Redis => cmd.env("RECIPES_REDIS", RedisServer::shared().url()),
    };
    let out_path = std::env::temp_dir().join(format!(
        "recipes-example-{name}-{store:?}-{}.out",
        std::process::id()
    ));
    let out = std::fs::File::create(&out_path).unwrap();
    let err = out.try_clone().unwrap();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap();
    let status = wait_for(
        &format!("example {name} ({store:?}) exits"),
        RUN_BOUND,
        || child.try_wait().unwrap(),
    );
    let text = std::fs::read_to_string(&out_path).unwrap();
    let _ = std::fs::remove_file(&out_path);
    assert!(status.success(), "{name} ({store:?}): {status}\n{text}");
    text
}

/// One example's run: its name, its store, and the phrases its output
/// must hold.
struct Story {
    name: &'static str,
    store: Store,
    says: &'static [&'static str],
}

const ACTIVE_PASSIVE: &[&str] = &[
    "ACTIVE now, with fence",
    "write #1 accepted",
    "leaving the election",
];
const CRON_SINGLETON: &[&str] = &[
    ">>> running the job",
    "recorded the run with a fenced write",
    "less than 5s: skip",
];
const FENCED_WRITE: &[&str] = &[
    "resource: REJECTED A's write",
    "store: REJECTED A's write",
    "the stored value is \"written by B\"",
];
const SEMAPHORE_POOL: &[&str] = &["at most 2 workers ran at the same moment (limit 2)"];
const ELECTION_OBSERVE: &[&str] = &[
    "alice: won the election",
    "with value \"alice: step 2\"",
    "with value \"bob: taking over\"",
    "bob: resigned",
];
const CACHE_REBUILD: &[&str] = &[
    "rebuilt the cache to version 2 under the write lock",
    "no writer in between",
    "readers never saw a half-built cache",
];
const TRANSFER: &[&str] = &[
    "50 transfers in opposite directions, no deadlock",
    "the total is still 200",
];

const QUOTA_COUNTER: &[&str] = &[
    "10 of a quota of 10",
    "the counter holds 10 at version 10: never over the quota",
    "the latch opened: all 4 workers counted down",
];

const BARRIER_DEPLOY: &[&str] = &[
    "the barrier is up: 3 instances wait for the migration",
    "all 3 instances went on after the migration",
    "all 3 workers entered together and left together",
];

const GROUP_MEMBERS: &[&str] = &[
    "monitor: joined",
    "a second api-1 is refused",
    "member api-1 at 10.0.0.1:8080",
    "member api-2 at 10.0.0.2:8080",
    "monitor: [\"api-1\"] left; members now [\"api-2\"]",
];

/// Every example on every store it supports.
fn stories() -> Vec<Story> {
    use Store::{Etcd, Pg, Redis, Zk};
    let mut all = vec![
        Story {
            name: "zk_mutex",
            store: Zk,
            says: &["with fence", "releasing"],
        },
        Story {
            name: "pg_fenced_transaction",
            store: Pg,
            says: &[
                "the database REJECTED A's transaction",
                "the ledger says it was written by Some(\"B\")",
            ],
        },
    ];
    for (name, says, stores) in [
        ("active_passive", ACTIVE_PASSIVE, &[Zk, Etcd, Redis][..]),
        ("cron_singleton", CRON_SINGLETON, &[Zk, Etcd, Redis]),
        ("fenced_write", FENCED_WRITE, &[Zk, Etcd, Redis]),
        ("semaphore_pool", SEMAPHORE_POOL, &[Zk, Etcd, Redis]),
        ("election_observe", ELECTION_OBSERVE, &[Zk, Etcd, Redis]),
        ("cache_rebuild", CACHE_REBUILD, &[Zk, Etcd, Pg, Redis]),
        ("transfer", TRANSFER, &[Zk, Etcd, Pg, Redis]),
        ("quota_counter", QUOTA_COUNTER, &[Zk, Etcd, Pg, Redis]),
        ("barrier_deploy", BARRIER_DEPLOY, &[Zk, Etcd, Pg, Redis]),
        ("group_members", GROUP_MEMBERS, &[Zk, Etcd, Pg, Redis]),
    ] {
        all.extend(stores.iter().map(|&store| Story { name, store, says }));
    }
    all
}

/// What is wrong with `story`'s output, if anything.
fn missing(story: &Story, text: &str) -> Option<String> {
    let absent: Vec<_> = story.says.iter().filter(|p| !text.contains(*p)).collect();
    (!absent.is_empty()).then(|| {
        format!(
            "{} ({:?}): expected {absent:?} in:\n{text}",
            story.name, story.store
        )
    })
}

/// Every example runs, all at once (each mostly waits out its own TTLs and
/// intervals, so together they take as long as the longest, about 16 s,
/// where one after another took 140 s of test time); each exits 0 and
/// tells its story. The failures of all of them in one panic.
#[test]
fn every_example_exits_0_and_tells_its_story() {
    // The servers first, so the examples start together.
    let _ = (
        ZkServer::shared(),
        EtcdServer::shared(),
        PgServer::shared(),
        RedisServer::shared(),
    );
    let failures: Vec<String> = std::thread::scope(|s| {
        let runs: Vec<_> = stories()
            .into_iter()
            .map(|story| {
                s.spawn(move || {
                    let outcome = std::panic::catch_unwind(|| run(story.name, story.store));
                    match outcome {
                        Ok(text) => missing(&story, &text),
                        Err(panic) => Some(panic_text(&*panic)),
                    }
                })
            })
            .collect();
        runs.into_iter()
            .filter_map(|run| run.join().expect("a run's thread"))
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
