//! A Redis group's versions after the server lost its data: after a
//! `FLUSHALL` every version a view shows — of the empty group, and after
//! each join and leave — is above every version seen before (they are
//! minted on the hybrid clock of fences), as the docs promise. The test
//! breaks its server, so it has its own.

use std::time::Duration;

use integration::RedisServer;
use recipes_core::Client;
use recipes_redis::RedisClient;

fn connect(server: &RedisServer) -> RedisClient {
    RedisClient::builder(server.url())
        .ttl(Duration::from_secs(30))
        .connect()
        .expect("connect")
}

/// The versions of `name`'s views across a join, a second join and both
/// leaves, the empty group's first and last.
fn versions(client: &RedisClient, name: &str) -> Vec<u64> {
    let group = client.group(name).unwrap();
    let mut seen = vec![group.members().unwrap().version];
    let a = group.join("a", b"").unwrap();
    seen.push(group.members().unwrap().version);
    let b = group.join("b", b"").unwrap();
    seen.push(group.members().unwrap().version);
    a.release().unwrap();
    seen.push(group.members().unwrap().version);
    b.release().unwrap();
    seen.push(group.members().unwrap().version);
    seen
}

#[test]
fn group_versions_after_a_flushall_are_above_every_version_before() {
    let server = RedisServer::start();
    let before_client = connect(&server);
    let mut before = versions(&before_client, "/loss/group");
    before.extend(versions(&before_client, "/loss/other"));
    drop(before_client);
    server.cmd::<String>(&["FLUSHALL"]);
    let after = versions(&connect(&server), "/loss/group");
    let highest = before.iter().max().copied().unwrap_or(0);
    assert!(
        after.iter().all(|v| *v > highest),
        "versions {after:?} after the FLUSHALL, {before:?} before: they must only rise"
    );
    assert!(after.windows(2).all(|w| w[0] <= w[1]), "{after:?}");
}
