//! Reads of the server's settings, for a deployment check (`recipes
//! doctor`): each runs on the client's own connection, with its
//! credentials, within the RPC timeout.

use std::time::Duration;

use recipes_core::Result;

use crate::client::RedisClient;

impl RedisClient {
    /// The text of `INFO` (its default sections: server, memory,
    /// persistence, replication, cluster among them).
    ///
    /// # Errors
    ///
    /// [`recipes_core::Error::PermissionDenied`] when the user may not run
    /// `INFO`; connection errors within the RPC timeout.
    pub fn server_info(&self) -> Result<String> {
        let (redis, timeout) = (self.redis()?, self.rpc_timeout());
        self.call("read INFO", async move {
            redis.read("read INFO", timeout, redis::cmd("INFO")).await
        })
    }

    /// `CONFIG GET name`: `Ok(None)` when the server has no such setting.
    ///
    /// # Errors
    ///
    /// [`recipes_core::Error::PermissionDenied`] when the user may not run
    /// `CONFIG GET` (a managed Redis often renames or denies it);
    /// connection errors within the RPC timeout.
    pub fn server_config(&self, name: &str) -> Result<Option<String>> {
        let (redis, timeout) = (self.redis()?, self.rpc_timeout());
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg(name);
        let pairs: Vec<String> = self.call("read CONFIG", async move {
            redis.read("read CONFIG", timeout, cmd).await
        })?;
        Ok(pairs.get(1).cloned())
    }

    /// The server's clock (`TIME`), as time since the Unix epoch.
    ///
    /// # Errors
    ///
    /// Connection errors within the RPC timeout.
    pub fn server_time(&self) -> Result<Duration> {
        let (redis, timeout) = (self.redis()?, self.rpc_timeout());
        let (secs, micros): (u64, u64) = self.call("read TIME", async move {
            redis.read("read TIME", timeout, redis::cmd("TIME")).await
        })?;
        Ok(Duration::from_secs(secs) + Duration::from_micros(micros))
    }
}
