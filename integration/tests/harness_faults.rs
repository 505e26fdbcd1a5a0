//! The harness's faults against real servers (named `fault_*`, run one at
//! a time by nextest; each on servers of its own): a cluster keeps serving
//! writes after its leader is killed, a paused server stops answering until
//! resumed, a restart keeps the data, a black-holed or frozen proxy times
//! out requests or holds replies until restored, dropped connections force
//! a reconnect — on ZooKeeper and on etcd.

mod harness_common;

use harness_common::*;

use std::time::{Duration, Instant};

use etcd_client::ConnectOptions;
use integration::runtime::{block_on, block_on_timeout, runtime};
use integration::{
    scale, wait_until_with, EtcdCluster, EtcdServer, ExpectOrLogs, Proxy, ProxyMode, ZkCluster,
    ZkServer,
};

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
