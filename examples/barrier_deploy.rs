//! A deploy in steps, with a barrier and a double barrier.
//!
//! ```sh
//! cargo run --example barrier_deploy                               # ZooKeeper at 127.0.0.1:2181
//! RECIPES_ETCD=127.0.0.1:2379 cargo run --example barrier_deploy
//! RECIPES_PG=postgres://127.0.0.1/app cargo run --example barrier_deploy
//! RECIPES_REDIS=redis://127.0.0.1:6379 cargo run --example barrier_deploy
//! ```
//!
//! The coordinator raises a barrier before it migrates the schema; three
//! app instances wait on it and start only once it is removed (a waiter
//! holds no thread in a polling loop: it waits on the store's change
//! notification). Then three batch workers meet at a double barrier: none
//! starts its shard before all three arrived, and none reports done before
//! all three finished. In a real deploy each would be its own process; a
//! barrier tied to the coordinator's session
//! (`client.barrier(name)?.tied_to_session()`) would fall if it crashed.

#[path = "store.rs"]
mod store;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use recipes_core::{Client, Error};

const STEP: &str = "/examples/deploy/migration";
const BATCH: &str = "/examples/deploy/batch";
const INSTANCES: usize = 3;

fn main() -> Result<(), Error> {
    store::on_store!(Duration::from_secs(5), client => run(&client))
}

fn run<C: Client>(client: &C) -> Result<(), Error> {
    let barrier = client.barrier(STEP)?;
    barrier.set()?;
    let migrated = Arc::new(AtomicBool::new(false));
    let waiting = Arc::new(AtomicUsize::new(0));
    let instances: Vec<_> = (1..=INSTANCES)
        .map(|i| {
            let (client, migrated, waiting) = (client.clone(), migrated.clone(), waiting.clone());
            thread::spawn(move || -> Result<bool, Error> {
                let b = client.barrier(STEP)?;
                waiting.fetch_add(1, Ordering::SeqCst);
                b.wait()?;
                let after = migrated.load(Ordering::SeqCst);
                println!("instance {i}: starting (the migration is done: {after})");
                Ok(after)
            })
        })
        .collect();
    while waiting.load(Ordering::SeqCst) < INSTANCES {
        thread::sleep(Duration::from_millis(10));
    }
    println!("the barrier is up: {INSTANCES} instances wait for the migration");
    thread::sleep(Duration::from_millis(300)); // the migration
    migrated.store(true, Ordering::SeqCst);
    barrier.remove()?;
    println!("migration done: barrier removed");
    let mut after = 0;
    for i in instances {
        after += usize::from(i.join().expect("an instance's thread")?);
    }
    println!("all {after} instances went on after the migration");

    let entered = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (1..=INSTANCES)
        .map(|w| {
            let (client, entered) = (client.clone(), entered.clone());
            thread::spawn(move || -> Result<usize, Error> {
                let member = client.double_barrier(BATCH, INSTANCES as u32)?.enter()?;
                let seen = entered.fetch_add(1, Ordering::SeqCst) + 1;
                println!("worker {w}: in, running its shard");
                member.leave()?;
                Ok(seen)
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a worker's thread")?;
    }
    println!(
        "all {} workers entered together and left together",
        entered.load(Ordering::SeqCst)
    );
    client.clone().close()
}
