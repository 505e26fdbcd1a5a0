//! A path's contenders as the recipes order them, for tools that show who
//! holds and who waits (`recipes status`) and for the latch's participants.

use recipes_core::Result;
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::error::from_zk;
use crate::names::{is_contender_of, observed_order, validate_path, LATCH, LEASE, LOCK};

/// One node in the queue of a mutex, latch, selector or semaphore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedNode {
    /// The node's full path.
    pub path: String,
    /// The node's czxid: a mutex, latch or selector holder's fencing token.
    pub czxid: i64,
    /// The node's data: a latch or selector participant's id.
    pub data: Vec<u8>,
}

/// The children of `dir` named as a recipe's nodes, in queue order, each with
/// its czxid and data. A node released between the listing and its read
/// is left out; a missing `dir` has none.
pub(crate) async fn read_queue(zk: &zk::Client, dir: &str) -> Result<Vec<QueuedNode>> {
    let children = match zk.list_children(dir).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(Vec::new()),
        Err(e) => return Err(from_zk(&format!("list {dir}"), e)),
    };
    // Only the recipes' own names: a mutex's or selector's `lock-`, a
    // latch's or election's `latch-`, a permit's `lease-` (kazoo's
    // `__lock__` too); never an unrelated `job-0000000000`.
    let children: Vec<String> = children
        .into_iter()
        .filter(|c| [LOCK, LATCH, LEASE].iter().any(|l| is_contender_of(c, l)))
        .collect();
    let mut queue = Vec::new();
    for (_, name) in observed_order(&children) {
        let path = format!("{dir}/{name}");
        match zk.get_data(&path).await {
            Ok((data, stat)) => queue.push(QueuedNode {
                path,
                czxid: stat.czxid,
                data,
            }),
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(from_zk(&format!("read {path}"), e)),
        }
    }
    Ok(queue)
}

impl ZkClient {
    /// The contenders at `path` — its children named as a recipe's nodes
    /// (Curator's `_c_<uuid>-lock-<seq>`, `-latch-`, `-lease-`, kazoo's
    /// `…__lock__<seq>`) — in the order this crate's recipes queue them:
    /// serial-number arithmetic over the sequence, so the wrap of the
    /// parent's counter from 2147483647 to -2147483648 keeps the order. The
    /// first holds a mutex or leads a latch or selector; for a semaphore
    /// list `<path>/leases`, whose first N hold (see
    /// [`semaphore_size`](ZkClient::semaphore_size)). A snapshot, stale as
    /// soon as it is returned; empty when `path` does not exist.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a path ZooKeeper refuses; connection
    /// and read errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), recipes_zk::Error> {
    /// let client = recipes_zk::ZkClient::connect("127.0.0.1:2181")?;
    /// for (i, node) in client.contenders("/locks/nightly-report")?.iter().enumerate() {
    ///     let role = if i == 0 { "holder" } else { "waiter" };
    ///     println!("{role} {} fence={}", node.path, node.czxid);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn contenders(&self, path: &str) -> Result<Vec<QueuedNode>> {
        validate_path(path)?;
        let (client, dir) = (self.clone(), path.to_owned());
        self.call("list contenders", async move {
            let session = client.live_session().await?;
            read_queue(session.zk(), &dir).await
        })
    }

    /// The number of permits a semaphore at `path` stores (the decimal
    /// data of `path`); `None` when `path` does not exist or stores no size
    /// (not a semaphore, or one only Curator used: it stores none).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a path ZooKeeper refuses; connection
    /// and read errors.
    pub fn semaphore_size(&self, path: &str) -> Result<Option<u32>> {
        validate_path(path)?;
        let (client, path) = (self.clone(), path.to_owned());
        self.call("read a semaphore's size", async move {
            let session = client.live_session().await?;
            match session.zk().get_data(&path).await {
                Ok((data, _)) => Ok(String::from_utf8_lossy(&data).trim().parse().ok()),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(from_zk(&format!("read {path}"), e)),
            }
        })
    }
}
