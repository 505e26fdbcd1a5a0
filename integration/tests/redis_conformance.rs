//! The conformance suite against a single Redis node over mutual TLS
//! (`--tls-auth-clients yes`): the recipes above the transport are the
//! same without TLS, which the other Redis tests use. Tests whose
//! names contain `fault` get their own server and run one at a time.

mod conformance;

use recipes_core::Client as _;
use std::net::SocketAddr;
use std::time::Duration;

use conformance::{Kit, Server};
use integration::{RedisConfig, RedisServer, TestPki};
use recipes_redis::{RedisClient, RedisClientBuilder, RedisElection, RedisMutex};

const NS: &str = "{recipes}:";

/// A kit on a plain server, or over mutual TLS when `TLS`.
struct RedisKit<const TLS: bool = false> {
    server: Server<RedisServer>,
}

impl<const TLS: bool> RedisKit<TLS> {
    fn config() -> RedisConfig {
        RedisConfig {
            tls: TLS.then(|| TestPki::shared().server_tls(true)),
            ..RedisConfig::default()
        }
    }

    /// A client of `addr` (`host:port`), over mutual TLS when `TLS`.
    fn builder(addr: impl std::fmt::Display) -> RedisClientBuilder {
        let builder = RedisClient::builder(addr.to_string());
        match TLS {
            true => builder.tls(TestPki::shared().client_tls()),
            false => builder,
        }
    }

    fn client(&self, addr: impl std::fmt::Display, ttl: Duration) -> RedisClient {
        Self::builder(addr).ttl(ttl).connect().expect("connect")
    }

    /// The queue and member a holder string (`<queue>/<member>`) names.
    fn split(holder: &str) -> (&str, &str) {
        holder
            .rsplit_once('/')
            .expect("a holder is <queue>/<member>")
    }

    /// The key that holds `member` of `queue` once it holds.
    fn hold_key(queue: &str, member: &str) -> String {
        match queue.ends_with("/leases") {
            true => format!("{NS}permit:{queue}:{member}"),
            false => format!("{NS}lock:{queue}"),
        }
    }

    /// Queued, and its session's key exists — what the scripts count as
    /// live (a hold of an expired session is free, its keys swept by the
    /// next comer).
    fn live(&self, queue: &str, member: &str) -> bool {
        let queued: Option<f64> = self
            .server
            .cmd(&["ZSCORE", &format!("{NS}q:{queue}"), member]);
        let session = member.split('-').next().unwrap_or_default();
        let session_exists: bool = self.server.cmd(&["EXISTS", &format!("{NS}s:{session}")]);
        queued.is_some() && session_exists
    }

    /// A group's members as its hash holds them (its version field `/v`
    /// too, should it be left alone).
    fn group_fields(&self, name: &str) -> Vec<String> {
        let mut fields: Vec<String> = self.server.cmd(&["HKEYS", &format!("{NS}g:{name}")]);
        if fields.len() > 1 {
            fields.retain(|f| f != "/v");
        }
        fields.into_iter().map(|f| format!("{name}/{f}")).collect()
    }

    fn members(&self, queue: &str) -> Vec<String> {
        self.server
            .cmd(&["ZRANGE", &format!("{NS}q:{queue}"), "0", "-1"])
    }
}

impl<const TLS: bool> Kit for RedisKit<TLS> {
    type Mutex = RedisMutex;

    fn shared() -> Self {
        let server = match TLS {
            true => RedisServer::shared_with(Self::config()),
            false => RedisServer::shared(),
        };
        RedisKit {
            server: Server::Shared(server),
        }
    }

    fn own() -> Self {
        RedisKit {
            server: Server::Own(Box::new(RedisServer::start_with(Self::config()))),
        }
    }

    fn mutex(&self, name: &str, ttl: Duration) -> recipes_redis::Mutex {
        self.client(self.server.addr(), ttl).mutex(name).unwrap()
    }

    type Client = RedisClient;

    fn connect(&self, ttl: Duration) -> recipes_core::Result<RedisClient> {
        Self::builder(self.server.addr()).ttl(ttl).connect()
    }

    fn connect_via(
        &self,
        proxy: SocketAddr,
        ttl: Duration,
        rpc_timeout: Duration,
    ) -> recipes_core::Result<RedisClient> {
        Self::builder(proxy)
            .ttl(ttl)
            .rpc_timeout(rpc_timeout)
            .connect()
    }

    type Election = RedisElection;

    fn election(&self, name: &str, ttl: Duration) -> recipes_redis::Election {
        self.client(self.server.addr(), ttl).election(name).unwrap()
    }

    /// The live members of the name's queues (a lock's, an election's, a
    /// semaphore's permits), as holders.
    fn entries_under(&self, name: &str) -> Vec<String> {
        [
            name.to_owned(),
            format!("{name}/leases"),
            format!("{name}/locks"),
        ]
        .iter()
        .flat_map(|queue| {
            self.members(queue)
                .into_iter()
                .filter(|m| self.live(queue, m))
                .map(move |m| format!("{queue}/{m}"))
        })
        .chain(self.group_fields(name))
        .collect()
    }

    /// Each waiter listens on the channel of the member ahead of it.
    fn all_waiters_watch(&self, name: &str, waiters: usize) -> bool {
        let members = self.members(name);
        if members.len() != waiters + 1 {
            return false;
        }
        let channels: Vec<String> =
            self.server
                .cmd(&["PUBSUB", "CHANNELS", &format!("{NS}gone:*")]);
        let listened = members
            .iter()
            .filter(|m| channels.contains(&format!("{NS}gone:{m}")))
            .count();
        listened == waiters
    }

    fn write_entry(&self, path: &str, value: &[u8]) {
        let value = String::from_utf8_lossy(value);
        let _: () = self.server.cmd(&["SET", path, &value]);
    }

    /// Removes the member and its hold, as an administrator would: nothing
    /// is published.
    fn delete_entry(&self, holder: &str) {
        let (queue, member) = Self::split(holder);
        let _: i64 = self
            .server
            .cmd(&["ZREM", &format!("{NS}q:{queue}"), member]);
        let key = Self::hold_key(queue, member);
        // A permit's key holds `<member> <fence>`.
        let held: Option<String> = self.server.cmd(&["GET", &key]);
        if held.is_some_and(|v| v == member || v.starts_with(&format!("{member} "))) {
            let _: i64 = self.server.cmd(&["DEL", &key]);
        }
        // A group's member: its fields (the group's hashes keep the rest).
        for hash in ["g", "go"] {
            let _: i64 = self
                .server
                .cmd(&["HDEL", &format!("{NS}{hash}:{queue}"), member]);
        }
    }

    fn mutex_via(&self, proxy: SocketAddr, name: &str, ttl: Duration) -> recipes_redis::Mutex {
        self.client(proxy, ttl).mutex(name).unwrap()
    }

    fn server_addr(&self) -> SocketAddr {
        self.server.addr()
    }

    fn worker_connect(&self, ttl: Duration) -> String {
        let connect = format!("connect redis {} {}", self.server.url(), ttl.as_millis());
        match TLS {
            true => format!("{connect} {}", TestPki::shared().worker_tls()),
            false => connect,
        }
    }

    fn exists(&self, holder: &str) -> bool {
        let (queue, member) = Self::split(holder);
        self.live(queue, member)
    }

    fn value(&self, resource: &str) -> Option<String> {
        self.server.cmd(&["GET", resource])
    }

    /// Redis grants the TTL asked, in milliseconds.
    fn granted(&self, ttl: Duration) -> Duration {
        ttl
    }

    /// Keys expire on time (a read expires them), but a waiter notices a
    /// holder whose session expired at its next poll, every 500 ms.
    fn expiry_granularity(&self) -> Duration {
        Duration::from_millis(500)
    }
}

/// The whole suite over mutual TLS.
mod tls {
    use super::{conformance, RedisKit};
    crate::conformance_suite!(RedisKit<true>);
    crate::process_suite!(RedisKit<true>);
}
