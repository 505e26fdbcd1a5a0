//! At most N workers at once, across threads, processes and machines: each
//! worker takes a permit of a distributed semaphore before it works.
//!
//! ```sh
//! cargo run --example semaphore_pool                         # ZooKeeper at 127.0.0.1:2181
//! RECIPES_ZK=127.0.0.1:2181 cargo run --example semaphore_pool
//! RECIPES_ETCD=127.0.0.1:2379 cargo run --example semaphore_pool
//! RECIPES_REDIS=redis://127.0.0.1:6379 cargo run --example semaphore_pool
//! ```
//!
//! Six worker threads share two permits. A counter shows how many work at
//! the same moment: never more than two. Run it in two terminals at once and
//! the two processes share the same two permits (each counter then shows
//! only its own workers).

use recipes_core::Client as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use recipes_core::store::SemaphoreBackend;
use recipes_core::{Error, Semaphore};

const NAME: &str = "/examples/semaphore-pool";
const PERMITS: u32 = 2;
const WORKERS: usize = 6;

fn main() -> Result<(), Error> {
    if let Ok(url) = std::env::var("RECIPES_REDIS") {
        let client = recipes_redis::RedisClient::builder(url.as_str())
            .ttl(Duration::from_secs(5))
            .connect()?;
        println!("connected to Redis at {url}");
        run(&client.semaphore(NAME, PERMITS)?)?;
        let _ = client.close_within(Duration::from_secs(2));
        return Ok(());
    }
    let zk = std::env::var("RECIPES_ZK").ok();
    match (zk, std::env::var("RECIPES_ETCD").ok()) {
        (None, Some(endpoint)) => {
            let client = recipes_etcd::EtcdClient::builder([endpoint.as_str()])
                .ttl(Duration::from_secs(5))
                .connect()?;
            println!("connected to etcd at {endpoint}");
            run(&client.semaphore(NAME, PERMITS)?)?;
            let _ = client.close_within(Duration::from_secs(2));
        }
        (hosts, _) => {
            let hosts = hosts.unwrap_or_else(|| "127.0.0.1:2181".into());
            let client = recipes_zk::ZkClient::builder(hosts.as_str())
                .ttl(Duration::from_secs(5))
                .connect()?;
            println!("connected to ZooKeeper at {hosts}");
            run(&client.semaphore(NAME, PERMITS)?)?;
            let _ = client.close_within(Duration::from_secs(2));
        }
    }
    Ok(())
}

/// The same code for both backends: it only needs the core `Semaphore`.
fn run<B: SemaphoreBackend>(semaphore: &Semaphore<B>) -> Result<(), Error> {
    println!(
        "{WORKERS} workers share {} permits of {}: at most {} work at once",
        semaphore.permits(),
        semaphore.name(),
        semaphore.permits()
    );
    let busy = AtomicUsize::new(0);
    let most = AtomicUsize::new(0);
    let started = Instant::now();
    thread::scope(|s| {
        let workers: Vec<_> = (1..=WORKERS)
            .map(|i| {
                let (busy, most) = (&busy, &most);
                s.spawn(move || -> Result<(), Error> {
                    println!("[{:>5.2}s] worker {i} waits for a permit", secs(started));
                    let Some(permit) = semaphore.try_acquire_for(Duration::from_secs(15))? else {
                        println!("worker {i}: no permit within 15 s, giving up");
                        return Ok(());
                    };
                    let now = busy.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    println!(
                        "[{:>5.2}s] worker {i} enters  ({now} of {PERMITS} permits in use here)",
                        secs(started)
                    );
                    // The work. A long job would also watch permit.lost().
                    thread::sleep(Duration::from_millis(700));
                    permit.check()?;
                    let left = busy.fetch_sub(1, Ordering::SeqCst) - 1;
                    println!(
                        "[{:>5.2}s] worker {i} leaves  ({left} of {PERMITS} permits in use here)",
                        secs(started)
                    );
                    permit.release()
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a worker panicked"))
    })?;
    let most = most.load(Ordering::SeqCst);
    println!("done: at most {most} workers ran at the same moment (limit {PERMITS})");
    assert!(most <= PERMITS as usize);
    Ok(())
}

fn secs(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}
