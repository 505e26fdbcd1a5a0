//! Follow an election from the outside: who leads, and what value the
//! leader proclaims.
//!
//! ```sh
//! cargo run --example election_observe                        # ZooKeeper at 127.0.0.1:2181
//! RECIPES_ETCD=127.0.0.1:2379 cargo run --example election_observe
//! RECIPES_REDIS=redis://127.0.0.1:6379 cargo run --example election_observe
//! ```
//!
//! An observer watches the election `/examples/election-observe`. Two
//! campaigners, alice and bob, campaign; alice wins, proclaims a few values
//! and resigns; bob, who was waiting, takes over, proclaims and resigns. The
//! observer prints each change as the store reports it. What an observer sees is
//! news, not proof: only a `Leadership` (with its fence) proves leadership.

use std::thread;
use std::time::Duration;

use recipes_core::{Client, Error};

const NAME: &str = "/examples/election-observe";
const TTL: Duration = Duration::from_secs(5);

fn main() -> Result<(), Error> {
    if let Ok(url) = std::env::var("RECIPES_REDIS") {
        println!("connecting to Redis at {url}");
        let connect = || {
            recipes_redis::RedisClient::builder(url.as_str())
                .ttl(TTL)
                .connect()
        };
        return run(connect()?, connect()?, connect()?);
    }
    let zk = std::env::var("RECIPES_ZK").ok();
    match (zk, std::env::var("RECIPES_ETCD").ok()) {
        (None, Some(endpoint)) => {
            println!("connecting to etcd at {endpoint}");
            let connect = || {
                recipes_etcd::EtcdClient::builder([endpoint.as_str()])
                    .ttl(TTL)
                    .connect()
            };
            run(connect()?, connect()?, connect()?)
        }
        (hosts, _) => {
            let hosts = hosts.unwrap_or_else(|| "127.0.0.1:2181".into());
            println!("connecting to ZooKeeper at {hosts}");
            let connect = || {
                recipes_zk::ZkClient::builder(hosts.as_str())
                    .ttl(TTL)
                    .connect()
            };
            run(connect()?, connect()?, connect()?)
        }
    }
}

/// The same code for every store. One client per participant, as if each
/// ran on its own machine.
fn run<C: Client>(watcher: C, alice: C, bob: C) -> Result<(), Error> {
    let observer = watcher.election(NAME)?.observe()?;
    println!("observer: watching {NAME}");
    let follow = thread::spawn(move || {
        // Stops once nothing has changed for 3 s (the story is over).
        while let Ok(leader) = observer.recv_timeout(Duration::from_secs(3)) {
            println!(
                "observer: leader is {} with value {:?}",
                leader.holder,
                String::from_utf8_lossy(&leader.value)
            );
        }
        println!("observer: no change for 3 s; stopping");
    });

    let election = alice.election(NAME)?;
    let leadership = election.campaign(b"alice: starting")?;
    println!("alice: won the election, fence {}", leadership.token());

    // bob campaigns too, and waits in line behind alice.
    let bob_election = bob.election(NAME)?;
    let bob_turn = thread::spawn(move || -> Result<(), Error> {
        println!("bob: campaigning (waits while alice leads)");
        let leadership = bob_election.campaign(b"bob: taking over")?;
        println!("bob: won the election, fence {}", leadership.token());
        thread::sleep(Duration::from_millis(800));
        leadership.proclaim(b"bob: all done")?;
        println!("bob: proclaimed \"bob: all done\"");
        thread::sleep(Duration::from_millis(800));
        leadership.resign()?;
        println!("bob: resigned");
        Ok(())
    });

    for value in ["alice: step 1", "alice: step 2", "alice: step 3"] {
        thread::sleep(Duration::from_millis(800));
        leadership.proclaim(value.as_bytes())?;
        println!("alice: proclaimed {value:?}");
    }
    thread::sleep(Duration::from_millis(800));
    leadership.resign()?;
    println!("alice: resigned");

    bob_turn.join().expect("bob panicked")?;
    follow.join().expect("the observer panicked");
    for client in [alice, bob, watcher] {
        let _ = client.close_within(Duration::from_secs(2));
    }
    println!("done");
    Ok(())
}
