//! Our group membership against Curator's `GroupMember` (Java) on one
//! ZooKeeper path: a member is the ephemeral `<path>/<id>` holding its
//! data on both sides, so each side's view holds the other's member, and a
//! Curator member that closes leaves ours.

use std::time::Duration;

use integration::peers::{curator_program, one_shot_reply};
use integration::test_dir::TestDir;
use integration::{scale, wait_until, ZkServer};
use recipes_core::Client as _;
use recipes_zk::ZkClient;

fn ours() -> ZkClient {
    ZkClient::builder(ZkServer::shared().connect_string())
        .session_timeout(Duration::from_secs(10))
        .connect()
        .expect("connect our client")
}

/// We join as `ours`; Curator's `GroupMember` joins as `curator`: our
/// view holds Curator's member with its data while it is there, Curator's
/// view holds ours with our data, and Curator's member is gone from ours
/// once it closed.
#[test]
fn curator_group_member_and_ours_see_each_other() {
    let dir = TestDir::new("zk-group-curator");
    let path = format!("/zk-group-interop/api-{}", std::process::id());
    let client = ours();
    let group = client.group(&path).unwrap();
    let member = group.join("ours", b"10.0.0.1:80").unwrap();
    let mut java = curator_program(
        &dir,
        "CuratorDataPeer",
        &ZkServer::shared().connect_string(),
    );
    let wait_ms = scale(Duration::from_secs(30)).as_millis().to_string();
    java.args([
        "group-member",
        &path,
        "curator",
        "10.0.0.2:80",
        "ours",
        &wait_ms,
    ]);
    let mut watch = group.watch().unwrap();
    let theirs = std::thread::spawn(move || one_shot_reply(java));
    let mut saw_curator = watch.last().contains("curator");
    while !saw_curator {
        let change = watch
            .next_timeout(scale(Duration::from_secs(60)))
            .unwrap()
            .expect("Curator's member joined our view");
        if let Some(m) = change.view.members.iter().find(|m| m.id == "curator") {
            assert_eq!(m.data, b"10.0.0.2:80", "Curator's data as it wrote it");
            saw_curator = true;
        }
    }
    let reply = theirs.join().unwrap();
    assert_eq!(
        reply, "OK members=curator=10.0.0.2:80,ours=10.0.0.1:80",
        "Curator's view holds ours with our data"
    );
    wait_until(
        "Curator's closed member left our view",
        Duration::from_secs(10),
        || !group.members().unwrap().contains("curator"),
    );
    assert!(group.members().unwrap().contains("ours"));
    member.release().unwrap();
    assert!(group.members().unwrap().members.is_empty());
}
