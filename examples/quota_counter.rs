//! A quota shared by workers in different processes, with a shared counter,
//! and a count-down latch that tells the coordinator when all are done.
//!
//! ```sh
//! cargo run --example quota_counter                               # ZooKeeper at 127.0.0.1:2181
//! RECIPES_ETCD=127.0.0.1:2379 cargo run --example quota_counter
//! RECIPES_PG=postgres://127.0.0.1/app cargo run --example quota_counter
//! RECIPES_REDIS=redis://127.0.0.1:6379 cargo run --example quota_counter
//! ```
//!
//! Four workers, each with its own client, take units of a quota of 10 by
//! compare-and-set: a unit is taken only if the counter still holds the
//! value the worker read and it is below the quota, so the quota is never
//! exceeded however they race. Each worker counts the latch down when it
//! finds the quota spent; the coordinator waits on the latch.

#[path = "store.rs"]
mod store;

use std::thread;
use std::time::Duration;

use recipes_core::{Client, Error};

const QUOTA: &str = "/examples/quota/units";
const DONE: &str = "/examples/quota/done";
const LIMIT: i64 = 10;
const WORKERS: u32 = 4;

fn main() -> Result<(), Error> {
    store::on_store!(Duration::from_secs(5), client => run(&client))
}

/// Take units until the quota is spent; how many this worker took.
fn work<C: Client>(client: &C) -> Result<i64, Error> {
    let quota = client.counter(QUOTA)?;
    let mut took = 0;
    loop {
        let seen = quota.get()?;
        if seen.value >= LIMIT {
            client.count_down_latch(DONE)?.count_down()?;
            return Ok(took);
        }
        if quota.set_if(seen.version, seen.value + 1)? {
            took += 1;
        }
    }
}

fn run<C: Client>(client: &C) -> Result<(), Error> {
    // A fresh start, also after an earlier run was interrupted.
    client.counter(QUOTA)?.delete()?;
    let latch = client.count_down_latch(DONE)?;
    latch.counter().delete()?;
    assert!(latch.try_set_count(WORKERS)?);
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let client = client.clone();
            thread::spawn(move || work(&client))
        })
        .collect();
    let opened = latch.wait_timeout(Duration::from_secs(60))?;
    let took: Vec<i64> = workers
        .into_iter()
        .map(|w| w.join().expect("a worker thread"))
        .collect::<Result<_, Error>>()?;
    println!(
        "{WORKERS} workers took {:?} units: {} of a quota of {LIMIT}",
        took,
        took.iter().sum::<i64>()
    );
    let quota = client.counter(QUOTA)?.get()?;
    println!(
        "the counter holds {} at version {}: never over the quota",
        quota.value, quota.version
    );
    if opened {
        println!("the latch opened: all {WORKERS} workers counted down");
    }
    client.counter(QUOTA)?.delete()?;
    latch.counter().delete()?;
    Ok(())
}
