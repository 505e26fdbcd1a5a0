//! Tests of the harness itself, against real servers.
//!
//! Fault tests (named `fault_*`, run serially by nextest) kill, pause,
//! restart or partition their own servers; the others share one ZooKeeper
//! and one etcd per process and use their own paths/keys.

use std::path::Path;
use std::time::{Duration, Instant};

use etcd_client::{Client as EtcdClient, ConnectOptions, PutOptions};
use integration::runtime::{block_on, block_on_timeout, runtime};
use integration::{
    scale, wait_for_with, wait_until_with, EtcdCluster, EtcdServer, ExpectOrLogs, Proxy, ProxyMode,
    ServerLogs, ZkCluster, ZkMode, ZkServer,
};
use zookeeper_client as zk;

const OPEN_ACL: zk::CreateOptions<'static> =
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());

fn zk_connect(connect_string: &str, session_timeout: Duration, logs: &ServerLogs) -> zk::Client {
    let connector = zk::Client::connector().with_session_timeout(session_timeout);
    block_on_timeout(
        scale(Duration::from_secs(10)),
        connector.connect(connect_string),
    )
    .expect_or_logs(
        &format!("a ZooKeeper session with {connect_string} in 10 s"),
        logs,
    )
    .expect_or_logs(&format!("connect to {connect_string}"), logs)
}

fn etcd_connect(endpoints: &[String], options: ConnectOptions, logs: &ServerLogs) -> EtcdClient {
    block_on_timeout(
        scale(Duration::from_secs(10)),
        EtcdClient::connect(endpoints, Some(options)),
    )
    .expect_or_logs(
        &format!("an etcd connection to {endpoints:?} in 10 s"),
        logs,
    )
    .expect_or_logs(&format!("connect to {endpoints:?}"), logs)
}

fn assert_process_gone(pid: u32) {
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "process {pid} outlived its handle"
    );
}

/// Creates `path`; a `NodeExists` after a retried create counts as success.
fn zk_create_ok(client: &zk::Client, path: &str, limit: Duration) -> bool {
    matches!(
        block_on_timeout(limit, client.create(path, b"x", &OPEN_ACL)),
        Some(Ok(_)) | Some(Err(zk::Error::NodeExists))
    )
}

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
fn fault_zk_cluster_keeps_serving_writes_after_leader_kill() {
    let _rt = runtime().enter();
    let started = Instant::now();
    let cluster = ZkCluster::start();
    eprintln!("ZooKeeper ensemble serving after {:?}", started.elapsed());
    let logs = cluster.logs();
    let leader = cluster.wait_serving(Duration::from_secs(10));
    assert_eq!(cluster.leader_index(), Some(leader), "{}", logs.tail());
    let client = zk_connect(&cluster.connect_string(), Duration::from_secs(10), &logs);
    assert!(
        zk_create_ok(&client, "/before-kill", scale(Duration::from_secs(5))),
        "{}",
        logs.tail()
    );
    let pids: Vec<u32> = cluster.members().iter().filter_map(ZkServer::pid).collect();
    assert_eq!(pids.len(), 3, "{}", logs.tail());

    let killed = Instant::now();
    cluster.member(leader).kill();
    wait_until_with(
        "a write succeeds after the leader kill",
        Duration::from_secs(20),
        || zk_create_ok(&client, "/after-kill", Duration::from_secs(2)),
        || logs.tail(),
    );
    eprintln!(
        "ZooKeeper write after leader kill took {:?}",
        killed.elapsed()
    );
    let new_leader = cluster.wait_serving(Duration::from_secs(20));
    assert_ne!(new_leader, leader);
    let facts = cluster.facts();
    assert!(
        facts.exists("/before-kill") && facts.exists("/after-kill"),
        "{}",
        logs.tail()
    );
    drop((facts, client));
    drop(cluster);
    pids.into_iter().for_each(assert_process_gone);
}

#[test]
fn fault_etcd_cluster_keeps_serving_writes_after_leader_kill() {
    let started = Instant::now();
    let cluster = EtcdCluster::start();
    eprintln!("etcd cluster serving after {:?}", started.elapsed());
    let logs = cluster.logs();
    let leader = cluster.wait_serving(Duration::from_secs(10));
    assert_eq!(cluster.leader_index(), Some(leader), "{}", logs.tail());
    let options = ConnectOptions::new()
        .with_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2));
    let client = etcd_connect(&cluster.endpoints(), options, &logs);
    let put = |key: &'static str| {
        let mut client = client.clone();
        matches!(
            block_on_timeout(Duration::from_secs(2), client.put(key, "v", None)),
            Some(Ok(_))
        )
    };
    assert!(put("/harness/before-kill"), "{}", logs.tail());
    let pids: Vec<u32> = cluster
        .members()
        .iter()
        .filter_map(EtcdServer::pid)
        .collect();
    assert_eq!(pids.len(), 3, "{}", logs.tail());

    let killed = Instant::now();
    cluster.member(leader).kill();
    wait_until_with(
        "a write succeeds after the leader kill",
        Duration::from_secs(20),
        || put("/harness/after-kill"),
        || logs.tail(),
    );
    eprintln!("etcd write after leader kill took {:?}", killed.elapsed());
    let new_leader = cluster.wait_serving(Duration::from_secs(20));
    assert_ne!(new_leader, leader);
    let facts = cluster.member(new_leader).facts();
    assert!(
        facts.exists("/harness/before-kill") && facts.exists("/harness/after-kill"),
        "{}",
        logs.tail()
    );
    drop((facts, client));
    drop(cluster);
    pids.into_iter().for_each(assert_process_gone);
}

#[test]
fn fault_zk_pause_stops_answers_until_resume() {
    let server = ZkServer::start();
    server.pause();
    // A lower bound, not scaled: no answer for 300 ms.
    let answer = server.try_four_letter("srvr", Duration::from_millis(300));
    assert!(
        answer.is_err(),
        "a paused server answered {answer:?}\n{}",
        server.log_tail()
    );
    assert!(!server.is_serving(), "{}", server.log_tail());
    server.resume();
    server.wait_serving(Duration::from_secs(5));
}

#[test]
fn fault_etcd_pause_stops_answers_until_resume() {
    let server = EtcdServer::start();
    server.pause();
    assert!(
        !server.is_healthy(),
        "a paused server answered /health\n{}",
        server.log_tail()
    );
    assert!(
        server.status().is_none(),
        "a paused server answered status\n{}",
        server.log_tail()
    );
    server.resume();
    server.wait_healthy(Duration::from_secs(5));
}

#[test]
fn fault_zk_restart_keeps_data() {
    let _rt = runtime().enter();
    let server = ZkServer::start();
    let logs = server.logs();
    let client = zk_connect(&server.connect_string(), Duration::from_secs(10), &logs);
    assert!(
        zk_create_ok(&client, "/kept", Duration::from_secs(5)),
        "{}",
        logs.tail()
    );
    drop(client);
    let (old_pid, addr) = (server.pid(), server.client_addr());
    server.restart();
    assert_ne!(server.pid(), old_pid);
    assert_eq!(server.client_addr(), addr);
    assert!(server.facts().exists("/kept"), "{}", logs.tail());
    // Also after a kill and a later restart.
    server.kill();
    assert!(
        server.pid().is_none() && !server.is_serving(),
        "{}",
        logs.tail()
    );
    server.restart();
    assert!(server.facts().exists("/kept"), "{}", logs.tail());
}

#[test]
fn fault_etcd_restart_keeps_data() {
    let server = EtcdServer::start();
    let logs = server.logs();
    let mut client = etcd_connect(&server.endpoints(), ConnectOptions::new(), &logs);
    block_on(client.put("/harness/kept", "v", None)).expect_or_logs("put", &logs);
    drop(client);
    let old_pid = server.pid();
    server.restart();
    assert_ne!(server.pid(), old_pid);
    assert_eq!(
        server.facts().get("/harness/kept").as_deref(),
        Some(&b"v"[..]),
        "{}",
        logs.tail()
    );
}

#[test]
fn fault_zk_blackhole_times_out_requests_and_restore_recovers() {
    let _rt = runtime().enter();
    let server = ZkServer::start();
    let logs = server.logs();
    let proxy = Proxy::start(server.client_addr());
    let client = zk_connect(&proxy.addr().to_string(), Duration::from_secs(6), &logs);
    assert!(
        zk_create_ok(&client, "/blackhole-zk", Duration::from_secs(5)),
        "{}",
        logs.tail()
    );

    proxy.blackhole();
    assert_eq!(proxy.mode(), ProxyMode::Blackhole);
    // A lower bound, not scaled: no answer for 500 ms.
    let answer = block_on_timeout(
        Duration::from_millis(500),
        client.check_stat("/blackhole-zk"),
    );
    assert!(
        answer.is_none(),
        "a black-holed request was answered: {answer:?}"
    );

    proxy.restore();
    wait_until_with(
        "the client works again after restore",
        Duration::from_secs(10),
        || {
            matches!(
                block_on_timeout(Duration::from_secs(1), client.check_stat("/blackhole-zk")),
                Some(Ok(Some(_)))
            )
        },
        || logs.tail(),
    );
}

#[test]
fn fault_etcd_blackhole_times_out_requests_and_restore_recovers() {
    let server = EtcdServer::start();
    let logs = server.logs();
    let proxy = Proxy::start(server.client_addr());
    let options =
        ConnectOptions::new().with_keep_alive(Duration::from_secs(1), Duration::from_secs(2));
    let client = etcd_connect(&[format!("http://{}", proxy.addr())], options, &logs);
    let get = |limit| {
        let mut client = client.clone();
        block_on_timeout(limit, async move {
            client.get("/harness/blackhole", None).await.map(|_| ())
        })
    };
    get(scale(Duration::from_secs(5)))
        .expect_or_logs("a get in time", &logs)
        .expect_or_logs("get", &logs);

    proxy.blackhole();
    let answer = get(Duration::from_millis(500));
    assert!(
        answer.is_none(),
        "a black-holed request was answered: {answer:?}"
    );

    proxy.restore();
    wait_until_with(
        "the client works again after restore",
        Duration::from_secs(10),
        || matches!(get(Duration::from_secs(1)), Some(Ok(()))),
        || logs.tail(),
    );
}

#[test]
fn fault_zk_freeze_replies_holds_the_reply_until_restore() {
    let _rt = runtime().enter();
    let server = ZkServer::start();
    let logs = server.logs();
    let proxy = Proxy::start(server.client_addr());
    let client = zk_connect(&proxy.addr().to_string(), Duration::from_secs(10), &logs);
    let facts = server.facts();

    proxy.freeze_replies();
    let create = runtime().spawn(async move {
        let result = client
            .create("/frozen-zk", b"x", &OPEN_ACL)
            .await
            .map(|_| ());
        (result, client)
    });
    // The request reached the server ...
    facts.wait_exists("/frozen-zk", Duration::from_secs(5));
    // ... and the reply stays held (a lower bound: not scaled).
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !create.is_finished(),
        "the client got a reply through a frozen proxy"
    );

    proxy.restore();
    let (result, client) = block_on_timeout(scale(Duration::from_secs(5)), create)
        .expect_or_logs("the held reply arrives after restore", &logs)
        .expect_or_logs("create task", &logs);
    result.expect_or_logs("create", &logs);
    drop(client);
}

#[test]
fn fault_etcd_freeze_replies_holds_the_reply_until_restore() {
    let server = EtcdServer::start();
    let logs = server.logs();
    let proxy = Proxy::start(server.client_addr());
    let mut client = etcd_connect(
        &[format!("http://{}", proxy.addr())],
        ConnectOptions::new(),
        &logs,
    );
    block_on(client.get("/harness/frozen", None)).expect_or_logs("a first request connects", &logs);
    let facts = server.facts();

    proxy.freeze_replies();
    let put =
        runtime().spawn(async move { client.put("/harness/frozen", "v", None).await.map(|_| ()) });
    facts.wait_exists("/harness/frozen", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !put.is_finished(),
        "the client got a reply through a frozen proxy"
    );

    proxy.restore();
    block_on_timeout(scale(Duration::from_secs(5)), put)
        .expect_or_logs("the held reply arrives after restore", &logs)
        .expect_or_logs("put task", &logs)
        .expect_or_logs("put", &logs);
}

#[test]
fn fault_zk_drop_connections_forces_a_reconnect() {
    let _rt = runtime().enter();
    let server = ZkServer::start();
    let logs = server.logs();
    let proxy = Proxy::start(server.client_addr());
    let client = zk_connect(&proxy.addr().to_string(), Duration::from_secs(10), &logs);
    let session = client.session_id();
    assert_eq!((proxy.connection_count(), proxy.accepted_count()), (1, 1));

    proxy.drop_connections();
    wait_until_with(
        "the client reconnects through the proxy",
        Duration::from_secs(10),
        || {
            matches!(
                block_on_timeout(Duration::from_secs(1), client.check_stat("/")),
                Some(Ok(Some(_)))
            )
        },
        || logs.tail(),
    );
    assert_eq!((proxy.connection_count(), proxy.accepted_count()), (1, 2));
    assert_eq!(
        client.session_id(),
        session,
        "the session survives a dropped connection"
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
