//! Take a ZooKeeper lock, write under its fence, release.
//!
//! ```sh
//! RECIPES_ZK=127.0.0.1:2181 cargo run --example zk_mutex
//! ```

use recipes_core::Client as _;
use std::time::Duration;

use recipes_core::{Error, FenceGate};
use recipes_zk::ZkClient;

fn main() -> Result<(), Error> {
    let hosts = std::env::var("RECIPES_ZK").unwrap_or_else(|_| "127.0.0.1:2181".into());
    let client = ZkClient::builder(hosts.as_str())
        .session_timeout(Duration::from_secs(10))
        .connect()?;
    println!(
        "connected to {hosts}: session timeout {:?}",
        client.session_timeout()
    );

    let mutex = client.mutex("/examples/zk-mutex")?;
    let Some(guard) = mutex.try_lock_for(Duration::from_secs(5))? else {
        println!("someone else holds /examples/zk-mutex; try again later");
        return Ok(());
    };
    println!("holding {} with fence {}", guard.holder(), guard.token());

    // The protected resource checks the fence: here an in-memory gate, in
    // real life a row with a fence column or a store-side check.
    let resource = FenceGate::new();
    resource.admit(guard.token())?;
    // A write fenced inside ZooKeeper itself: it lands only while our lock
    // node exists.
    guard.put(
        "/examples/zk-mutex-last-writer",
        guard.token().to_string().as_bytes(),
    )?;
    guard.check()?;
    println!("wrote under fence {}; releasing", guard.token());
    guard.release()?;
    let _ = client.close_within(Duration::from_secs(2));
    Ok(())
}
