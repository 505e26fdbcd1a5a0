//! Election properties, the same on every backend: terms fence in order,
//! observers follow leaders and proclaimed values, a timed-out campaign
//! leaves no entry, resigning hands over, and nothing is left at the end.

use std::time::Duration;

use super::{name, Kit};
use integration::{scale, wait_until};

/// The next leader change an observer reports, within the upper bound.
fn next_value(observer: &recipes_core::LeaderObserver, what: &str) -> String {
    let info = observer
        .recv_timeout(scale(Duration::from_secs(10)))
        .unwrap_or_else(|e| panic!("observer: no change ({what}): {e:?}"));
    String::from_utf8(info.value).expect("utf-8 value")
}

/// Campaign, proclaim, observe, try-campaign, resign and hand over between
/// clients of their own, asserting what the store shows at each step.
pub fn terms_fence_in_order_and_observers_follow<K: Kit>(kit: &K, ttl: Duration) {
    let name = name("election");
    let (a, b, c) = (
        kit.election(&name, ttl),
        kit.election(&name, ttl),
        kit.election(&name, ttl),
    );
    assert!(
        c.leader().unwrap().is_none(),
        "no leader before any campaign"
    );
    let observer = c.observe().unwrap();

    let first = a.campaign(b"a").unwrap();
    assert_eq!(next_value(&observer, "a campaigned"), "a");
    let leader = c.leader().unwrap().expect("a leads");
    assert_eq!(leader.holder, first.holder());
    assert_eq!(leader.value, b"a");
    first.proclaim(b"a, serving").unwrap();
    assert_eq!(next_value(&observer, "a proclaimed"), "a, serving");
    assert_eq!(c.leader().unwrap().unwrap().value, b"a, serving");

    // While a leads: a try-campaign and a timed one fail and leave nothing.
    assert!(c.try_campaign(b"c").unwrap().is_none());
    let timed = c.try_campaign_for(b"c", Duration::from_millis(200));
    assert!(timed.unwrap().is_none());
    assert_eq!(
        kit.entries_under(&name),
        vec![first.holder().to_owned()],
        "only the leader's entry is left"
    );

    let waiter = std::thread::spawn(move || b.campaign(b"b").map(|l| (l.token(), l)));
    wait_until(
        "b's entry is queued",
        scale(Duration::from_secs(10)),
        || kit.entries_under(&name).len() == 2,
    );
    let first_token = first.token();
    first.resign().unwrap();
    let (second_token, second) = waiter.join().unwrap().unwrap();
    assert!(
        second_token > first_token,
        "fences increase across terms: {first_token} then {second_token}"
    );
    assert_eq!(next_value(&observer, "b won"), "b");
    assert_eq!(c.leader().unwrap().unwrap().holder, second.holder());
    assert!(!second.is_lost());

    second.resign().unwrap();
    wait_until(
        "the election is empty",
        scale(Duration::from_secs(10)),
        || kit.entries_under(&name).is_empty(),
    );
    assert!(
        c.leader().unwrap().is_none(),
        "no leader after both resigned"
    );
}

/// A leader whose entry was deleted behind its back loses at once: its
/// loss signal fires and a proclaim is refused with `NotHeld`.
pub fn a_deleted_leader_cannot_proclaim<K: Kit>(kit: &K, ttl: Duration) {
    let name = name("election-deleted");
    let leadership = kit.election(&name, ttl).campaign(b"x").unwrap();
    kit.delete_entry(leadership.holder());
    assert!(
        leadership
            .lost()
            .wait_timeout(scale(Duration::from_secs(10)))
            .is_some(),
        "the loss signal fires when our entry is deleted"
    );
    match leadership.proclaim(b"late") {
        Err(recipes_core::Error::NotHeld { .. } | recipes_core::Error::LeaseLost { .. }) => {}
        other => panic!("a deleted leader's proclaim: {other:?}"),
    }
    assert!(
        kit.entries_under(&name).is_empty(),
        "nothing was re-created"
    );
}

/// A latch on a name that holds another recipe (a semaphore) cannot
/// campaign however often it retries: its events say so once, with the
/// typed refusal, and it leads nothing.
pub fn a_latch_that_cannot_campaign_says_so_once<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    use recipes_core::{Client, Error, LatchEvent};
    let client = kit.connect(Duration::from_secs(10)).expect("connect");
    let taken = name("latch-on-a-semaphore");
    let permit = client.semaphore(&taken, 2).unwrap().acquire().unwrap();
    let latch = client.leader_latch(&taken, "refused").unwrap();
    latch.start();
    let event = latch
        .events()
        .recv_timeout(scale(Duration::from_secs(10)))
        .expect("an event");
    match event {
        LatchEvent::Failed {
            error: Error::InvalidArgument(why),
        } => assert!(why.contains("semaphore"), "{why}"),
        other => panic!("a latch on a semaphore's name: {other:?}"),
    }
    // It retries meanwhile (from 50 ms apart), and says nothing more.
    let more = latch.events().recv_timeout(Duration::from_millis(500));
    assert!(more.is_err(), "a second event: {more:?}");
    assert!(!latch.has_leadership());
    latch.close().unwrap();
    permit.release().unwrap();
    let _ = client.close();
}

/// A latch or selector that waits in line and is closed has left the line
/// when `close` returns: a third client no longer lists it, so it can
/// never be seen as the leader once the leader goes. Several waiters in
/// turn, each closed and looked for at once: before the fix the removal
/// raced the look, and lost it in about one round of three.
pub fn closed_waiters_have_left_the_line<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    closed_waiters_have_left(kit, super::LeaderRecipe::Latch);
    closed_waiters_have_left(kit, super::LeaderRecipe::Selector);
}

fn closed_waiters_have_left<K: Kit>(kit: &K, recipe: super::LeaderRecipe)
where
    K::Client: recipes_core::Client,
{
    use recipes_core::Client;
    let ttl = Duration::from_secs(10);
    let name = name("closed-waiter");
    let clients: Vec<K::Client> = (0..3).map(|_| kit.connect(ttl).expect("connect")).collect();
    let bound = scale(Duration::from_secs(10));
    let queued = |n: usize, ids: &dyn Fn() -> Vec<String>| {
        wait_until("the waiter is in line", bound, || ids().len() == n);
    };
    let left_after = |ids: &dyn Fn() -> Vec<String>, round: usize| {
        assert_eq!(
            ids(),
            ["leader"],
            "{recipe:?}, round {round}: the closed waiter is listed"
        );
    };
    match recipe {
        super::LeaderRecipe::Latch => {
            let third = clients[2].leader_latch(&name, "third").unwrap();
            let ids = || ids_of(third.participants().unwrap());
            let leader = clients[0].leader_latch(&name, "leader").unwrap();
            leader.start();
            assert!(leader.await_leadership(bound));
            for round in 0..ROUNDS {
                let waiter = clients[1].leader_latch(&name, "waiter").unwrap();
                waiter.start();
                queued(2, &ids);
                waiter.close().unwrap();
                left_after(&ids, round);
            }
            leader.close().unwrap();
        }
        super::LeaderRecipe::Selector => {
            let third = clients[2].leader_selector(&name, "third").unwrap();
            let ids = || ids_of(third.participants().unwrap());
            let leader = clients[0].leader_selector(&name, "leader").unwrap();
            leader
                .start(false, |term| {
                    term.lost().wait();
                })
                .unwrap();
            queued(1, &ids);
            for round in 0..ROUNDS {
                let waiter = clients[1].leader_selector(&name, "waiter").unwrap();
                waiter.start(false, |_| {}).unwrap();
                queued(2, &ids);
                waiter.close();
                left_after(&ids, round);
            }
            leader.close();
        }
    }
    for client in clients {
        let _ = client.close();
    }
}

/// How many waiters a closed-waiter test closes in turn.
const ROUNDS: usize = 6;

fn ids_of(participants: Vec<recipes_core::Participant>) -> Vec<String> {
    participants.into_iter().map(|p| p.id).collect()
}
