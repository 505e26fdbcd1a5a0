//! Property 5: latch and selector failover between worker processes, the
//! leader killed or paused.

use std::time::Duration;

use integration::test_dir::TestDir;
use integration::worker::{worker_binary, Worker};
use integration::{scale, wait_for};
use recipes_core::{BootInstant, FenceGate, FencingToken};

use super::{boot, field, name, token_of, Kit};

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
