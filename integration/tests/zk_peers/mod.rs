//! What the interop test binaries share: one test's path and facts, the
//! layouts of Curator's and kazoo's nodes, the bounds, and the sentinel
//! that says who holds.

#![allow(dead_code)]

use recipes_core::Client as _;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use integration::peers::{CuratorPeer, KazooPeer};
use integration::test_dir::TestDir;
use integration::{ZkFacts, ZkServer};
use recipes_zk::{InterProcessMutex, ZkClient};

/// Session timeout of every client, ours and the peers'.
pub const SESSION: Duration = Duration::from_secs(4);

/// A timed acquire that must time out: long enough for a wrong acquisition
/// (a create and a read) to have happened.
pub const EXCLUDED: Duration = Duration::from_millis(500);

/// Upper bound of an acquisition that must succeed.
pub const ACQUIRE: Duration = Duration::from_secs(10);

/// Upper bound of a wait on a server fact.
pub const FACT: Duration = Duration::from_secs(5);

/// One test's path, server facts and log folder; prints the test's time.
pub struct Case {
    pub name: &'static str,
    pub path: String,
    pub facts: ZkFacts,
    pub dir: TestDir,
    pub started: Instant,
}

impl Case {
    pub fn new(name: &'static str) -> Case {
        static N: AtomicU64 = AtomicU64::new(0);
        Case {
            name,
            path: format!(
                "/zk-interop/{name}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ),
            facts: ZkServer::shared().facts(),
            dir: TestDir::new(&format!("zk-interop-{name}")),
            started: Instant::now(),
        }
    }

    /// A second path for the same test.
    pub fn other_path(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.path)
    }

    pub fn connect() -> String {
        ZkServer::shared().connect_string()
    }

    /// Our mutex on `path`, on its own session.
    pub fn our_mutex(&self, path: &str) -> InterProcessMutex {
        ZkClient::builder(Case::connect())
            .session_timeout(SESSION)
            .connect()
            .expect("connect our client")
            .mutex(path)
            .expect("our mutex")
    }

    pub fn curator(&self, name: &str) -> CuratorPeer {
        CuratorPeer::start(name, &Case::connect(), SESSION, self.dir.path())
    }

    pub fn kazoo(&self, name: &str) -> KazooPeer {
        KazooPeer::start(name, &Case::connect(), SESSION, self.dir.path())
    }

    /// Waits until `path` has exactly `n` contender nodes; returns them.
    pub fn wait_contenders(&self, path: &str, n: usize, desc: &str) -> Vec<String> {
        self.facts
            .wait_children(path, desc, FACT, |children| children.len() == n)
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        eprintln!("{} took {:?}", self.name, self.started.elapsed());
    }
}

pub fn is_curator_layout(name: &str) -> bool {
    name.starts_with("_c_") && name.contains("-lock-")
}

pub fn is_kazoo_layout(name: &str) -> bool {
    name.contains("__lock__")
}

/// Who holds, as far as the test knows: set right after an acquisition
/// returned, cleared right before the release is sent, so it is set only
/// while that side really holds.
pub struct Sentinel(pub AtomicU8);

pub const NOBODY: u8 = 0;

pub const CURATOR: u8 = 1;

pub const OURS: u8 = 2;

impl Sentinel {
    pub fn enter(&self, who: u8, round: usize) {
        if let Err(other) = self
            .0
            .compare_exchange(NOBODY, who, Ordering::SeqCst, Ordering::SeqCst)
        {
            panic!(
                "round {round}: {who} acquired while {other} held the lock (1 = Curator, 2 = ours)"
            );
        }
    }

    pub fn leave(&self, who: u8) {
        assert_eq!(
            self.0
                .compare_exchange(who, NOBODY, Ordering::SeqCst, Ordering::SeqCst),
            Ok(who)
        );
    }
}
