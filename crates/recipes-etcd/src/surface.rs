//! [`EtcdClient`] as the one client surface of `recipes-core`
//! ([`recipes_core::Client`]), and fenced writes with the same signature
//! as every backend's ([`FencedWrites`]).

use std::time::Duration;

use etcd_client::{GetOptions, SortOrder, SortTarget};
use recipes_core::{BootInstant, Client, Contender, Result};

use crate::client::EtcdClient;
use crate::election::{Election, EtcdElection};
use crate::latch::LeaderLatch;
use crate::mutex::{EtcdMutex, Mutex};
use crate::names::{is_contender, key_prefix, validate_name};
use crate::rpc::retrying;
use crate::selector::LeaderSelector;
use crate::semaphore::{EtcdSemaphore, Semaphore};

impl EtcdClient {
    /// A plain linearizable read of `key`: its value, `None` when it does
    /// not exist.
    ///
    /// # Errors
    ///
    /// Connection and read errors, after retrying within the RPC timeout.
    pub fn read(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let (client, key) = (self.clone(), key.to_owned());
        self.call("read", async move {
            let session = client.live_session().await?;
            let etcd = session.etcd()?;
            let resp = retrying(&format!("read {key}"), session.rpc_timeout(), || {
                let (mut etcd, key) = (etcd.clone(), key.clone());
                async move { etcd.get(key, None).await }
            })
            .await?;
            Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
        })
    }

    /// The keys exactly one level below `<name>/`, oldest first: the
    /// contenders of the mutex or election `name`, in the order the recipe
    /// uses (the lowest create revision holds or leads).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](recipes_core::Error::InvalidArgument) for
    /// a name etcd recipes refuse; connection and read errors.
    pub fn contenders(&self, name: &str) -> Result<Vec<Contender>> {
        validate_name(name)?;
        let (client, prefix) = (self.clone(), key_prefix(name));
        self.call("list contenders", async move {
            let session = client.live_session().await?;
            let etcd = session.etcd()?;
            let options = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend);
            let resp = retrying(&format!("list {prefix}"), session.rpc_timeout(), || {
                let (mut etcd, prefix, options) = (etcd.clone(), prefix.clone(), options.clone());
                async move { etcd.get(prefix, Some(options)).await }
            })
            .await?;
            Ok(resp
                .kvs()
                .iter()
                .filter(|kv| is_contender(&prefix, kv.key()))
                .map(|kv| Contender {
                    holder: String::from_utf8_lossy(kv.key()).into_owned(),
                    created: kv.create_revision(),
                    value: kv.value().to_vec(),
                })
                .collect())
        })
    }
}

impl Client for EtcdClient {
    type Mutex = EtcdMutex;
    type Semaphore = EtcdSemaphore;
    type Election = EtcdElection;

    fn store(&self) -> &'static str {
        "etcd"
    }

    fn mutex(&self, name: &str) -> Result<Mutex> {
        EtcdClient::mutex(self, name)
    }

    fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        EtcdClient::semaphore(self, name, permits)
    }

    fn election(&self, name: &str) -> Result<Election> {
        EtcdClient::election(self, name)
    }

    fn leader_latch(&self, name: &str, id: &str) -> Result<LeaderLatch> {
        EtcdClient::leader_latch(self, name, id)
    }

    fn leader_selector(&self, name: &str, id: &str) -> Result<LeaderSelector> {
        EtcdClient::leader_selector(self, name, id)
    }

    fn contenders(&self, name: &str) -> Result<Vec<Contender>> {
        EtcdClient::contenders(self, name)
    }

    fn permits(&self, name: &str) -> Result<(Option<u32>, Vec<Contender>)> {
        validate_name(name)?;
        let size = self
            .read(&format!("{name}/config"))?
            .and_then(|v| String::from_utf8_lossy(&v).parse().ok());
        Ok((
            size,
            EtcdClient::contenders(self, &format!("{name}/leases"))?,
        ))
    }

    fn read(&self, key: &str) -> Result<Option<Vec<u8>>> {
        EtcdClient::read(self, key)
    }

    fn session_id(&self) -> Option<i64> {
        EtcdClient::session_id(self)
    }

    fn granted_ttl(&self) -> Duration {
        self.session_ttl()
    }

    fn ping(&self) -> Result<Duration> {
        EtcdClient::ping(self)
    }

    fn last_acknowledged(&self) -> Option<BootInstant> {
        EtcdClient::last_acknowledged(self)
    }

    fn close_within(&self, grace: Duration) -> Result<()> {
        EtcdClient::close_within(self, grace)
    }
}
