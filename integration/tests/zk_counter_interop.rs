//! Our shared counter against Curator's `SharedCount` (Java) and kazoo's
//! `Counter(..., support_curator=True)` (Python) on one ZooKeeper node:
//! one encoding (4 bytes, big-endian), one compare-and-set (the node's
//! version), so adds from both sides all land and each reads the other's.

use std::process::Command;
use std::time::Duration;

use integration::data_peer::{curator_data_peer, peer_reply};
use integration::peers::KAZOO_PYTHON;
use integration::test_dir::TestDir;
use integration::ZkServer;
use recipes_core::{Client as _, Versioned};
use recipes_zk::ZkClient;

fn path(test: &str) -> String {
    format!("/zk-counter-interop/{test}-{}", std::process::id())
}

fn ours() -> ZkClient {
    ZkClient::builder(ZkServer::shared().connect_string())
        .session_timeout(Duration::from_secs(10))
        .connect()
        .expect("connect our client")
}

/// `CuratorDataPeer.java` compiled into `dir`; the `java` command to run it.
fn curator(dir: &TestDir) -> Command {
    curator_data_peer(dir, &ZkServer::shared().connect_string())
}

fn reply(cmd: Command) -> String {
    peer_reply(cmd)
}

/// Curator's `SharedCount` and ours add to one counter at the same time:
/// every add of both lands, and each reads the other's value.
#[test]
fn curator_shared_count_and_ours_add_to_one_counter() {
    let dir = TestDir::new("zk-counter-curator");
    let path = path("curator");
    let client = ours();
    let counter = client.counter(&path).unwrap();
    counter.set(100).unwrap();
    let mut java = curator(&dir);
    java.args(["count-add", &path, "300"]);
    let theirs = std::thread::spawn(move || reply(java));
    let mine: Vec<_> = (0..3)
        .map(|_| {
            let counter = ours().counter(&path).unwrap();
            std::thread::spawn(move || {
                for _ in 0..100 {
                    counter.add(1).unwrap();
                }
            })
        })
        .collect();
    for t in mine {
        t.join().unwrap();
    }
    theirs.join().unwrap();
    let now = counter.get().unwrap();
    assert_eq!(now.value, 100 + 300 + 300, "{now:?}");
    let mut java = curator(&dir);
    java.args(["count-get", &path]);
    let read = reply(java);
    assert_eq!(
        read,
        format!("OK value=700 version={}", now.version - 1),
        "Curator reads our value at the node's version (ours is one more)"
    );
    assert!(counter.delete().unwrap());
}

/// kazoo's `Counter(path, support_curator=True)` reads our value and adds
/// to it; we read its add.
#[test]
fn kazoo_counter_reads_and_adds_to_ours() {
    let path = path("kazoo");
    let client = ours();
    let counter = client.counter(&path).unwrap();
    counter.set(-42).unwrap();
    let script = format!(
        "from kazoo.client import KazooClient\n\
         k = KazooClient(hosts={hosts:?}); k.start(10)\n\
         c = k.Counter({path:?}, support_curator=True)\n\
         print('value=%d' % c.value)\n\
         c += 5\n\
         print('after=%d' % c.value)\n\
         k.stop()\n",
        hosts = ZkServer::shared().connect_string(),
    );
    let out = Command::new(KAZOO_PYTHON)
        .args(["-c", &script])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("Debian's python3 with python3-kazoo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "value=-42\nafter=-37");
    assert_eq!(
        counter.get().unwrap(),
        Versioned {
            value: -37,
            version: 2
        }
    );
    assert!(counter.delete().unwrap());
}
