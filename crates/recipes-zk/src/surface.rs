//! [`ZkClient`] as the one client surface of `recipes-core`
//! ([`recipes_core::Client`]): recipes by path in Curator's layouts,
//! contenders in queue order, reads after a `sync`.

use std::time::{Duration, Instant};

use recipes_core::{BootInstant, Client, Contender, Result};
use zookeeper_client as zk;

use crate::barrier::{DistributedBarrier, DistributedDoubleBarrier, ZkWaits};
use crate::client::ZkClient;
use crate::contenders::read_queue;
use crate::error::from_zk;
use crate::names::validate_path;

impl Client for ZkClient {
    type Barrier = ZkWaits;

    fn barrier(&self, path: &str) -> Result<DistributedBarrier> {
        Ok(DistributedBarrier::from_backend(ZkWaits::barrier(
            self, path,
        )?))
    }

    fn double_barrier(&self, path: &str, count: u32) -> Result<DistributedDoubleBarrier> {
        let backend = ZkWaits::double(self, path, count)?;
        Ok(DistributedDoubleBarrier::from_backend(backend))
    }

    fn store(&self) -> &'static str {
        "zk"
    }

    /// The children of `path` named as a recipe's nodes, in the order this
    /// crate's recipes queue them (see `contenders.rs`); empty when `path`
    /// does not exist.
    fn contenders(&self, path: &str) -> Result<Vec<Contender>> {
        validate_path(path)?;
        let (client, dir) = (self.clone(), path.to_owned());
        self.call("list contenders", async move {
            let session = client.live_session().await?;
            read_queue(session.zk(), &dir).await
        })
    }

    /// The size is the decimal data of `path` (`None` for a semaphore only
    /// Curator used: it stores none); the permits are `<path>/leases`.
    fn permits(&self, path: &str) -> Result<(Option<u32>, Vec<Contender>)> {
        let size = self
            .read(path)?
            .and_then(|data| String::from_utf8_lossy(&data).trim().parse().ok());
        Ok((size, self.contenders(&format!("{path}/leases"))?))
    }

    /// Preceded by a `sync`, so it sees every write acknowledged before the
    /// call.
    fn read(&self, path: &str) -> Result<Option<Vec<u8>>> {
        validate_path(path)?;
        let (client, path) = (self.clone(), path.to_owned());
        self.call("read", async move {
            let session = client.live_session().await?;
            let zk = session.zk();
            match zk.sync(&path).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(from_zk(&format!("sync {path}"), e)),
            }
            match zk.get_data(&path).await {
                Ok((data, _)) => Ok(Some(data)),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(from_zk(&format!("read {path}"), e)),
            }
        })
    }

    fn session_id(&self) -> Option<i64> {
        self.current().map(|s| s.id())
    }

    fn granted_ttl(&self) -> Duration {
        self.session_timeout()
    }

    /// An `exists("/")`.
    fn ping(&self) -> Result<Duration> {
        let client = self.clone();
        self.call("ping", async move {
            let session = client.live_session().await?;
            let started = Instant::now();
            session
                .zk()
                .check_stat("/")
                .await
                .map_err(|e| from_zk("ping", e))?;
            Ok(started.elapsed())
        })
    }

    /// Heartbeats included.
    fn last_acknowledged(&self) -> Option<BootInstant> {
        let session = self.current()?;
        session.current_epoch().last_acknowledged_send()
    }

    fn valid_until(&self) -> Option<BootInstant> {
        let session = self.current()?;
        session.current_epoch().valid_until()
    }

    fn close_within(&self, grace: Duration) -> Result<()> {
        ZkClient::close_within(self, grace)
    }

    type Counter = crate::counter::ZkCounter;

    /// Curator's `SharedCount` at `path` (a 64-bit counter: 8 bytes).
    fn counter_of(
        &self,
        path: &str,
        kind: recipes_core::CounterKind,
    ) -> Result<recipes_core::Counter<crate::counter::ZkCounter>> {
        let backend = crate::counter::ZkCounter::new(self, path, kind)?;
        Ok(recipes_core::Counter::from_backend(backend))
    }

    type Group = ZkWaits;

    /// Curator's `GroupMember` at `path`: a member is the ephemeral
    /// `<path>/<id>` holding its data.
    fn group(&self, path: &str) -> Result<crate::group::GroupMember> {
        Ok(crate::group::GroupMember::from_backend(ZkWaits::group(
            self, path,
        )?))
    }
}
