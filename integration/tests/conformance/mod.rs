//! The conformance suite: written once against the core traits and the
//! worker protocol, run for each backend by `zk_conformance.rs` and
//! `etcd_conformance.rs` through a [`Kit`].
//!
//! Properties, as `shared/testing.md` poses them:
//! 1. mutual exclusion without faults: critical sections never overlap and
//!    fences strictly increase in holding order;
//! 2. a killed holder's lock is taken no earlier than its last acknowledged
//!    renewal + the lease, and no later than the kill + the lease + slack;
//! 3. a paused holder's loss signal has fired when it resumes, and its
//!    writes are refused by the store and by a `FenceGate`;
//! 4. an expired holder's release never removes the new holder's entry
//!    (asserted at the end of property 3's test, on the same holders);
//! 6. no herd: one release wakes one waiter;
//! 7. under `LossPolicy::Deadline`, a black-holed holder's `valid_until()`
//!    passes before another client acquires.

#![allow(dead_code)]

pub mod election;
pub mod errors;
pub mod metrics;
pub mod outcomes;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration::test_dir::TestDir;
use integration::worker::{worker_binary, Worker};
use integration::{scale, wait_for, wait_until};
use parking_lot::Mutex as PlMutex;
use recipes_core::{BootInstant, ElectionBackend, FenceGate, FencingToken, MutexBackend};

/// A server shared by the tests of one binary, or one a test owns.
pub enum Server<S: 'static> {
    /// For tests that do not break the server.
    Shared(&'static S),
    /// For tests that kill, pause or partition.
    Own(Box<S>),
}

impl<S> std::ops::Deref for Server<S> {
    type Target = S;
    fn deref(&self) -> &S {
        match self {
            Server::Shared(s) => s,
            Server::Own(s) => s,
        }
    }
}

/// What the suite needs from a backend.
pub trait Kit: Sized {
    /// The mutex backend.
    type Mutex: MutexBackend;

    /// A kit on the server shared by this test binary.
    fn shared() -> Self;

    /// A kit on a server of its own (for fault tests).
    fn own() -> Self;

    /// A client (its own session) with lease `ttl`, and a mutex on `name`.
    fn mutex(&self, name: &str, ttl: Duration) -> recipes_core::Mutex<Self::Mutex>;

    /// The client type.
    type Client: recipes_core::Client;

    /// A client of its own session with lease `ttl`, or the store's
    /// refusal of the settings.
    fn connect(&self, ttl: Duration) -> recipes_core::Result<Self::Client>;

    /// A client of its own session reached through `proxy_addr`, with lease
    /// `ttl` and RPC timeout `rpc_timeout`.
    fn connect_via(
        &self,
        proxy_addr: std::net::SocketAddr,
        ttl: Duration,
        rpc_timeout: Duration,
    ) -> recipes_core::Result<Self::Client>;

    /// The election backend.
    type Election: ElectionBackend;

    /// A client (its own session) with lease `ttl`, and an election on
    /// `name`.
    fn election(&self, name: &str, ttl: Duration) -> recipes_core::Election<Self::Election>;

    /// The entries (node paths or keys) directly below a recipe's name.
    fn entries_under(&self, name: &str) -> Vec<String>;

    /// Whether `waiters` waiters of the lock `name` have their watches set
    /// in the store (the holder's own watch aside).
    fn all_waiters_watch(&self, name: &str, waiters: usize) -> bool;

    /// Write a plain entry (node or key) `path` with `value`, as another
    /// program would.
    fn write_entry(&self, path: &str, value: &[u8]);

    /// Delete an entry behind its holder's back.
    fn delete_entry(&self, holder: &str);

    /// A client reached through `proxy_addr` instead of the server.
    fn mutex_via(
        &self,
        proxy_addr: std::net::SocketAddr,
        name: &str,
        ttl: Duration,
    ) -> recipes_core::Mutex<Self::Mutex>;

    /// The server address a proxy should forward to.
    fn server_addr(&self) -> std::net::SocketAddr;

    /// The worker's `connect` request for a client with lease `ttl`.
    fn worker_connect(&self, ttl: Duration) -> String;

    /// Whether a holder's entry (node path or key) exists in the store.
    fn exists(&self, holder: &str) -> bool;

    /// The value stored at a resource path or key.
    fn value(&self, resource: &str) -> Option<String>;

    /// The lease length the server really grants for `ttl` (it may raise it).
    fn granted(&self, ttl: Duration) -> Duration;

    /// How much after the lease's end the server may take to notice it
    /// (ZooKeeper checks sessions once per tick).
    fn expiry_granularity(&self) -> Duration;
}

/// A fresh name for one test: nothing else uses it.
pub fn name(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "/conformance/{test}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn field<'a>(reply: &'a str, key: &str) -> &'a str {
    reply
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {reply:?}"))
}

fn token_of(reply: &str) -> FencingToken {
    field(reply, "token").parse().expect("token")
}

fn boot(ms: &str) -> BootInstant {
    BootInstant::from_since_boot(Duration::from_millis(ms.parse().expect("boot ms")))
}

/// Property 6: no herd — with `waiters` queued behind a holder, one
/// release makes exactly one waiter read the queue again (the one it woke),
/// and that one acquires.
pub fn one_release_wakes_one_waiter<K: Kit>(kit: &K, waiters: usize) {
    use std::sync::atomic::AtomicUsize;
    let name = name("herd");
    let holder = kit.mutex(&name, Duration::from_secs(10)).lock().unwrap();
    let acquired = Arc::new(AtomicUsize::new(0));
    let (go_tx, go_rx) = crossbeam_channel::unbounded::<()>();
    let threads: Vec<_> = (0..waiters)
        .map(|_| {
            let m = kit.mutex(&name, Duration::from_secs(10));
            let (acquired, go) = (acquired.clone(), go_rx.clone());
            std::thread::spawn(move || {
                let g = m.lock().unwrap();
                acquired.fetch_add(1, Ordering::SeqCst);
                // Hold until told, so no second release happens.
                let _ = go.recv();
                g.release().unwrap();
            })
        })
        .collect();
    wait_until(
        "every waiter is queued and watching",
        scale(Duration::from_secs(30)),
        || kit.all_waiters_watch(&name, waiters),
    );
    let before = recipes_core::engine::queue_reads();
    holder.release().unwrap();
    wait_until(
        "one waiter acquired",
        scale(Duration::from_secs(10)),
        || acquired.load(Ordering::SeqCst) == 1,
    );
    let reads = recipes_core::engine::queue_reads() - before;
    assert_eq!(reads, 1, "queue reads after one release, {waiters} waiting");
    assert_eq!(acquired.load(Ordering::SeqCst), 1);
    drop(go_tx);
    for t in threads {
        t.join().unwrap();
    }
}

/// Property 1: ≥ 4 worker processes × many acquisitions, no overlap, fences
/// strictly increasing in holding order, every fenced write accepted.
pub fn mutual_exclusion<K: Kit>(kit: &K, workers: usize, rounds: usize) {
    let name = name("mutex");
    let resource = format!("{name}-resource");
    let dir = TestDir::new("mutual-exclusion");
    let inside = Arc::new(AtomicBool::new(false));
    let order = Arc::new(PlMutex::new(Vec::<FencingToken>::new()));
    let gate = Arc::new(FenceGate::new());
    let threads: Vec<_> = (0..workers)
        .map(|i| {
            let mut w = Worker::start(&worker_binary(), &format!("mx{i}"), dir.path());
            w.ok(
                &kit.worker_connect(Duration::from_secs(10)),
                Duration::from_secs(15),
            );
            let (inside, order, gate) = (inside.clone(), order.clone(), gate.clone());
            let (name, resource) = (name.clone(), resource.clone());
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    let reply = w.ok(&format!("lock {name}"), Duration::from_secs(60));
                    let token = token_of(&reply);
                    assert!(
                        !inside.swap(true, Ordering::SeqCst),
                        "two holders at once (token {token})"
                    );
                    {
                        let mut order = order.lock();
                        if let Some(last) = order.last() {
                            assert!(token > *last, "fence {token} after {last}");
                        }
                        order.push(token);
                    }
                    // The critical section: a write fenced in the store and
                    // one checked at the resource.
                    w.ok(
                        &format!("write {resource} {token}"),
                        Duration::from_secs(10),
                    );
                    gate.admit(token)
                        .expect("the holder's token passes the gate");
                    inside.store(false, Ordering::SeqCst);
                    w.ok("release", Duration::from_secs(10));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a worker thread failed");
    }
    let order = order.lock();
    assert_eq!(order.len(), workers * rounds);
    assert_eq!(
        kit.value(&resource).as_deref(),
        Some(order.last().unwrap().to_string().as_str()),
        "the store holds the last holder's write"
    );
}

/// Property 2: a killed holder's lock is taken by another no earlier than
/// the holder's last acknowledged renewal + the lease, and no later than the
/// kill + the lease + slack.
pub fn killed_holder_frees_the_lock_within_the_lease<K: Kit>(kit: &K, ttl: Duration) {
    let name = name("killed");
    let dir = TestDir::new("killed-holder");
    let mut holder = Worker::start(&worker_binary(), "holder", dir.path());
    holder.ok(&kit.worker_connect(ttl), Duration::from_secs(15));
    let reply = holder.ok(&format!("lock {name}"), Duration::from_secs(10));
    let granted = kit.granted(ttl);

    let waiter = kit.mutex(&name, Duration::from_secs(10));
    let (tx, rx) = crossbeam_channel::bounded(1);
    let taker = std::thread::spawn(move || {
        let g = waiter.lock().expect("the waiter acquires");
        tx.send(BootInstant::now()).unwrap();
        g.token()
    });
    let status = holder.ok("status", Duration::from_secs(5));
    let last_ack = boot(field(&status, "last_ack_ms"));
    let killed_at = BootInstant::now();
    holder.kill();
    let taken_at = rx
        .recv_timeout(scale(granted + Duration::from_secs(10)))
        .expect("the lock was taken over");
    let token = taker.join().unwrap();
    assert!(token > token_of(&reply), "the new holder's fence is higher");
    // Lower bound: never scaled.
    assert!(
        taken_at >= last_ack + granted,
        "taken {:?} after the last acknowledged renewal, less than the lease {granted:?}",
        taken_at - last_ack
    );
    let slack = kit.expiry_granularity() + Duration::from_secs(2);
    assert!(
        taken_at <= killed_at + granted + scale(slack),
        "taken {:?} after the kill; the lease is {granted:?}",
        taken_at - killed_at
    );
}

/// Properties 3 and 4: the paused holder. SIGSTOP it, wait until its entry
/// is gone and another holder has written with a higher fence, SIGCONT: its
/// loss signal has fired, its in-store write and the gate refuse it, and its
/// release leaves the new holder's entry alone.
pub fn paused_holder_is_fenced_out<K: Kit>(kit: &K, ttl: Duration) {
    let name = name("paused");
    let resource = format!("{name}-resource");
    let dir = TestDir::new("paused-holder");
    let gate = FenceGate::new();
    let mut old = Worker::start(&worker_binary(), "old", dir.path());
    old.ok(&kit.worker_connect(ttl), Duration::from_secs(15));
    let reply = old.ok(&format!("lock {name}"), Duration::from_secs(10));
    let (old_token, old_holder) = (token_of(&reply), field(&reply, "holder").to_owned());
    old.ok(
        &format!("write {resource} {old_token}"),
        Duration::from_secs(10),
    );
    gate.admit(old_token).unwrap();

    old.pause();
    wait_until(
        "the paused holder's entry is gone",
        kit.granted(ttl) + Duration::from_secs(10),
        || !kit.exists(&old_holder),
    );
    let new = kit
        .mutex(&name, Duration::from_secs(10))
        .try_lock_for(scale(Duration::from_secs(10)))
        .unwrap()
        .expect("another client takes the lock");
    assert!(new.token() > old_token);
    gate.admit(new.token()).unwrap();
    assert!(kit.exists(new.holder()));
    old.resume();

    let status = old.ok("status", Duration::from_secs(10));
    assert_ne!(
        field(&status, "lost"),
        "no",
        "the old holder knows it lost: {status}"
    );
    let refused = old
        .request(
            &format!("write {resource} {old_token}"),
            Duration::from_secs(30),
        )
        .expect_err("the old holder's fenced write is refused");
    assert!(refused.starts_with("fence-rejected"), "{refused}");
    assert!(
        gate.admit(old_token).is_err(),
        "the gate refuses the old fence"
    );
    assert_eq!(
        kit.value(&resource).as_deref(),
        Some(old_token.to_string().as_str())
    );

    // Safe release: the old holder's release leaves the new holder alone.
    let _ = old.request("release", Duration::from_secs(30));
    assert!(kit.exists(new.holder()), "the new holder's entry survived");
    new.check().expect("the new holder still holds");
}

/// Property 7: under `LossPolicy::Deadline`, a black-holed holder's lease
/// deadline passes (and its signal fires) before another client acquires.
pub fn blackholed_holder_loses_before_another_acquires<K: Kit>(kit: &K, ttl: Duration) {
    let name = name("blackhole");
    let proxy = integration::Proxy::start(kit.server_addr());
    let held = kit
        .mutex_via(proxy.addr(), &name, ttl)
        .lock()
        .expect("lock through the proxy");
    let waiter = kit.mutex(&name, Duration::from_secs(10));
    let (tx, rx) = crossbeam_channel::bounded(1);
    let taker = std::thread::spawn(move || {
        let g = waiter.lock().expect("the waiter acquires");
        tx.send(BootInstant::now()).unwrap();
        g
    });
    proxy.blackhole();
    let reason = held
        .lost()
        .wait_timeout(scale(kit.granted(ttl) + Duration::from_secs(5)))
        .expect("the black-holed holder's signal fires");
    let lost_at = BootInstant::now();
    let valid_until = held.valid_until().expect("a deadline");
    let taken_at = rx
        .recv_timeout(scale(kit.granted(ttl) + Duration::from_secs(10)))
        .expect("the other client acquires");
    assert!(
        valid_until <= taken_at,
        "valid_until {valid_until:?} passed after the other acquired at {taken_at:?} ({reason})"
    );
    assert!(lost_at <= taken_at + scale(Duration::from_secs(1)));
    let new = taker.join().unwrap();
    assert!(new.token() > held.token());
    proxy.restore();
}

/// Wait until `f` answers.
pub fn until<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait_for(what, Duration::from_secs(20), f)
}

/// Which leader recipe a failover test drives in the workers.
#[derive(Debug, Clone, Copy)]
pub enum LeaderRecipe {
    /// `LeaderLatch`.
    Latch,
    /// `LeaderSelector`.
    Selector,
}

impl LeaderRecipe {
    fn word(self) -> &'static str {
        match self {
            LeaderRecipe::Latch => "latch",
            LeaderRecipe::Selector => "selector",
        }
    }
}

/// How the leader is taken out.
#[derive(Debug, Clone, Copy)]
pub enum Takeout {
    /// SIGKILL: a new leader within the bounds of property 2.
    Kill,
    /// SIGSTOP past the lease, then SIGCONT: the deposed leader is fenced out.
    Pause,
}

fn leading(w: &mut Worker) -> Option<(FencingToken, BootInstant)> {
    let status = w.ok("leader-status", Duration::from_secs(10));
    (field(&status, "leading") == "yes")
        .then(|| (token_of(&status), boot(field(&status, "last_ack_ms"))))
}

/// Property 5: latch and selector failover. Three participants in worker
/// processes; the leader is killed or paused; another leads within the
/// bounds of property 2 with a higher fence, and the resource never accepts
/// the deposed leader's fence after the new one's.
pub fn leader_failover<K: Kit>(kit: &K, recipe: LeaderRecipe, takeout: Takeout, ttl: Duration) {
    let path = name(recipe.word());
    let dir = TestDir::new("failover");
    let gate = FenceGate::new();
    let mut workers: Vec<Worker> = (0..3)
        .map(|i| {
            let mut w = Worker::start(&worker_binary(), &format!("p{i}"), dir.path());
            w.ok(&kit.worker_connect(ttl), Duration::from_secs(15));
            w.ok(
                &format!("{} {path} p{i}", recipe.word()),
                Duration::from_secs(10),
            );
            w
        })
        .collect();
    let (first, old_token) = until("a leader", || {
        workers
            .iter_mut()
            .enumerate()
            .find_map(|(i, w)| leading(w).map(|(t, _)| (i, t)))
    });
    gate.admit(old_token).unwrap();
    let granted = kit.granted(ttl);
    let (_, last_ack) = leading(&mut workers[first]).expect("still leading");
    let out_at = BootInstant::now();
    match takeout {
        Takeout::Kill => workers[first].kill(),
        Takeout::Pause => workers[first].pause(),
    }
    let others: Vec<usize> = (0..3).filter(|i| *i != first).collect();
    let new_token = wait_for("a new leader", granted + Duration::from_secs(10), || {
        others
            .iter()
            .find_map(|i| leading(&mut workers[*i]).map(|(t, _)| t))
    });
    let seen_at = BootInstant::now();
    assert!(new_token > old_token, "the new term's fence is higher");
    assert!(
        seen_at >= last_ack + granted,
        "a new leader {:?} after the old one's last acknowledged renewal; the lease is {granted:?}",
        seen_at - last_ack
    );
    let slack = kit.expiry_granularity() + Duration::from_secs(2);
    assert!(
        seen_at <= out_at + granted + scale(slack),
        "a new leader only {:?} after the takeout; the lease is {granted:?}",
        seen_at - out_at
    );
    gate.admit(new_token).unwrap();
    assert_eq!(
        others
            .iter()
            .filter(|i| leading(&mut workers[**i]).is_some())
            .count(),
        1,
        "exactly one leader among the others"
    );
    if let Takeout::Pause = takeout {
        workers[first].resume();
        assert!(
            leading(&mut workers[first]).is_none(),
            "the deposed leader knows it is deposed"
        );
        assert!(
            gate.admit(old_token).is_err(),
            "the deposed leader is fenced out"
        );
    }
}

/// The whole suite for one backend's [`Kit`]: every test, unchanged. Tests
/// whose names contain `fault` get their own server and run one at a time.
#[macro_export]
macro_rules! conformance_suite {
    ($kit:ty) => {
        const LEASE: std::time::Duration = std::time::Duration::from_secs(2);

        #[test]
        fn mutual_exclusion_four_workers() {
            conformance::mutual_exclusion(&<$kit as conformance::Kit>::shared(), 4, 25);
        }

        #[test]
        fn no_herd_one_release_wakes_one_of_twenty_waiters() {
            conformance::one_release_wakes_one_waiter(&<$kit as conformance::Kit>::own(), 20);
        }

        #[test]
        fn errors_only_the_recipes_own_entries_are_contenders() {
            conformance::errors::only_the_recipes_own_entries_are_contenders(
                &<$kit as conformance::Kit>::shared(),
            );
        }

        #[test]
        fn metrics_follow_a_scripted_sequence() {
            conformance::metrics::metrics_follow_a_scripted_sequence(
                &<$kit as conformance::Kit>::shared(),
            );
        }

        #[test]
        fn errors_bad_input_is_invalid_argument() {
            conformance::errors::bad_input_is_invalid_argument(
                &<$kit as conformance::Kit>::shared(),
            );
        }

        #[test]
        fn errors_a_mismatched_semaphore_size_is_invalid_argument() {
            conformance::errors::a_mismatched_semaphore_size_is_invalid_argument(
                &<$kit as conformance::Kit>::shared(),
            );
        }

        #[test]
        fn errors_an_oversized_value_is_refused_and_costs_no_lock() {
            conformance::errors::an_oversized_value_is_refused_and_costs_no_lock(
                &<$kit as conformance::Kit>::shared(),
            );
        }

        #[test]
        fn errors_held_lost_and_closed_outcomes_are_the_same() {
            conformance::errors::held_lost_and_closed_outcomes_are_the_same(
                &<$kit as conformance::Kit>::shared(),
            );
        }

        #[test]
        fn fault_an_unanswered_read_is_timeout_and_an_unanswered_write_is_indeterminate() {
            conformance::outcomes::an_unanswered_read_is_timeout_and_an_unanswered_write_is_indeterminate(
                &<$kit as conformance::Kit>::own(),
            );
        }

        #[test]
        fn release_after_the_lease_is_gone_is_lease_lost() {
            conformance::outcomes::release_after_the_lease_is_gone_is_lease_lost(
                &<$kit as conformance::Kit>::shared(),
            );
        }

        #[test]
        fn fault_an_unconfirmed_release_is_indeterminate_and_still_frees_the_lock() {
            conformance::outcomes::an_unconfirmed_release_is_indeterminate_and_still_frees_the_lock(
                &<$kit as conformance::Kit>::own(),
            );
        }

        #[test]
        fn election_terms_fence_in_order_and_observers_follow() {
            conformance::election::terms_fence_in_order_and_observers_follow(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
            );
        }

        #[test]
        fn election_a_deleted_leader_cannot_proclaim() {
            conformance::election::a_deleted_leader_cannot_proclaim(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
            );
        }

        #[test]
        fn fault_killed_holder_frees_the_lock_within_the_lease() {
            conformance::killed_holder_frees_the_lock_within_the_lease(
                &<$kit as conformance::Kit>::own(),
                LEASE,
            );
        }

        #[test]
        fn fault_paused_holder_is_fenced_out() {
            conformance::paused_holder_is_fenced_out(&<$kit as conformance::Kit>::own(), LEASE);
        }

        #[test]
        fn fault_blackholed_holder_loses_before_another_acquires() {
            conformance::blackholed_holder_loses_before_another_acquires(
                &<$kit as conformance::Kit>::own(),
                LEASE,
            );
        }

        #[test]
        fn fault_latch_leader_killed_fails_over() {
            conformance::leader_failover(
                &<$kit as conformance::Kit>::own(),
                conformance::LeaderRecipe::Latch,
                conformance::Takeout::Kill,
                LEASE,
            );
        }

        #[test]
        fn fault_latch_leader_paused_is_fenced_out() {
            conformance::leader_failover(
                &<$kit as conformance::Kit>::own(),
                conformance::LeaderRecipe::Latch,
                conformance::Takeout::Pause,
                LEASE,
            );
        }

        #[test]
        fn fault_selector_leader_killed_fails_over() {
            conformance::leader_failover(
                &<$kit as conformance::Kit>::own(),
                conformance::LeaderRecipe::Selector,
                conformance::Takeout::Kill,
                LEASE,
            );
        }

        #[test]
        fn fault_selector_leader_paused_is_fenced_out() {
            conformance::leader_failover(
                &<$kit as conformance::Kit>::own(),
                conformance::LeaderRecipe::Selector,
                conformance::Takeout::Pause,
                LEASE,
            );
        }
    };
}
