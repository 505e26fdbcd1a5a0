//! The server's `maxmemory-policy`, checked before every session grant
//! (at connect, and after a lost session, as when a restarted server
//! lost every key): any policy but `noeviction` is refused. An `allkeys-*`
//! policy evicts any key, a `volatile-*` one keys with a TTL — and every
//! lock, session and hold key of ours has one; an evicted lock is a
//! second holder, an evicted fence key a fence that starts over.

use std::time::Duration;

use recipes_core::{Error, Result};

use crate::rpc::Redis;

/// The one policy under which Redis never evicts our keys.
const SAFE: &str = "noeviction";

/// `INFO memory cluster`: one round trip for both checks (Redis 7 reads
/// several sections); `None` when it is refused or failed.
async fn read_info(redis: &Redis, timeout: Duration) -> Option<String> {
    let mut info = redis::cmd("INFO");
    info.arg("memory").arg("cluster");
    redis.read("read INFO", timeout, info).await.ok()
}

/// The policy the server runs with: `INFO memory`'s `maxmemory_policy`
/// (allowed where `CONFIG` is renamed or denied), else `CONFIG GET
/// maxmemory-policy`; `None` when neither can be read.
async fn read_policy(info: Option<&str>, redis: &Redis, timeout: Duration) -> Option<String> {
    let field = info.and_then(|text| {
        text.lines()
            .find_map(|l| l.strip_prefix("maxmemory_policy:"))
            .map(|p| p.trim().to_owned())
    });
    if field.is_some() {
        return field;
    }
    let mut config = redis::cmd("CONFIG");
    config.arg("GET").arg("maxmemory-policy");
    let read: Result<Vec<String>> = redis.read("read maxmemory-policy", timeout, config).await;
    read.ok()?.get(1).cloned()
}

/// What is wrong with `policy` as the `maxmemory-policy` of the server at
/// `shown`, and what to set; `None` for `noeviction`. The one wording of
/// this hazard: the refusal at connect and `recipes doctor` both say it.
pub fn eviction_hazard(policy: &str, shown: &str) -> Option<String> {
    (policy != SAFE).then(|| {
        format!(
            "the Redis server at {shown} runs with maxmemory-policy {policy}, under which it \
             may evict lock and session keys (they carry a TTL) or fence keys: a second holder, \
             a repeated fence; set `maxmemory-policy noeviction` (CONFIG SET maxmemory-policy \
             noeviction, and in redis.conf)"
        )
    })
}

/// Why a Redis Cluster node at `shown` is refused, and what to use
/// instead. The one wording of this hazard: the refusal at connect and
/// `recipes doctor` both say it.
pub fn cluster_hazard(shown: &str) -> String {
    format!(
        "the Redis server at {shown} runs in cluster mode: a lock's scripts touch several keys \
         (session, hold, queue, fence) that a cluster spreads over slots, and a failover may \
         lose a lock; use one Redis node (with replicas and min-replicas-to-write), not a \
         cluster"
    )
}

/// Refuse a server whose `maxmemory-policy` may evict our keys, or that
/// runs in cluster mode; when the policy cannot be read, warn and go on
/// (the guarantees then assume `noeviction`).
///
/// # Errors
///
/// [`Error::InvalidArgument`] naming the policy (or cluster mode) and
/// what to set.
pub(crate) async fn check_eviction(redis: &Redis, shown: &str, timeout: Duration) -> Result<()> {
    let info = read_info(redis, timeout).await;
    // A cluster node says `cluster_enabled:1`; unread, go on (a cluster
    // then refuses the scripts).
    if info
        .as_deref()
        .is_some_and(|text| text.lines().any(|l| l.trim() == "cluster_enabled:1"))
    {
        return Err(Error::invalid(cluster_hazard(shown)));
    }
    match read_policy(info.as_deref(), redis, timeout).await {
        Some(policy) => match eviction_hazard(&policy, shown) {
            Some(hazard) => Err(Error::invalid(hazard)),
            None => Ok(()),
        },
        None => {
            log::warn!(
                "[url={shown}] cannot read maxmemory-policy (INFO memory and CONFIG GET were \
                 refused or failed); assuming noeviction: an evicting policy would evict locks \
                 and fences"
            );
            Ok(())
        }
    }
}
