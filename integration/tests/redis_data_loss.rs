//! Redis losing its data, against real `redis-server`s: after a
//! `FLUSHALL`, a `FLUSHDB` or a restart without persistence the next
//! fence is above every fence handed out before (the hybrid clock of
//! `scripts.rs`), the old holder's loss fires as soon as its client can
//! know (its poll or renewal), well before its TTL, and its fenced write
//! is refused. An evicting `maxmemory-policy` is refused before anything
//! is written. Every test breaks its server, so each has its own.

use std::time::Duration;

use integration::{scale, RedisServer};
use recipes_core::{Client, Error, FenceGate, LossReason};
use recipes_redis::RedisClient;

const NS: &str = "{recipes}:";

/// Long enough that only the poll or a renewal can tell the holder, not
/// its deadline.
const LONG_TTL: Duration = Duration::from_secs(30);

/// How soon a holder learns its keys are gone: one poll (500 ms) or one
/// renewal (TTL/3 of a short TTL), with room.
const NOTICED: Duration = Duration::from_secs(3);

fn connect(server: &RedisServer, ttl: Duration) -> RedisClient {
    RedisClient::builder(server.url())
        .ttl(ttl)
        .connect()
        .expect("connect")
}

/// A fence the lock `name` hands out now: taken and released.
fn take(m: &recipes_redis::Mutex) -> u64 {
    let g = m
        .try_lock_for(scale(Duration::from_secs(20)))
        .unwrap()
        .expect("the lock is free");
    let t = g.token().0;
    g.release().unwrap();
    t
}

/// A holder whose data `lose` wipes: a new holder gets a higher fence
/// (the resource then refuses the old one), the old holder's loss fires
/// within one poll — long before its TTL — and its fenced write is
/// refused.
fn a_holder_whose_data_is_lost(server: &RedisServer, lose: impl FnOnce()) {
    let lock = "/loss/held";
    let old_client = connect(server, LONG_TTL);
    let m = old_client.mutex(lock).unwrap();
    let before: Vec<u64> = (0..3).map(|_| take(&m)).collect();
    assert!(before.windows(2).all(|w| w[0] < w[1]), "{before:?}");
    let old = m.lock().unwrap();
    assert!(old.token().0 > before[2]);
    let gate = FenceGate::new();
    gate.admit(old.token()).expect("the first holder writes");
    lose();
    // A new client at once: before the old holder can know (the issue's
    // case, where the next holder got fence 1 again).
    let new_client = connect(server, LONG_TTL);
    let new = new_client
        .mutex(lock)
        .unwrap()
        .try_lock()
        .unwrap()
        .expect("the data loss freed the lock");
    assert!(
        new.token() > old.token(),
        "fence {:?} after {:?}: it must never go back",
        new.token(),
        old.token()
    );
    gate.admit(new.token()).expect("the new holder writes");
    assert!(
        gate.admit(old.token()).is_err(),
        "the old holder is fenced out"
    );
    let reason = old
        .lost()
        .wait_timeout(scale(NOTICED))
        .expect("the old holder learns its lock is gone, long before its TTL");
    assert_ne!(reason, LossReason::DeadlineExpired);
    assert!(old.check().is_err());
    let write = old.fenced_set("/loss/resource", "old");
    assert!(
        matches!(write, Err(Error::FenceRejected { .. })),
        "{write:?}"
    );
    new.fenced_set("/loss/resource", "new").unwrap();
    new.release().unwrap();
    drop(old);
    new_client.close().unwrap();
    old_client.close().unwrap();
}

#[test]
fn fault_flushall_while_held_fences_out_the_old_holder() {
    let server = RedisServer::start();
    a_holder_whose_data_is_lost(&server, || {
        server.cmd::<String>(&["FLUSHALL"]);
    });
}

#[test]
fn fault_flushdb_while_held_fences_out_the_old_holder() {
    let server = RedisServer::start();
    a_holder_whose_data_is_lost(&server, || {
        server.cmd::<String>(&["FLUSHDB"]);
    });
}

#[test]
fn fault_a_restart_without_persistence_while_held_fences_out_the_old_holder() {
    let server = RedisServer::start();
    assert_eq!(server.config().aof, None, "no persistence");
    a_holder_whose_data_is_lost(&server, || {
        server.kill();
        server.restart();
    });
}

/// A semaphore's permits and an election's terms are minted the same
/// way: a flush never lets one repeat.
#[test]
fn fault_flushall_never_repeats_a_term_of_an_election() {
    let server = RedisServer::start();
    let c = connect(&server, LONG_TTL);
    let e = c.election("/loss/election").unwrap();
    let first = e.campaign(b"a").unwrap();
    let term = first.token();
    server.cmd::<String>(&["FLUSHALL"]);
    first
        .lost()
        .wait_timeout(scale(NOTICED))
        .expect("the leader learns it lost");
    drop(first);
    let again = e.campaign(b"b").unwrap();
    assert!(again.token() > term, "{:?} after {term:?}", again.token());
    again.resign().unwrap();
    c.close().unwrap();
}

/// Both kinds of evicting policy are refused at connect, naming the
/// policy and what to set, and nothing is written.
#[test]
fn an_evicting_maxmemory_policy_is_refused_at_connect_and_leaves_nothing() {
    let server = RedisServer::start();
    for policy in [
        "allkeys-lru",
        "volatile-lru",
        "volatile-ttl",
        "allkeys-random",
    ] {
        server.cmd::<String>(&["CONFIG", "SET", "maxmemory-policy", policy]);
        let started = std::time::Instant::now();
        match RedisClient::connect(server.url()) {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains(policy), "{m}");
                assert!(m.contains("maxmemory-policy noeviction"), "{m}");
            }
            other => panic!("{policy}: {other:?}"),
        }
        assert!(started.elapsed() < scale(Duration::from_secs(5)));
        assert_eq!(
            server.keys("*"),
            Vec::<String>::new(),
            "{policy}: nothing written"
        );
    }
}

/// The policy is read again when a session is granted anew: here after a
/// flush lost the client's session while the server was switched to an
/// evicting policy (as a restart with another configuration would).
#[test]
fn fault_an_evicting_policy_is_refused_when_a_lost_session_is_granted_again() {
    let server = RedisServer::start();
    let c = connect(&server, LONG_TTL);
    let m = c.mutex("/loss/policy").unwrap();
    let held = m.lock().unwrap();
    server.cmd::<String>(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    server.cmd::<String>(&["FLUSHALL"]);
    held.lost()
        .wait_timeout(scale(NOTICED))
        .expect("the holder learns it lost");
    drop(held);
    // The session is found gone by the next script that names it.
    match m.try_lock_for(scale(Duration::from_secs(5))) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("allkeys-lru"), "{msg}"),
        other => panic!("{other:?}"),
    }
    let keys = server.keys(&format!("{NS}*"));
    assert_eq!(keys, Vec::<String>::new(), "nothing written");
    drop(c);
}

/// The queue's functions are one library on the server: flushed away (by
/// `FUNCTION FLUSH`, or a restart without persistence), the next call
/// loads it again and goes on; the fences still rise.
#[test]
fn the_queue_library_flushed_away_is_loaded_again_by_the_next_call() {
    let server = RedisServer::start();
    let c = connect(&server, Duration::from_secs(10));
    let m = c.mutex("/loss/library").unwrap();
    let before = take(&m);
    let libraries =
        || server.cmd::<redis::Value>(&["FUNCTION", "LIST", "LIBRARYNAME", "recipes_q*"]);
    assert_ne!(
        libraries(),
        redis::Value::Array(vec![]),
        "loaded by the first call"
    );
    let _: String = server.cmd(&["FUNCTION", "FLUSH"]);
    assert_eq!(libraries(), redis::Value::Array(vec![]), "flushed");
    assert!(
        take(&m) > before,
        "taken again after the flush, with a higher fence"
    );
    assert_ne!(libraries(), redis::Value::Array(vec![]), "loaded again");
    c.close().unwrap();
}

/// A holder whose keys went (its loss fired), then came back — an older
/// RDB restored, taken while it held — is refused every fenced write: its
/// client knows the lock was lost, though the store's check (the hold key
/// names its member, its session key is there) would let the write land.
#[test]
fn fault_a_lost_holder_is_refused_after_its_keys_come_back() {
    let server = RedisServer::start();
    let c = connect(&server, LONG_TTL);
    let held = c.mutex("/loss/revived").unwrap().lock().unwrap();
    held.fenced_set("/loss/revived-resource", "held").unwrap();
    let keys: Vec<String> = server.cmd(&["KEYS", "{recipes}:*"]);
    let saved: Vec<(String, String)> = keys
        .into_iter()
        .filter(|k| server.cmd::<String>(&["TYPE", k]) == "string")
        .map(|k| {
            let v: String = server.cmd(&["GET", &k]);
            (k, v)
        })
        .collect();
    for (k, _) in &saved {
        server.cmd::<i64>(&["DEL", k]);
    }
    held.lost()
        .wait_timeout(scale(NOTICED))
        .expect("the holder learns its keys are gone");
    for (k, v) in &saved {
        server.cmd::<String>(&["SET", k, v]);
    }
    for (what, write) in [
        (
            "fenced_set",
            held.fenced_set("/loss/revived-resource", "late"),
        ),
        ("put", held.put("/loss/revived-resource", b"late")),
    ] {
        assert!(
            matches!(write, Err(Error::FenceRejected { .. })),
            "a lost holder's {what}: {write:?}"
        );
    }
    let value: String = server.cmd(&["GET", "/loss/revived-resource"]);
    assert_eq!(value, "held", "only the write made while held");
    drop(held);
    c.close().unwrap();
}

/// A release the server lost (a restart that replayed an older AOF, an
/// older backup restored) brings back an entry of a client's live session
/// that no guard of it owns: here the lock's queue, hold key and the
/// session's index are restored as they were while it held. The client
/// finds the entry among its session's and removes it within about a TTL,
/// so the lock is free again; meanwhile every entry it owns stays — a lock it
/// holds throughout, a permit, a reader, a latch's leadership, four
/// threads taking one mutex in turn (`integration::owned`).
/// (Before, the lock stayed held by no one until that client closed.)
#[test]
fn fault_an_entry_a_lost_release_brought_back_is_removed_by_its_own_client() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(1);
    let a = connect(&server, ttl);
    let (lock, kept) = ("/loss/restored", "/loss/kept");
    let still = a.mutex(kept).unwrap().lock().unwrap();
    let held = a.mutex(lock).unwrap().lock().unwrap();
    let index = server.keys(&format!("{NS}h:*"));
    assert_eq!(index.len(), 1, "one session's index: {index:?}");
    let keys = [
        format!("{NS}q:{lock}"),
        format!("{NS}lock:{lock}"),
        index[0].clone(),
    ];
    let dumped: Vec<Vec<u8>> = keys.iter().map(|k| server.cmd(&["DUMP", k])).collect();
    held.release().unwrap();
    for (key, dump) in keys.iter().zip(&dumped) {
        let restore = redis::cmd("RESTORE")
            .arg(key)
            .arg(0)
            .arg(dump.as_slice())
            .arg("REPLACE")
            .clone();
        server.try_cmd::<String>(&restore).unwrap();
    }
    let b = connect(&server, ttl);
    integration::owned::a_restored_entry_is_released(&a, &b, lock, still.lost(), ttl * 4);
    still.check().unwrap();
    still.release().unwrap();
    b.close().unwrap();
    a.close().unwrap();
}
