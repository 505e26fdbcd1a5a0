//! [`RedisClient`] as the one client surface of `recipes-core`
//! ([`recipes_core::Client`]): recipes by name, contenders in queue order,
//! plain reads.

use std::time::{Duration, Instant};

use recipes_core::store::engine::Role;
use recipes_core::{BootInstant, Client, Contender, Result};

use crate::client::RedisClient;
use crate::names::{size_key, validate_key, validate_name, Queue};
use crate::queue_scripts;
use crate::rpc::{unexpected, Redis};

/// The live entries of `queue`, oldest first (the first holds or leads).
pub(crate) async fn read_contenders(
    redis: &Redis,
    queue: &Queue,
    timeout: Duration,
) -> Result<Vec<Contender>> {
    let what = format!("list the contenders of {}", queue.name);
    let args = queue.args("");
    let flat: Vec<redis::Value> = redis
        .idempotent(&what, timeout, &queue_scripts::CONTENDERS, &args)
        .await?;
    flat.chunks(4)
        .map(|c| {
            let parsed = redis::from_redis_value::<(String, f64, Vec<u8>, String)>(
                &redis::Value::Array(c.to_vec()),
            );
            let (member, place, value, role) = parsed.map_err(|_| unexpected(&what, c))?;
            let role = match role.as_str() {
                "read" => Some(Role::Reader),
                "write" => Some(Role::Writer),
                _ => None,
            };
            Ok(Contender {
                holder: queue.holder(&member),
                created: place as i64,
                value,
                role,
            })
        })
        .collect()
}

impl Client for RedisClient {
    /// Keys below `{recipes}:`; see [`RedisWaits`](crate::RedisWaits).
    type Barrier = crate::RedisWaits;

    fn barrier(&self, name: &str) -> Result<crate::Barrier> {
        Ok(crate::Barrier::from_backend(crate::RedisWaits::barrier(
            self, name,
        )?))
    }

    fn double_barrier(&self, name: &str, count: u32) -> Result<crate::DoubleBarrier> {
        let backend = crate::RedisWaits::double(self, name, count)?;
        Ok(crate::DoubleBarrier::from_backend(backend))
    }

    fn store(&self) -> &'static str {
        "redis"
    }

    /// The live members of the name's queue, in queue order; `created` is
    /// the member's place in it. A read-write lock's have their role
    /// ([`Role::Reader`], [`Role::Writer`]); a mutex's or an election's
    /// none.
    fn contenders(&self, name: &str) -> Result<Vec<Contender>> {
        validate_name("lock", name)?;
        let (queue, redis, timeout) = (Queue::lock(name), self.redis()?, self.rpc_timeout());
        self.call("list contenders", async move {
            read_contenders(&redis, &queue, timeout).await
        })
    }

    /// The name's fence key: the fence its last holder or leader minted
    /// (a semaphore's permits have none).
    fn holder_fence(&self, name: &str) -> Result<Option<u64>> {
        validate_name("lock", name)?;
        let (redis, timeout) = (self.redis()?, self.rpc_timeout());
        let mut get = redis::cmd("GET");
        get.arg(Queue::lock(name).fence_key());
        self.call("read the fence", async move {
            let fence: Option<u64> = redis.read("read the fence", timeout, get).await?;
            Ok(fence)
        })
    }

    fn permits(&self, name: &str) -> Result<(Option<u32>, Vec<Contender>)> {
        validate_name("semaphore", name)?;
        let (_, leases) = Queue::semaphore(name);
        let (redis, timeout) = (self.redis()?, self.rpc_timeout());
        let size_key = size_key(name);
        self.call("list permits", async move {
            let mut get = redis::cmd("GET");
            get.arg(&size_key);
            let size: Option<String> = redis.read("read the size", timeout, get).await?;
            let permits = read_contenders(&redis, &leases, timeout).await?;
            Ok((size.and_then(|s| s.parse().ok()), permits))
        })
    }

    fn read(&self, key: &str) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        let (redis, timeout) = (self.redis()?, self.rpc_timeout());
        let mut get = redis::cmd("GET");
        get.arg(key);
        self.call(
            "read",
            async move { redis.read("read", timeout, get).await },
        )
    }

    /// The client's own session.
    fn session_id(&self) -> Option<i64> {
        self.leases().current().map(|s| s.id())
    }

    /// The TTL asked, in whole milliseconds (Redis grants what is asked).
    /// Zero once closed.
    fn granted_ttl(&self) -> Duration {
        self.leases().granted_ttl()
    }

    fn valid_until(&self) -> Option<BootInstant> {
        self.leases().valid_until()
    }

    /// A `PING`.
    fn ping(&self) -> Result<Duration> {
        let (redis, timeout) = (self.redis()?, self.rpc_timeout());
        let started = Instant::now();
        self.call("ping", async move {
            let _: String = redis.read("ping", timeout, redis::cmd("PING")).await?;
            Ok(started.elapsed())
        })
    }

    fn last_acknowledged(&self) -> Option<BootInstant> {
        self.leases().last_acknowledged()
    }

    fn close_within(&self, grace: Duration) -> Result<()> {
        self.leases().close_within(grace)
    }

    type Counter = crate::counter::RedisCounter;

    /// The hash `{recipes}:count:<name>`; see
    /// [`RedisCounter`](crate::counter::RedisCounter).
    fn counter_of(
        &self,
        name: &str,
        kind: recipes_core::CounterKind,
    ) -> Result<recipes_core::Counter<crate::counter::RedisCounter>> {
        let backend = crate::counter::RedisCounter::new(self, name, kind)?;
        Ok(recipes_core::Counter::from_backend(backend))
    }

    type Group = crate::barrier::RedisWaits;

    /// Our layout; see [`Group`](crate::Group).
    fn group(&self, name: &str) -> Result<crate::group::Group> {
        Ok(crate::group::Group::from_backend(
            crate::barrier::RedisWaits::group(self, name)?,
        ))
    }
}
