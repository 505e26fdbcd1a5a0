//! Our ZooKeeper mutex against other libraries' locks on the same path:
//! Apache Curator 5.4's `InterProcessMutex` (a JVM) and kazoo 2.8's `Lock`
//! (Python), driven as peer processes (`integration::peers`).
//!
//! What holds (design §6): our nodes use Curator's layout
//! `<path>/_c_<uuid>-lock-<seq10>`, and we queue behind the trailing
//! sequence of *any* child, so
//! - Curator and we exclude each other in both orders;
//! - a kazoo `Lock` holder (`<hex>__lock__<seq10>`) excludes us;
//! - we exclude a kazoo `Lock` made with `extra_lock_patterns=["-lock-"]`.
//!
//! What does not, asserted as the unsafe outcome so that a change in either
//! library shows up here:
//! - a default kazoo `Lock` only queues behind `__lock__` names: it takes a
//!   lock that Curator or we hold;
//! - Curator sorts children by what follows `lock-` in the name; a kazoo
//!   name has no `lock-`, so Curator sorts it by the whole name, which
//!   starts with a hex uuid and comes after Curator's bare digits: Curator
//!   takes a lock that any kazoo `Lock` holds.
//!
//! Every test has its own path on one shared server and starts at most one
//! JVM. Exclusion is checked two ways: a timed acquire on the other side
//! times out while one side holds, and a queued waiter that acquires checks
//! a sentinel the test sets just before the holder releases.

use recipes_core::Client as _;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use integration::peers::{CuratorPeer, KazooPeer};
use integration::test_dir::TestDir;
use integration::{wait_until, ZkFacts, ZkServer};
use recipes_zk::{InterProcessMutex, ZkClient};

/// Session timeout of every client, ours and the peers'.
const SESSION: Duration = Duration::from_secs(4);
/// A timed acquire that must time out: long enough for a wrong acquisition
/// (a create and a read) to have happened.
const EXCLUDED: Duration = Duration::from_millis(500);
/// Upper bound of an acquisition that must succeed.
const ACQUIRE: Duration = Duration::from_secs(10);
/// Upper bound of a wait on a server fact.
const FACT: Duration = Duration::from_secs(5);

/// One test's path, server facts and log folder; prints the test's time.
struct Case {
    name: &'static str,
    path: String,
    facts: ZkFacts,
    dir: TestDir,
    started: Instant,
}

impl Case {
    fn new(name: &'static str) -> Case {
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
    fn other_path(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.path)
    }

    fn connect() -> String {
        ZkServer::shared().connect_string()
    }

    /// Our mutex on `path`, on its own session.
    fn our_mutex(&self, path: &str) -> InterProcessMutex {
        ZkClient::builder(Case::connect())
            .session_timeout(SESSION)
            .connect()
            .expect("connect our client")
            .mutex(path)
            .expect("our mutex")
    }

    fn curator(&self, name: &str) -> CuratorPeer {
        CuratorPeer::start(name, &Case::connect(), SESSION, self.dir.path())
    }

    fn kazoo(&self, name: &str) -> KazooPeer {
        KazooPeer::start(name, &Case::connect(), SESSION, self.dir.path())
    }

    /// Waits until `path` has exactly `n` contender nodes; returns them.
    fn wait_contenders(&self, path: &str, n: usize, desc: &str) -> Vec<String> {
        self.facts
            .wait_children(path, desc, FACT, |children| children.len() == n)
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        eprintln!("{} took {:?}", self.name, self.started.elapsed());
    }
}

fn is_curator_layout(name: &str) -> bool {
    name.starts_with("_c_") && name.contains("-lock-")
}

fn is_kazoo_layout(name: &str) -> bool {
    name.contains("__lock__")
}

#[test]
fn curator_holds_ours_waits_then_takes_over() {
    let case = Case::new("curator-first");
    let path = &case.path;
    let mut curator = case.curator("holder");
    let mutex = case.our_mutex(path);

    assert!(
        curator.lock_for(path, ACQUIRE),
        "Curator acquires a free lock"
    );
    let held = case.facts.children(path);
    assert!(
        held.len() == 1 && is_curator_layout(&held[0]),
        "one Curator node: {held:?}"
    );
    assert!(
        mutex.try_lock_for(EXCLUDED).unwrap().is_none(),
        "ours must not acquire while Curator holds"
    );
    case.wait_contenders(path, 1, "lose our abandoned node");

    let curator_releasing = AtomicBool::new(false);
    let guard = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let guard = mutex.try_lock_for(ACQUIRE * 2).unwrap();
            assert!(
                curator_releasing.load(Ordering::SeqCst),
                "ours acquired while Curator held the lock"
            );
            guard
        });
        case.wait_contenders(path, 2, "have our node queued behind Curator's");
        curator_releasing.store(true, Ordering::SeqCst);
        curator.release();
        waiter.join().unwrap()
    });
    let guard = guard.expect("ours acquires once Curator released");

    assert!(
        !curator.lock_for(path, EXCLUDED),
        "Curator must not acquire while ours holds"
    );
    case.wait_contenders(path, 1, "lose Curator's timed-out node");
    guard.release().unwrap();
    assert!(
        curator.lock_for(path, ACQUIRE),
        "Curator acquires after ours"
    );
    curator.release();
    curator.exit();
}

#[test]
fn ours_holds_curator_waits_then_takes_over() {
    let case = Case::new("ours-first");
    let path = &case.path;
    let mut curator = case.curator("waiter");
    let mutex = case.our_mutex(path);

    let guard = mutex.try_lock_for(ACQUIRE).unwrap().expect("ours acquires");
    assert!(
        !curator.lock_for(path, EXCLUDED),
        "Curator must not acquire while ours holds"
    );
    case.wait_contenders(path, 1, "lose Curator's timed-out node");

    let ours_releasing = AtomicBool::new(false);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let acquired = curator.lock_for(path, ACQUIRE * 2);
            assert!(
                !acquired || ours_releasing.load(Ordering::SeqCst),
                "Curator acquired while ours held the lock"
            );
            acquired
        });
        case.wait_contenders(path, 2, "have Curator's node queued behind ours");
        ours_releasing.store(true, Ordering::SeqCst);
        guard.release().unwrap();
        assert!(
            waiter.join().unwrap(),
            "Curator acquires once ours released"
        );
    });

    assert!(
        mutex.try_lock_for(EXCLUDED).unwrap().is_none(),
        "ours must not acquire while Curator holds"
    );
    case.wait_contenders(path, 1, "lose our abandoned node");
    curator.release();
    let guard = mutex.try_lock_for(ACQUIRE).unwrap();
    guard
        .expect("ours acquires after Curator")
        .release()
        .unwrap();
    curator.exit();
}

/// Curator's `LeaderSelector` is a mutex on its path (design §6: our
/// selector shares its layout), so its leadership and our mutex exclude
/// each other.
#[test]
fn curator_leader_selector_and_ours_exclude_each_other() {
    let case = Case::new("selector");
    let path = &case.path;
    let mut curator = case.curator("selector");
    let mutex = case.our_mutex(path);

    curator.ok(&format!("selector {path} first"), FACT);
    wait_until("Curator's selector leads", FACT, || {
        is_leading(&mut curator)
    });
    assert!(
        mutex.try_lock_for(EXCLUDED).unwrap().is_none(),
        "ours must not acquire while Curator's selector leads"
    );
    curator.ok("resign", FACT);
    let guard = mutex.try_lock_for(ACQUIRE).unwrap();
    let guard = guard.expect("ours acquires once the selector resigned");

    // A new selector (no auto-requeue, so the first one is out) queues
    // behind ours and leads only after our release.
    curator.ok("close-selector", FACT);
    curator.ok(&format!("selector {path} second"), FACT);
    case.wait_contenders(path, 2, "have the selector queued behind ours");
    assert!(!is_leading(&mut curator), "Curator leads while ours holds");
    guard.release().unwrap();
    wait_until("Curator's second selector leads", FACT, || {
        is_leading(&mut curator)
    });
    curator.ok("close-selector", FACT);
    curator.exit();
}

fn is_leading(curator: &mut CuratorPeer) -> bool {
    match curator.ok("is-leading", FACT).as_str() {
        "yes" => true,
        "no" => false,
        other => panic!("is-leading answered {other:?}"),
    }
}

/// Who holds, as far as the test knows: set right after an acquisition
/// returned, cleared right before the release is sent, so it is set only
/// while that side really holds.
struct Sentinel(AtomicU8);

const NOBODY: u8 = 0;
const CURATOR: u8 = 1;
const OURS: u8 = 2;

impl Sentinel {
    fn enter(&self, who: u8, round: usize) {
        if let Err(other) = self
            .0
            .compare_exchange(NOBODY, who, Ordering::SeqCst, Ordering::SeqCst)
        {
            panic!(
                "round {round}: {who} acquired while {other} held the lock (1 = Curator, 2 = ours)"
            );
        }
    }

    fn leave(&self, who: u8) {
        assert_eq!(
            self.0
                .compare_exchange(who, NOBODY, Ordering::SeqCst, Ordering::SeqCst),
            Ok(who)
        );
    }
}

/// Handoffs in both directions, round after round: the first side holds
/// until the other is queued behind it, then releases to it.
#[test]
fn curator_and_ours_alternate_under_contention() {
    const ROUNDS: usize = 8;
    let case = Case::new("alternate");
    let path = &case.path;
    let mut curator = case.curator("alternate");
    let mutex = case.our_mutex(path);
    let holder = Sentinel(AtomicU8::new(NOBODY));

    for round in 0..ROUNDS {
        if round % 2 == 0 {
            // Curator first; ours queues behind it.
            std::thread::scope(|s| {
                let first = s.spawn(|| {
                    assert!(curator.lock_for(path, ACQUIRE), "round {round}: Curator");
                    holder.enter(CURATOR, round);
                    case.wait_contenders(path, 2, "have ours queued behind Curator");
                    holder.leave(CURATOR);
                    curator.release();
                });
                case.facts
                    .wait_children(path, "have Curator's node", FACT, |c| !c.is_empty());
                let guard = mutex.try_lock_for(ACQUIRE * 2).unwrap();
                let guard = guard.unwrap_or_else(|| panic!("round {round}: ours timed out"));
                holder.enter(OURS, round);
                holder.leave(OURS);
                guard.release().unwrap();
                first.join().unwrap();
            });
        } else {
            // Ours first; Curator queues behind it.
            let guard = mutex.try_lock_for(ACQUIRE).unwrap();
            let guard = guard.unwrap_or_else(|| panic!("round {round}: ours timed out"));
            holder.enter(OURS, round);
            std::thread::scope(|s| {
                let second = s.spawn(|| {
                    assert!(
                        curator.lock_for(path, ACQUIRE * 2),
                        "round {round}: Curator"
                    );
                    holder.enter(CURATOR, round);
                    holder.leave(CURATOR);
                    curator.release();
                });
                case.wait_contenders(path, 2, "have Curator queued behind ours");
                holder.leave(OURS);
                guard.release().unwrap();
                second.join().unwrap();
            });
        }
        case.wait_contenders(path, 0, "be empty after the round");
    }
    curator.exit();
}

#[test]
fn kazoo_lock_holder_excludes_ours() {
    let case = Case::new("kazoo-first");
    let path = &case.path;
    let mut kazoo = case.kazoo("holder");
    let mutex = case.our_mutex(path);

    assert!(kazoo.lock_for(path, ACQUIRE), "kazoo acquires a free lock");
    let held = case.facts.children(path);
    assert!(
        held.len() == 1 && is_kazoo_layout(&held[0]),
        "one kazoo node: {held:?}"
    );
    assert!(
        mutex.try_lock_for(EXCLUDED).unwrap().is_none(),
        "ours must not acquire while kazoo holds"
    );
    case.wait_contenders(path, 1, "lose our abandoned node");

    let kazoo_releasing = AtomicBool::new(false);
    let guard = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let guard = mutex.try_lock_for(ACQUIRE * 2).unwrap();
            assert!(
                kazoo_releasing.load(Ordering::SeqCst),
                "ours acquired while kazoo held the lock"
            );
            guard
        });
        case.wait_contenders(path, 2, "have our node queued behind kazoo's");
        kazoo_releasing.store(true, Ordering::SeqCst);
        kazoo.release();
        waiter.join().unwrap()
    });
    guard
        .expect("ours acquires once kazoo released")
        .release()
        .unwrap();
    kazoo.exit();
}

#[test]
fn ours_excludes_curator_aware_kazoo_lock() {
    let case = Case::new("kazoo-aware");
    let path = &case.path;
    let mut kazoo = case.kazoo("waiter");
    let mutex = case.our_mutex(path);

    let guard = mutex.try_lock_for(ACQUIRE).unwrap().expect("ours acquires");
    assert!(
        !kazoo.lock_curator_aware_for(path, EXCLUDED),
        "kazoo with extra_lock_patterns=[\"-lock-\"] must not acquire while ours holds"
    );
    case.wait_contenders(path, 1, "lose kazoo's timed-out node");

    let ours_releasing = AtomicBool::new(false);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let acquired = kazoo.lock_curator_aware_for(path, ACQUIRE * 2);
            assert!(
                !acquired || ours_releasing.load(Ordering::SeqCst),
                "kazoo acquired while ours held the lock"
            );
            acquired
        });
        case.wait_contenders(path, 2, "have kazoo's node queued behind ours");
        ours_releasing.store(true, Ordering::SeqCst);
        guard.release().unwrap();
        assert!(waiter.join().unwrap(), "kazoo acquires once ours released");
    });

    assert!(
        mutex.try_lock_for(EXCLUDED).unwrap().is_none(),
        "ours must not acquire while kazoo holds"
    );
    kazoo.release();
    kazoo.exit();
}

/// Documents an unsafe mix: a default kazoo `Lock` does not see our nodes.
#[test]
fn default_kazoo_lock_ignores_ours_unsafe() {
    let case = Case::new("kazoo-default-vs-ours");
    let path = &case.path;
    let mut kazoo = case.kazoo("blind");
    let mutex = case.our_mutex(path);

    let guard = mutex.try_lock_for(ACQUIRE).unwrap().expect("ours acquires");
    assert!(
        kazoo.lock_for(path, ACQUIRE),
        "a default kazoo Lock queues only behind `__lock__` names, so it takes \
         the lock while ours holds; if this changed, update design §6"
    );
    kazoo.release();
    guard.release().unwrap();
    kazoo.exit();
}

/// Documents the unsafe mixes of kazoo and Curator, and the one safe
/// direction.
#[test]
fn default_kazoo_and_curator_mis_sort_unsafe() {
    let case = Case::new("kazoo-vs-curator");
    let mut curator = case.curator("mixed");
    let mut kazoo = case.kazoo("mixed");

    // Curator holds: a kazoo Lock that knows `-lock-` waits ...
    let path = case.other_path("curator-holds");
    assert!(curator.lock_for(&path, ACQUIRE));
    assert!(
        !kazoo.lock_curator_aware_for(&path, EXCLUDED),
        "kazoo with extra_lock_patterns=[\"-lock-\"] must wait for Curator"
    );
    // ... a default one does not.
    assert!(
        kazoo.lock_for(&path, ACQUIRE),
        "a default kazoo Lock ignores Curator's nodes and takes the lock Curator \
         holds; if this changed, update design §6"
    );
    kazoo.release();
    curator.release();

    // kazoo holds, even a Lock that knows `-lock-`: Curator sorts kazoo's
    // `<hex>__lock__<seq>` by its whole name (it has no `lock-`), after its
    // own node's bare digits, and takes the lock. (Only a uuid starting
    // with nine zeros would sort first: odds of 16^-9.)
    let path = case.other_path("kazoo-holds");
    assert!(kazoo.lock_curator_aware_for(&path, ACQUIRE));
    assert!(
        curator.lock_for(&path, ACQUIRE),
        "Curator mis-sorts kazoo's node and takes the lock kazoo holds; if this \
         changed, update design §6"
    );
    let both = case.facts.children(&path);
    assert!(
        both.iter().any(|c| is_kazoo_layout(c)) && both.iter().any(|c| is_curator_layout(c)),
        "both hold: {both:?}"
    );
    curator.release();
    kazoo.release();
    curator.exit();
    kazoo.exit();
}

fn curator_is_leader(curator: &mut CuratorPeer) -> bool {
    match curator.ok("is-leader", FACT).as_str() {
        "yes" => true,
        "no" => false,
        other => panic!("is-leader answered {other:?}"),
    }
}

#[test]
fn curator_leader_latch_and_ours_never_both_lead() {
    let case = Case::new("latch");
    let path = &case.path;
    let mut curator = case.curator("latch");
    curator.ok(&format!("latch {path} curator"), FACT);
    wait_until("Curator's latch leads", FACT, || {
        curator_is_leader(&mut curator)
    });

    let ours = ZkClient::builder(Case::connect())
        .session_timeout(SESSION)
        .connect()
        .expect("connect our client")
        .leader_latch(path, "ours")
        .unwrap();
    ours.start();
    case.wait_contenders(path, 2, "have our latch queued behind Curator's");
    assert!(
        !ours.has_leadership(),
        "ours leads while Curator's latch leads"
    );
    let participants = ours.participants().unwrap();
    assert_eq!(
        participants[0].id, "curator",
        "Curator's participant id is read"
    );
    assert_eq!(participants[1].id, "ours");

    // Curator leaves: ours leads; Curator's new latch queues behind ours.
    curator.ok("close-latch", FACT);
    assert!(
        ours.await_leadership(ACQUIRE),
        "ours leads after Curator left"
    );
    curator.ok(&format!("latch {path} curator-again"), FACT);
    case.wait_contenders(path, 2, "have Curator's latch queued behind ours");
    assert!(
        !curator_is_leader(&mut curator),
        "Curator leads while ours leads"
    );
    assert!(ours.has_leadership());
    ours.close().unwrap();
    wait_until("Curator's latch leads after ours closed", FACT, || {
        curator_is_leader(&mut curator)
    });
    curator.ok("close-latch", FACT);
    curator.exit();
}
