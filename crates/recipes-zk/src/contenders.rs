//! A path's contenders as the recipes order them — the children named as a
//! recipe's nodes (Curator's `_c_<uuid>-lock-<seq>`, `-latch-`, `-lease-`,
//! a read-write lock's `-__READ__` and `-__WRIT__`, kazoo's
//! `…__lock__<seq>`), by serial-number arithmetic over the
//! sequence, so the wrap of the parent's counter keeps the order — for
//! tools that show who holds and who waits (`recipes status`) and for the
//! latch's participants.

use recipes_core::store::engine::Role;
use recipes_core::{Contender, Result};
use zookeeper_client as zk;

use crate::error::from_zk;
use crate::names::{is_contender_of, observed_order, LATCH, LEASE, LOCK, READ, WRITE};

/// Every recipe's node names.
const NAMES: [&str; 5] = [LOCK, LATCH, LEASE, READ, WRITE];

/// A contender's role by its node's lock name.
fn role_of(name: &str) -> Option<Role> {
    [
        (LOCK, Role::Mutex),
        (LATCH, Role::Participant),
        (LEASE, Role::Permit),
        (READ, Role::Reader),
        (WRITE, Role::Writer),
    ]
    .into_iter()
    .find(|(lock_name, _)| is_contender_of(name, lock_name))
    .map(|(_, role)| role)
}

/// The children of `dir` named as a recipe's nodes, in queue order, each with
/// its czxid and data. A node released between the listing and its read
/// is left out; a missing `dir` has none.
pub(crate) async fn read_queue(zk: &zk::Client, dir: &str) -> Result<Vec<Contender>> {
    let children = match zk.list_children(dir).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(Vec::new()),
        Err(e) => return Err(from_zk(&format!("list {dir}"), e)),
    };
    // Only the recipes' own names: a mutex's or selector's `lock-`, a
    // latch's or election's `latch-`, a permit's `lease-`, a read-write
    // lock's reader or writer (kazoo's `__lock__` too); never an unrelated
    // `job-0000000000`.
    let children: Vec<String> = children
        .into_iter()
        .filter(|c| NAMES.iter().any(|l| is_contender_of(c, l)))
        .collect();
    let mut queue = Vec::new();
    for (_, name) in observed_order(&children) {
        let path = format!("{dir}/{name}");
        match zk.get_data(&path).await {
            Ok((value, stat)) => queue.push(Contender {
                holder: path,
                created: stat.czxid,
                value,
                role: role_of(&name),
            }),
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(from_zk(&format!("read {path}"), e)),
        }
    }
    Ok(queue)
}
