//! A read of the server's clock, for a deployment check (`recipes
//! doctor`): ZooKeeper exposes no clock, but every write stamps its node
//! with the leader's time (the `mtime`, in milliseconds), so an ephemeral
//! node of the session's own, written again and again, reads it.

use std::time::Duration;

use recipes_core::{Error, Result};
use zookeeper_client as zk;

use crate::client::ZkClient;
use crate::error::from_zk;

/// An ephemeral node whose `mtime` reads the leader's clock; see
/// [`ZkClient::clock_node`]. Dropping it deletes the node (its session's
/// end would too).
#[derive(Debug)]
pub struct ZkClockNode {
    client: ZkClient,
    path: String,
}

impl ZkClient {
    /// Create the ephemeral node `<prefix>-<session id>` (for its `mtime`,
    /// the leader's clock at each write), and its parents as containers
    /// (which the server deletes once empty) when missing.
    ///
    /// # Errors
    ///
    /// [`Error::PermissionDenied`] when the ACL of `prefix`'s parent
    /// forbids creating it; connection errors within the RPC timeout.
    pub fn clock_node(&self, prefix: &str) -> Result<ZkClockNode> {
        crate::names::validate_path(prefix)?;
        let me = self.clone();
        let prefix = prefix.to_owned();
        let path = self.call("create the clock node", async move {
            let session = me.live_session().await?;
            let path = format!("{prefix}-{:x}", session.id());
            let options = session.options(zk::CreateMode::Ephemeral);
            let mut made_parent = false;
            loop {
                return match session.zk().create(&path, &[], &options).await {
                    Ok(_) | Err(zk::Error::NodeExists) => Ok(path),
                    Err(zk::Error::NoNode) if !made_parent => {
                        // A container parent, as a lock's: the server
                        // deletes it once it is empty.
                        let parent = &path[..path.rfind('/').unwrap_or(0)];
                        let container = session.options(zk::CreateMode::Container);
                        match session.zk().mkdir(parent, &container).await {
                            Ok(()) | Err(zk::Error::NodeExists) => {}
                            Err(e) => return Err(from_zk(&format!("create {parent}"), e)),
                        }
                        made_parent = true;
                        continue;
                    }
                    Err(e) => Err(from_zk(&format!("create {path}"), e)),
                };
            }
        })?;
        Ok(ZkClockNode {
            client: self.clone(),
            path,
        })
    }
}

impl ZkClockNode {
    /// Write the node (one round trip): the leader's clock at the write,
    /// as time since the epoch, in whole milliseconds.
    ///
    /// # Errors
    ///
    /// Connection errors within the RPC timeout.
    pub fn touch(&self) -> Result<Duration> {
        let (client, path) = (self.client.clone(), self.path.clone());
        self.client.call("write the clock node", async move {
            let session = client.live_session().await?;
            let stat = session
                .zk()
                .set_data(&path, &[], None)
                .await
                .map_err(|e| from_zk(&format!("write {path}"), e))?;
            u64::try_from(stat.mtime)
                .map(Duration::from_millis)
                .map_err(|_| Error::invalid(format!("{path} has the mtime {}", stat.mtime)))
        })
    }

    /// The node's path.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl Drop for ZkClockNode {
    fn drop(&mut self) {
        let (client, path) = (self.client.clone(), self.path.clone());
        let _ = self.client.call("delete the clock node", async move {
            let session = client.live_session().await?;
            match session.zk().delete(&path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                Err(e) => Err(from_zk(&format!("delete {path}"), e)),
            }
        });
    }
}
