//! Which replicas are alive now, with their addresses: group membership.
//!
//! ```sh
//! cargo run --example group_members                               # ZooKeeper at 127.0.0.1:2181
//! RECIPES_ETCD=127.0.0.1:2379 cargo run --example group_members
//! RECIPES_PG=postgres://127.0.0.1/app cargo run --example group_members
//! RECIPES_REDIS=redis://127.0.0.1:6379 cargo run --example group_members
//! ```
//!
//! Three replicas join the group `/examples/group/api` with their
//! addresses, each on its own client (its own session). A monitor watches
//! the group: it sees each join, then a replica that leaves, each view with
//! a version above the one before. A second join with a taken id is
//! refused.

#[path = "store.rs"]
mod store;

use std::time::Duration;

use recipes_core::{Client, Error};

const GROUP: &str = "/examples/group/api";

fn main() -> Result<(), Error> {
    store::on_store!(Duration::from_secs(5), client => run(&client))
}

fn run<C: Client>(client: &C) -> Result<(), Error> {
    let mut watch = client.group(GROUP)?.watch()?;
    let mut replicas = Vec::new();
    for (id, addr) in [("api-1", "10.0.0.1:8080"), ("api-2", "10.0.0.2:8080")] {
        replicas.push(client.group(GROUP)?.join(id, addr.as_bytes())?);
    }
    let mut version = watch.last().version;
    while watch.last().members.len() < 2 {
        let change = watch
            .next_timeout(Duration::from_secs(10))?
            .expect("the joins are seen");
        assert!(change.view.version > version, "the versions rise");
        version = change.view.version;
        println!("monitor: joined {:?} (version {version})", change.joined);
    }
    let taken = client.group(GROUP)?.join("api-1", b"10.0.0.9:8080");
    match taken {
        Err(Error::InvalidArgument(why)) => println!("a second api-1 is refused: {why}"),
        other => panic!("a taken id must be refused, got {other:?}"),
    }
    let view = client.group(GROUP)?.members()?;
    for m in &view.members {
        println!("member {} at {}", m.id, String::from_utf8_lossy(&m.data));
    }
    replicas.remove(0).release()?;
    let change = watch
        .next_timeout(Duration::from_secs(10))?
        .expect("the leave is seen");
    println!(
        "monitor: {:?} left; members now {:?}",
        change.left,
        change.view.ids()
    );
    drop(replicas);
    Ok(())
}
