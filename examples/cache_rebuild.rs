//! A cache that many replicas read while one rebuilds it: a distributed
//! read-write lock.
//!
//! ```sh
//! cargo run --example cache_rebuild                          # ZooKeeper at 127.0.0.1:2181
//! RECIPES_ETCD=127.0.0.1:2379 cargo run --example cache_rebuild
//! RECIPES_PG=postgres://127.0.0.1/app cargo run --example cache_rebuild
//! RECIPES_REDIS=redis://127.0.0.1:6379 cargo run --example cache_rebuild
//! ```
//!
//! Three reader threads, each with a handle of its own on the one client
//! (processes would each have a client: the lock works the same), read a
//! cache of eight entries under the read lock and check
//! that all entries are from one version. A rebuilder takes the write lock,
//! rewrites the entries one by one (slowly, so a reader that got in would
//! see a half-built cache), then downgrades to a read lock to check its own
//! work while no other writer can get in. The cache remembers the token of
//! the last rebuild and refuses a reader whose token is older: a read
//! token below the last write token means "you read before that write".

#[path = "store.rs"]
mod store;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;
use recipes_core::{Client, Error, FencingToken};

const NAME: &str = "/examples/cache-rebuild";
const ENTRIES: usize = 8;

/// The cache: its entries' versions, and the token of the last rebuild.
#[derive(Default)]
struct Cache {
    versions: Mutex<Vec<u32>>,
    last_write: Mutex<Option<FencingToken>>,
}

fn main() -> Result<(), Error> {
    store::on_store!(Duration::from_secs(5), client => run(&client))
}

fn run<C: Client>(client: &C) -> Result<(), Error> {
    let cache = Arc::new(Cache::default());
    *cache.versions.lock() = vec![1; ENTRIES];
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let rw = client.rw_lock(NAME)?;
            let (cache, stop, reads) = (cache.clone(), stop.clone(), reads.clone());
            Ok(thread::spawn(move || -> Result<(), Error> {
                while !stop.load(Ordering::SeqCst) {
                    let guard = rw.read()?;
                    let versions = cache.versions.lock().clone();
                    assert!(
                        versions.windows(2).all(|w| w[0] == w[1]),
                        "a half-built cache: {versions:?}"
                    );
                    if let Some(last) = *cache.last_write.lock() {
                        assert!(guard.token() > last, "a read token below the last write");
                    }
                    reads.fetch_add(1, Ordering::SeqCst);
                    guard.release()?;
                    thread::sleep(Duration::from_millis(5));
                }
                Ok(())
            }))
        })
        .collect::<Result<_, Error>>()?;
    thread::sleep(Duration::from_millis(200));
    let rw = client.rw_lock(NAME)?;
    let write = rw.write()?;
    println!(
        "rebuilder: write lock held, fence {}; readers wait",
        write.token()
    );
    for i in 0..ENTRIES {
        cache.versions.lock()[i] = 2;
        thread::sleep(Duration::from_millis(20));
    }
    *cache.last_write.lock() = Some(write.token());
    println!("rebuilt the cache to version 2 under the write lock");
    let read = write.downgrade()?;
    let versions = cache.versions.lock().clone();
    println!(
        "downgraded to a read lock (fence still {}): checked {} entries of version {}, no writer in between",
        read.token(),
        versions.len(),
        versions[0]
    );
    read.release()?;
    thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.join().expect("a reader thread")?;
    }
    println!(
        "readers never saw a half-built cache ({} reads, each of one version)",
        reads.load(Ordering::SeqCst)
    );
    Ok(())
}
