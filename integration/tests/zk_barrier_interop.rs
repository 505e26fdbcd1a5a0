//! Our barrier and double barrier against Curator's (Java) on one
//! ZooKeeper: Curator's `DistributedBarrier` set, ours waits (and the
//! reverse); Curator's `DistributedDoubleBarrier` members and ours gather
//! in one round and leave it.

use std::process::Command;
use std::time::Duration;

use integration::peers::{curator_program, one_shot_reply};
use integration::test_dir::TestDir;
use integration::{scale, wait_until, ZkServer};
use recipes_core::Client as _;
use recipes_zk::ZkClient;

fn path(test: &str) -> String {
    format!("/zk-barrier-interop/{test}-{}", std::process::id())
}

fn ours() -> ZkClient {
    ZkClient::builder(ZkServer::shared().connect_string())
        .session_timeout(Duration::from_secs(10))
        .connect()
        .expect("connect our client")
}

fn curator(dir: &TestDir, args: &[&str]) -> Command {
    let connect = ZkServer::shared().connect_string();
    let mut java = curator_program(dir, "CuratorBarrierPeer", &connect);
    java.args(args);
    java
}

/// Whether some session watches `path` (a waiter's watch on the node).
fn watched(path: &str) -> bool {
    ZkServer::shared()
        .watches_by_path()
        .get(path)
        .is_some_and(|sessions| !sessions.is_empty())
}

/// Curator sets the barrier: ours sees it up; Curator removes it: our
/// waiter goes through.
#[test]
fn curator_sets_the_barrier_and_ours_waits() {
    let dir = TestDir::new("zk-barrier-curator-sets");
    let path = path("curator-sets");
    let client = ours();
    let barrier = client.barrier(&path).unwrap();
    one_shot_reply(curator(&dir, &["barrier-set", &path]));
    assert!(
        !barrier.wait_timeout(Duration::from_millis(200)).unwrap(),
        "Curator's barrier is up for us"
    );
    let waiter = std::thread::spawn(move || barrier.wait_timeout(scale(Duration::from_secs(60))));
    wait_until("our waiter watches", scale(Duration::from_secs(10)), || {
        watched(&path)
    });
    one_shot_reply(curator(&dir, &["barrier-remove", &path]));
    assert!(waiter.join().unwrap().unwrap(), "our waiter went through");
    assert_eq!(client.read(&path).unwrap(), None, "nothing left");
}

/// We set the barrier: Curator's timed wait sees it up; we remove it:
/// Curator's waiter goes through.
#[test]
fn ours_sets_the_barrier_and_curator_waits() {
    let dir = TestDir::new("zk-barrier-ours-sets");
    let path = path("ours-sets");
    let client = ours();
    let barrier = client.barrier(&path).unwrap();
    barrier.set().unwrap();
    let up = one_shot_reply(curator(&dir, &["barrier-wait", &path, "200"]));
    assert_eq!(up, "OK up", "our barrier is up for Curator");
    let java = curator(&dir, &["barrier-wait", &path, "60000"]);
    let waiter = std::thread::spawn(move || one_shot_reply(java));
    wait_until(
        "Curator's waiter watches",
        scale(Duration::from_secs(30)),
        || watched(&path),
    );
    barrier.remove().unwrap();
    assert_eq!(waiter.join().unwrap(), "OK down");
}

/// A double barrier of four: two Curator members (one JVM) and two of
/// ours. Neither side passes before the other's arrive; all four enter,
/// all four leave.
#[test]
fn curator_and_ours_gather_in_one_double_barrier() {
    let dir = TestDir::new("zk-double-curator");
    let path = path("double");
    let java = curator(&dir, &["double", &path, "4", "2", "60000"]);
    let theirs = std::thread::spawn(move || one_shot_reply(java));
    wait_until(
        "Curator's two members in",
        scale(Duration::from_secs(30)),
        || children(&path) >= 2,
    );
    let mine: Vec<_> = (0..2)
        .map(|_| {
            let double = ours().double_barrier(&path, 4).unwrap();
            std::thread::spawn(move || {
                let member = double
                    .enter_timeout(scale(Duration::from_secs(60)))
                    .unwrap()
                    .expect("entered with Curator's members");
                assert!(member
                    .leave_timeout(scale(Duration::from_secs(60)))
                    .unwrap());
            })
        })
        .collect();
    for t in mine {
        t.join().unwrap();
    }
    assert_eq!(theirs.join().unwrap(), "OK entered=2 left=2");
}

/// The children of `path` but `ready`.
fn children(path: &str) -> usize {
    let children = ZkServer::shared().facts().children(path);
    children.iter().filter(|c| c.as_str() != "ready").count()
}
