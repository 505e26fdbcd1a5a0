//! [`EtcdClient`] as the one client surface of `recipes-core`
//! ([`recipes_core::Client`]): recipes by name in etcd's `concurrency`
//! layout, contenders in create order, linearizable reads.

use std::time::{Duration, Instant};

use recipes_core::{BootInstant, Client, Contender, Result};

use crate::barrier::{Barrier, DoubleBarrier, EtcdWaits};
use crate::client::EtcdClient;
use crate::names::{key_prefix, validate_key, validate_name};
use crate::observe::read_queue;
use crate::rpc::{from_etcd, retrying_get};

impl Client for EtcdClient {
    type Barrier = EtcdWaits;

    fn barrier(&self, name: &str) -> Result<Barrier> {
        Ok(Barrier::from_backend(EtcdWaits::barrier(self, name)?))
    }

    fn double_barrier(&self, name: &str, count: u32) -> Result<DoubleBarrier> {
        Ok(DoubleBarrier::from_backend(EtcdWaits::double(
            self, name, count,
        )?))
    }

    fn store(&self) -> &'static str {
        "etcd"
    }

    // Each latch or selector is a handle of its own (see `EtcdClient`).
    /// The keys exactly one level below `<name>/`, oldest first (the
    /// lowest create revision holds or leads); for a read-write lock its
    /// readers' and writers' keys in queue order, with their roles (a
    /// downgraded writer's key as a reader's; its marker is not listed).
    fn contenders(&self, name: &str) -> Result<Vec<Contender>> {
        validate_name("lock", name)?;
        let prefix = key_prefix(name);
        self.read_with("list contenders", move |etcd, timeout| async move {
            read_queue(&etcd, timeout, &prefix).await
        })
    }

    fn permits(&self, name: &str) -> Result<(Option<u32>, Vec<Contender>)> {
        validate_name("semaphore", name)?;
        let size = self
            .read(&format!("{name}/config"))?
            .and_then(|v| String::from_utf8_lossy(&v).parse().ok());
        Ok((size, self.contenders(&format!("{name}/leases"))?))
    }

    fn read(&self, key: &str) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        let key = key.to_owned();
        self.read_with("read", move |etcd, timeout| async move {
            let resp = retrying_get(&etcd, timeout, &key, None).await?;
            Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
        })
    }

    /// The client's own lease; a guard's `session_id` names the lease its
    /// key is bound to (a single-use one, perhaps).
    fn session_id(&self) -> Option<i64> {
        self.leases().current().map(|s| s.id())
    }

    /// The TTL etcd granted the current lease (which may be more than
    /// asked: etcd raises a TTL below its minimum). Zero once closed.
    fn granted_ttl(&self) -> Duration {
        self.leases().granted_ttl()
    }

    fn valid_until(&self) -> Option<BootInstant> {
        self.leases().valid_until()
    }

    /// A status request to a member.
    fn ping(&self) -> Result<Duration> {
        let mut etcd = self.leases().store()?;
        let started = Instant::now();
        self.call("ping", async move {
            etcd.status().await.map_err(|e| from_etcd("ping", e))?;
            Ok(started.elapsed())
        })
    }

    fn last_acknowledged(&self) -> Option<BootInstant> {
        self.leases().last_acknowledged()
    }

    fn close_within(&self, grace: Duration) -> Result<()> {
        self.leases().close_within(grace)
    }

    type Counter = crate::counter::EtcdCounter;

    /// The key `name` holding the value as decimal text; see
    /// [`EtcdCounter`](crate::counter::EtcdCounter).
    fn counter_of(
        &self,
        name: &str,
        kind: recipes_core::CounterKind,
    ) -> Result<recipes_core::Counter<crate::counter::EtcdCounter>> {
        let backend = crate::counter::EtcdCounter::new(self, name, kind)?;
        Ok(recipes_core::Counter::from_backend(backend))
    }

    type Group = crate::barrier::EtcdWaits;

    /// Members are the keys `<name>/<id>` on each member's lease; see
    /// [`Group`](crate::Group).
    fn group(&self, name: &str) -> Result<crate::Group> {
        Ok(crate::Group::from_backend(
            crate::barrier::EtcdWaits::group(self, name)?,
        ))
    }
}
