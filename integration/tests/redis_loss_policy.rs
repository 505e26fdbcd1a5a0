//! The loss policy on Redis, against a real `redis-server` killed and
//! restarted with its data kept (`appendfsync always`): under
//! `OnDisconnect` the first request that finds the connection gone fires
//! the loss of every guard of the client, long before the TTL; under
//! `Deadline` (the default) the same restart loses nothing.

use std::time::Duration;

use integration::{scale, wait_until, RedisConfig, RedisServer};
use recipes_core::{BootInstant, Client, LossPolicy, LossReason};
use recipes_redis::RedisClient;

const TTL: Duration = Duration::from_secs(30);

fn durable() -> RedisServer {
    RedisServer::start_with(RedisConfig {
        aof: Some("always"),
        ..RedisConfig::default()
    })
}

fn connect(server: &RedisServer, policy: LossPolicy, ttl: Duration) -> RedisClient {
    let client = RedisClient::builder(server.url())
        .ttl(ttl)
        .loss_policy(policy)
        .connect()
        .expect("connect");
    assert_eq!(client.loss_policy(), policy);
    client
}

#[test]
fn fault_on_disconnect_a_server_restart_loses_every_guard_at_once() {
    let server = durable();
    let c = connect(&server, LossPolicy::OnDisconnect, TTL);
    let lock = c.mutex("/policy/lock").unwrap().lock().unwrap();
    let permit = c.semaphore("/policy/sem", 2).unwrap().acquire().unwrap();
    server.kill();
    for (what, lost) in [("lock", lock.lost()), ("permit", permit.lost())] {
        let reason = lost
            .wait_timeout(scale(Duration::from_secs(5)))
            .unwrap_or_else(|| panic!("the {what} is lost at the disconnect, not at its TTL"));
        assert_eq!(reason, LossReason::Disconnected, "{what}");
    }
    assert!(lock.check().is_err());
    server.restart();
    // The lost session is revoked once the server answers: its keys go
    // at once, not at the TTL.
    wait_until(
        "the lost session's lock is gone",
        scale(Duration::from_secs(10)),
        || server.keys("{recipes}:lock:*").is_empty(),
    );
    drop((lock, permit));
    let again = c
        .mutex("/policy/lock")
        .unwrap()
        .try_lock_for(scale(Duration::from_secs(10)))
        .unwrap()
        .expect("a new session takes the lock");
    again.release().unwrap();
    c.close().unwrap();
}

#[test]
fn fault_deadline_rides_out_a_server_restart_that_keeps_the_data() {
    let server = durable();
    let ttl = Duration::from_secs(6);
    let c = connect(&server, LossPolicy::Deadline, ttl);
    let lock = c.mutex("/policy/lock").unwrap().lock().unwrap();
    server.kill();
    let restarted = BootInstant::now();
    server.restart();
    wait_until("a renewal after the restart", scale(ttl / 2), || {
        c.last_acknowledged().is_some_and(|a| a > restarted)
    });
    lock.check().expect("still held: the restart kept the data");
    lock.release().unwrap();
    c.close().unwrap();
}
