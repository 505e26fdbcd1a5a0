//! A transfer that needs two accounts at once, without deadlocking against
//! a transfer the other way: a multi-lock.
//!
//! ```sh
//! cargo run --example transfer                               # ZooKeeper at 127.0.0.1:2181
//! RECIPES_ETCD=127.0.0.1:2379 cargo run --example transfer
//! RECIPES_PG=postgres://127.0.0.1/app cargo run --example transfer
//! RECIPES_REDIS=redis://127.0.0.1:6379 cargo run --example transfer
//! ```
//!
//! Two threads, each with a multi-lock of its own on the one client
//! (processes would each have a client: the lock works the same), move money between alice and
//! bob in opposite directions, each transfer under a multi-lock of both
//! accounts. Taking two mutexes by hand in the order the transfer names
//! them deadlocks sooner or later (each holds one and waits for the
//! other); the multi-lock takes them in one order whatever the list says.
//! Each balance is written to the store fenced by its own account's lock.

#[path = "store.rs"]
mod store;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;
use recipes_core::{Client, Error};

const ALICE: &str = "/examples/accounts/alice";
const BOB: &str = "/examples/accounts/bob";
const ROUNDS: usize = 25;

fn main() -> Result<(), Error> {
    store::on_store!(Duration::from_secs(5), client => run(&client))
}

fn run<C: Client>(client: &C) -> Result<(), Error> {
    let balances = Arc::new(Mutex::new([100_i64, 100]));
    let ways = [(ALICE, BOB, 0, 1), (BOB, ALICE, 1, 0)];
    let threads: Vec<_> = ways
        .into_iter()
        .map(|(from, to, f, t)| {
            let multi = client.multi_lock(&[from, to])?;
            let balances = balances.clone();
            Ok(thread::spawn(move || -> Result<(), Error> {
                for _ in 0..ROUNDS {
                    let guard = multi.lock()?;
                    let after = {
                        let mut b = balances.lock();
                        b[f] -= 1;
                        b[t] += 1;
                        *b
                    };
                    guard.put(
                        from,
                        &format!("{from}-balance"),
                        after[f].to_string().as_bytes(),
                    )?;
                    guard.put(
                        to,
                        &format!("{to}-balance"),
                        after[t].to_string().as_bytes(),
                    )?;
                    guard.release()?;
                }
                Ok(())
            }))
        })
        .collect::<Result<_, Error>>()?;
    for t in threads {
        t.join().expect("a transfer thread")?;
    }
    let [a, b] = *balances.lock();
    println!(
        "{} transfers in opposite directions, no deadlock",
        2 * ROUNDS
    );
    println!("alice {a}, bob {b}: the total is still {}", a + b);
    let stored = client.read(&format!("{ALICE}-balance"))?;
    println!(
        "alice's balance in the store: {}",
        String::from_utf8_lossy(&stored.unwrap_or_default())
    );
    Ok(())
}
