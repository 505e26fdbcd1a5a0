//! Reading facts from etcd for assertions: does a key exist, which keys are
//! under a prefix, how long does a lease live.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions};

use crate::env::scale;
use crate::facts::{self, QUERY_TIMEOUT};
use crate::logs::ServerLogs;

/// An etcd client used only to read facts, on the harness runtime.
///
/// One-shot queries panic on errors (with the server logs); `wait_*`
/// helpers retry errors until their deadline, so they ride out a leader
/// election.
pub struct EtcdFacts {
    client: Client,
    endpoints: Vec<String>,
    logs: ServerLogs,
}

impl std::fmt::Debug for EtcdFacts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdFacts")
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

impl EtcdFacts {
    /// A client of `endpoints`; `logs` are quoted in panics.
    ///
    /// # Panics
    ///
    /// When the client cannot be built within 10 s (scaled).
    pub fn connect(endpoints: &[String], logs: ServerLogs) -> EtcdFacts {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(scale(QUERY_TIMEOUT))
            // Without keep-alive a black-holed connection never recovers.
            .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2));
        let client = facts::connect(
            &format!("{endpoints:?}"),
            "connection to",
            Client::connect(endpoints, Some(options)),
            &logs,
        );
        EtcdFacts {
            client,
            endpoints: endpoints.to_vec(),
            logs,
        }
    }

    /// The quoted server logs.
    pub fn logs(&self) -> &ServerLogs {
        &self.logs
    }

    /// A clone of the underlying client (cheap; shares the connection).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    fn query<T, F>(&self, what: &str, call: impl FnOnce(Client) -> F) -> Result<T, String>
    where
        F: Future<Output = Result<T, etcd_client::Error>>,
    {
        facts::query(what, &self.target(), call(self.client.clone()))
    }

    /// The endpoints, as messages name them.
    fn target(&self) -> String {
        format!("{:?}", self.endpoints)
    }

    fn or_panic<T>(&self, result: Result<T, String>) -> T {
        facts::or_panic(result, &self.logs)
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        let key = key.to_owned();
        self.query(&format!("get {key}"), |mut client| async move {
            let response = client.get(key, None).await?;
            Ok(response.kvs().first().map(|kv| kv.value().to_vec()))
        })
    }

    fn try_keys(&self, prefix: &str) -> Result<Vec<String>, String> {
        let prefix = prefix.to_owned();
        self.query(&format!("keys under {prefix}"), |mut client| async move {
            let options = GetOptions::new().with_prefix().with_keys_only();
            let response = client.get(prefix, Some(options)).await?;
            let mut keys: Vec<String> = response
                .kvs()
                .iter()
                .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
                .collect();
            keys.sort();
            Ok(keys)
        })
    }

    fn try_lease_ttl(&self, lease: i64) -> Result<i64, String> {
        self.query(
            &format!("time-to-live of lease {lease:x}"),
            |mut client| async move { Ok(client.lease_time_to_live(lease, None).await?.ttl()) },
        )
    }

    /// Whether `key` exists.
    ///
    /// # Panics
    ///
    /// When the query fails; the message quotes the server logs.
    pub fn exists(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The value of `key`, `None` when it does not exist.
    ///
    /// # Panics
    ///
    /// When the query fails; the message quotes the server logs.
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.or_panic(self.try_get(key))
    }

    /// Put `key` = `value` (no lease), as another program would.
    ///
    /// # Panics
    ///
    /// When the put fails; the message quotes the server logs.
    pub fn put(&self, key: &str, value: &[u8]) {
        let (key, value) = (key.to_owned(), value.to_vec());
        let put = self.query(&format!("put {key}"), |mut client| async move {
            client.put(key, value, None).await.map(drop)
        });
        self.or_panic(put)
    }

    /// Delete `key`, as an operator would with `etcdctl del`.
    ///
    /// # Panics
    ///
    /// When the delete fails; the message quotes the server logs.
    pub fn delete(&self, key: &str) {
        let key = key.to_owned();
        let deleted = self.query(&format!("delete {key}"), |mut client| async move {
            client.delete(key, None).await.map(drop)
        });
        self.or_panic(deleted)
    }

    /// The keys starting with `prefix`, sorted.
    ///
    /// # Panics
    ///
    /// When the query fails; the message quotes the server logs.
    pub fn keys_with_prefix(&self, prefix: &str) -> Vec<String> {
        self.or_panic(self.try_keys(prefix))
    }

    /// The remaining TTL of `lease` in seconds as the server sees it; `-1`
    /// when the lease is gone (expired or revoked).
    ///
    /// # Panics
    ///
    /// When the query fails; the message quotes the server logs.
    pub fn lease_time_to_live(&self, lease: i64) -> i64 {
        self.or_panic(self.try_lease_ttl(lease))
    }

    /// The ids of every lease the server holds, sorted (`etcdctl lease
    /// list`).
    ///
    /// # Panics
    ///
    /// When the query fails; the message quotes the server logs.
    pub fn leases(&self) -> Vec<i64> {
        let leases = self.query("lease list", |mut client| async move {
            let response = client.leases().await?;
            let mut ids: Vec<i64> = response.leases().iter().map(|l| l.id()).collect();
            ids.sort_unstable();
            Ok(ids)
        });
        self.or_panic(leases)
    }

    /// Waits until `key` exists.
    ///
    /// # Panics
    ///
    /// After `upper_bound` (scaled); the message quotes the server logs.
    pub fn wait_exists(&self, key: &str, upper_bound: Duration) {
        self.wait_on(&format!("{key} exists"), upper_bound, || {
            self.try_get(key).map(|v| v.is_some())
        });
    }

    /// Waits until `key` is gone.
    ///
    /// # Panics
    ///
    /// After `upper_bound` (scaled); the message quotes the server logs.
    pub fn wait_gone(&self, key: &str, upper_bound: Duration) {
        self.wait_on(&format!("{key} is gone"), upper_bound, || {
            self.try_get(key).map(|v| v.is_none())
        });
    }

    /// Waits until the server reports `lease` gone (time-to-live −1).
    ///
    /// # Panics
    ///
    /// After `upper_bound` (scaled); the message quotes the server logs.
    pub fn wait_lease_gone(&self, lease: i64, upper_bound: Duration) {
        self.wait_on(&format!("lease {lease:x} is gone"), upper_bound, || {
            self.try_lease_ttl(lease).map(|ttl| ttl == -1)
        });
    }

    /// Waits until the sorted keys under `prefix` satisfy `condition` and
    /// returns them.
    ///
    /// # Panics
    ///
    /// After `upper_bound` (scaled); the message quotes the last keys seen
    /// and the server logs.
    pub fn wait_keys(
        &self,
        prefix: &str,
        desc: &str,
        upper_bound: Duration,
        condition: impl FnMut(&[String]) -> bool,
    ) -> Vec<String> {
        facts::wait_names(
            &format!("keys under {prefix} {desc}"),
            upper_bound,
            || self.try_keys(prefix),
            condition,
            &self.logs,
        )
    }

    fn wait_on(
        &self,
        desc: &str,
        upper_bound: Duration,
        probe: impl FnMut() -> Result<bool, String>,
    ) {
        facts::wait_true(
            &format!("{desc} on {}", self.target()),
            upper_bound,
            probe,
            &self.logs,
        );
    }
}
