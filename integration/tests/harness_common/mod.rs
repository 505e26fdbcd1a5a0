//! Helpers the harness's test binaries share: raw clients of ZooKeeper and
//! etcd, a create that reports success, a process that must be gone.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use etcd_client::{Client as EtcdClient, ConnectOptions};
use integration::runtime::block_on_timeout;
use integration::{scale, ExpectOrLogs, ServerLogs};
use zookeeper_client as zk;

pub const OPEN_ACL: zk::CreateOptions<'static> =
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());

pub fn zk_connect(
    connect_string: &str,
    session_timeout: Duration,
    logs: &ServerLogs,
) -> zk::Client {
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

pub fn etcd_connect(
    endpoints: &[String],
    options: ConnectOptions,
    logs: &ServerLogs,
) -> EtcdClient {
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

pub fn assert_process_gone(pid: u32) {
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "process {pid} outlived its handle"
    );
}

/// Creates `path`; a `NodeExists` after a retried create counts as success.
pub fn zk_create_ok(client: &zk::Client, path: &str, limit: Duration) -> bool {
    matches!(
        block_on_timeout(limit, client.create(path, b"x", &OPEN_ACL)),
        Some(Ok(_)) | Some(Err(zk::Error::NodeExists))
    )
}
