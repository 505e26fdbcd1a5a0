//! Tests of the harness itself, against real servers: standalone servers
//! start, answer and stop; they outlive the thread that started them; an
//! aborted run leaves no server; the facts (watch tables, children, lease
//! TTLs) read what the servers say. (Faults: `harness_faults.rs`.)
//!
//! The tests share one ZooKeeper and one etcd per process and use their own
//! paths and keys.

mod harness_common;

use harness_common::*;

use std::path::Path;
use std::time::{Duration, Instant};

use etcd_client::{ConnectOptions, PutOptions};
use integration::runtime::{block_on, runtime};
use integration::{wait_for_with, wait_until_with, EtcdServer, ExpectOrLogs, ZkMode, ZkServer};

#[test]
fn zk_standalone_starts_answers_and_stops() {
    let started = Instant::now();
    let server = ZkServer::start();
    eprintln!("ZooKeeper standalone serving after {:?}", started.elapsed());
    assert_eq!(
        server.mode(),
        Some(ZkMode::Standalone),
        "{}",
        server.log_tail()
    );
    assert!(
        server.four_letter("ruok").contains("imok"),
        "{}",
        server.log_tail()
    );
    let facts = server.facts();
    assert!(facts.exists("/zookeeper"));
    assert!(!facts.exists("/nothing-here"));
    drop(facts);
    let pid = server
        .pid()
        .expect_or_logs("pid of a started server", &server.logs());
    let dir = server.dir().to_owned();
    drop(server);
    assert_process_gone(pid);
    assert!(!dir.exists(), "{} outlived its server", dir.display());
}

#[test]
fn etcd_standalone_starts_answers_and_stops() {
    let started = Instant::now();
    let server = EtcdServer::start();
    eprintln!("etcd standalone healthy after {:?}", started.elapsed());
    let logs = server.logs();
    let status = server
        .status()
        .expect_or_logs("status of a healthy server", &logs);
    assert_eq!(
        status.leader, status.member_id,
        "a one-member cluster leads itself"
    );
    let mut client = etcd_connect(&server.endpoints(), ConnectOptions::new(), &logs);
    block_on(client.put("/harness/standalone", "v", None)).expect_or_logs("put", &logs);
    assert_eq!(
        server.facts().get("/harness/standalone").as_deref(),
        Some(&b"v"[..])
    );
    let pid = server
        .pid()
        .expect_or_logs("pid of a started server", &logs);
    let dir = server.dir().to_owned();
    drop(server);
    assert_process_gone(pid);
    assert!(!dir.exists(), "{} outlived its server", dir.display());
}

#[test]
fn servers_outlive_the_thread_that_started_them() {
    // PR_SET_PDEATHSIG fires when the forking *thread* exits; the harness
    // forks from its spawner thread, so a server survives its test thread.
    let server = std::thread::spawn(EtcdServer::start)
        .join()
        .expect("start thread");
    // An observation window, not synchronization: the signal would have
    // killed the server right away.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        server.pid().is_some(),
        "server died with its starting thread\n{}",
        server.log_tail()
    );
    assert!(server.is_healthy(), "{}", server.log_tail());
}

const CHILD_ENV: &str = "RECIPES_HARNESS_ABORT_CHILD";

/// Run by `aborted_run_leaves_no_server` in a child process only.
#[test]
#[ignore = "helper: run by aborted_run_leaves_no_server in a child process"]
fn child_starts_a_server_and_aborts() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let server = EtcdServer::start();
    println!(
        "SERVER_PID={}",
        server.pid().expect_or_logs("pid", &server.logs())
    );
    std::process::abort();
}

#[test]
fn aborted_run_leaves_no_server() {
    let output = std::process::Command::new(std::env::current_exe().expect("test binary path"))
        .args([
            "--exact",
            "child_starts_a_server_and_aborts",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run the child test process");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let pid: u32 = stdout
        .lines()
        .find_map(|line| line.split("SERVER_PID=").nth(1)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("child printed no SERVER_PID:\n{stdout}\n{stderr}"));
    assert!(
        !output.status.success(),
        "the child should have aborted:\n{stdout}\n{stderr}"
    );
    wait_until_with(
        &format!("server {pid} of the aborted run is gone"),
        Duration::from_secs(5),
        // The killed server of a dead parent is reaped by init.
        || !Path::new(&format!("/proc/{pid}")).exists(),
        || format!("child output:\n{stdout}\n{stderr}"),
    );
}

#[test]
fn zk_watch_tables_list_watching_sessions() {
    let _rt = runtime().enter();
    let server = ZkServer::shared();
    let logs = server.logs();
    let client = zk_connect(&server.connect_string(), Duration::from_secs(10), &logs);
    let session = client.session_id().0;
    let (_stat, watcher) = block_on(client.check_and_watch_stat("/watched-by-harness"))
        .expect_or_logs("exists watch", &logs);
    let by_path = wait_for_with(
        "wchp lists the watch",
        Duration::from_secs(5),
        || {
            let table = server.watches_by_path();
            table.contains_key("/watched-by-harness").then_some(table)
        },
        || logs.tail(),
    );
    assert!(
        by_path["/watched-by-harness"].contains(&session),
        "wchp: {by_path:?}"
    );
    let by_session = server.watches_by_session();
    assert!(
        by_session[&session].contains(&"/watched-by-harness".to_owned()),
        "wchc: {by_session:?}"
    );
    drop(watcher);
}

#[test]
fn zk_facts_children_and_waits() {
    let _rt = runtime().enter();
    let server = ZkServer::shared();
    let logs = server.logs();
    let client = zk_connect(&server.connect_string(), Duration::from_secs(10), &logs);
    let facts = server.facts();
    assert!(facts.children("/facts-parent").is_empty());
    for path in ["/facts-parent", "/facts-parent/b", "/facts-parent/a"] {
        assert!(
            zk_create_ok(&client, path, Duration::from_secs(5)),
            "create {path}\n{}",
            logs.tail()
        );
    }
    let children = facts.wait_children("/facts-parent", "has two", Duration::from_secs(5), |c| {
        c.len() == 2
    });
    assert_eq!(children, ["a", "b"]);
    block_on(client.delete("/facts-parent/a", None)).expect_or_logs("delete", &logs);
    facts.wait_gone("/facts-parent/a", Duration::from_secs(5));
    assert_eq!(facts.data("/facts-parent/b").as_deref(), Some(&b"x"[..]));
    assert_eq!(facts.ephemeral_owner("/facts-parent/b"), Some(0));
}

#[test]
fn etcd_lease_time_to_live_is_minus_one_when_gone() {
    let server = EtcdServer::shared();
    let logs = server.logs();
    let mut client = etcd_connect(&server.endpoints(), ConnectOptions::new(), &logs);
    let facts = server.facts();
    let lease = block_on(client.lease_grant(30, None))
        .expect_or_logs("grant", &logs)
        .id();
    let with_lease = Some(PutOptions::new().with_lease(lease));
    block_on(client.put("/harness/lease/a", "v", with_lease)).expect_or_logs("put", &logs);
    let ttl = facts.lease_time_to_live(lease);
    assert!((1..=30).contains(&ttl), "ttl {ttl}");
    assert_eq!(
        facts.keys_with_prefix("/harness/lease/"),
        ["/harness/lease/a"]
    );
    block_on(client.lease_revoke(lease)).expect_or_logs("revoke", &logs);
    assert_eq!(facts.lease_time_to_live(lease), -1);
    facts.wait_gone("/harness/lease/a", Duration::from_secs(5));

    // Expiry, with the smallest TTL the server grants.
    let min_ttl = server.config().min_lease_ttl().as_secs() as i64;
    let short = block_on(client.lease_grant(min_ttl, None)).expect_or_logs("grant", &logs);
    assert_eq!(short.ttl(), min_ttl, "granted TTL");
    let started = Instant::now();
    facts.wait_lease_gone(short.id(), Duration::from_secs(10));
    eprintln!("a {min_ttl} s lease was gone after {:?}", started.elapsed());
}
