//! Barrier and double barrier in the layouts of etcd's Go
//! `client/v3/experimental/recipes`, as the store's verbs of the core wait
//! shape ([`recipes_core::store::engine::gather`]).
//!
//! - **Barrier** (`recipe.Barrier`): the key `<name>` exists = the barrier
//!   is up (put if absent, with an empty value; on our lease when tied to
//!   the setter's session).
//! - **Double barrier** (`recipe.DoubleBarrier`): a member is the key
//!   `<name>/waiters/<lease hex>-<n>` on its session's lease (Go's is
//!   `<name>/waiters/<unix nanos>`: any key under `waiters/` is a member),
//!   the flag the key `<name>/ready`.
//!
//! A wait first opens a synced watch (on `<name>`, or on the prefix
//! `<name>/`), then reads: every change after the read is heard.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use recipes_core::store::engine::gather::{
    BarrierStore, DoubleBarrierStore, Flag, Gathering, Member,
};
use recipes_core::store::engine::WaitStore;
use recipes_core::store::{check_count, LeaseEpoch, OnRuntime};
use recipes_core::{Error, LossSignal, Result};

use crate::client::EtcdClient;
use crate::key::delete_until_done;
use crate::names::{is_contender, key_prefix, permit_key, size_key, validate_name};
use crate::rpc::{from_etcd, read_at, retrying_txn};
use crate::session::{Etcd, Session};
use crate::watch::Watch;

/// A barrier or double barrier on one name of a client.
#[derive(Debug, Clone)]
pub struct EtcdWaits {
    pub(crate) client: EtcdClient,
    pub(crate) name: String,
    pub(crate) count: u32,
}

/// An etcd barrier (the layout of Go's `recipe.Barrier`).
pub type Barrier = recipes_core::Barrier<EtcdWaits>;
/// An etcd double barrier (the layout of Go's `recipe.DoubleBarrier`).
pub type DoubleBarrier = recipes_core::DoubleBarrier<EtcdWaits>;

impl EtcdWaits {
    pub(crate) fn barrier(client: &EtcdClient, name: &str) -> Result<EtcdWaits> {
        validate_name("barrier", name)?;
        Ok(EtcdWaits {
            client: client.clone(),
            name: name.to_owned(),
            count: 0,
        })
    }

    pub(crate) fn double(client: &EtcdClient, name: &str, count: u32) -> Result<EtcdWaits> {
        validate_name("double barrier", name)?;
        check_count(&format!("the etcd double barrier {name}"), count)?;
        Ok(EtcdWaits {
            client: client.clone(),
            name: name.to_owned(),
            count,
        })
    }

    fn prefix(&self) -> String {
        key_prefix(&self.name)
    }

    fn waiters(&self) -> String {
        format!("{}waiters/", self.prefix())
    }

    fn ready(&self) -> String {
        format!("{}ready", self.prefix())
    }

    /// Refuse the name when a key under `<name>/` is in another recipe's
    /// layout: a lock's or an election's contender, a semaphore's size
    /// (and, for a barrier, a double barrier's members or flag). Keys of
    /// names nested below it never count.
    fn refuse_others(&self, keys: &[Vec<u8>], barrier: bool) -> Result<()> {
        let (prefix, waiters, ready) = (self.prefix(), self.waiters(), self.ready());
        let config = size_key(&prefix);
        let theirs = keys.iter().find(|k| {
            let double = k.starts_with(waiters.as_bytes()) || k.as_slice() == ready.as_bytes();
            is_contender(&prefix, k) || k.as_slice() == config.as_bytes() || (barrier && double)
        });
        match theirs {
            None => Ok(()),
            Some(key) => {
                let ours = if barrier {
                    "a barrier"
                } else {
                    "a double barrier"
                };
                let what = "keys of another recipe (a lock, an election, a semaphore or a \
                            double barrier)";
                Err(crate::names::other_layout(&prefix, ours, what, key))
            }
        }
    }

    pub(crate) fn etcd(&self) -> Result<Etcd> {
        self.client.leases().store()
    }
}

/// The lease session a wait or a member lives on.
pub struct Epoch(pub(crate) LeaseEpoch<Etcd>);

impl std::fmt::Debug for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Epoch({:x})", self.0.session.id())
    }
}

/// A synced watch opened before the read it follows.
#[derive(Debug)]
pub struct Changes(pub(crate) Watch);

impl OnRuntime for EtcdWaits {
    fn runtime(&self) -> &recipes_core::store::Runtime {
        self.client.runtime()
    }
}

impl WaitStore for EtcdWaits {
    type Epoch = Epoch;
    type Watch = Changes;

    fn name(&self) -> &str {
        &self.name
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        if !self.client.runtime().spawn(task) {
            log::debug!("[{}] client closed: the lease removes our key", self.name);
        }
    }

    fn rpc_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }

    async fn epoch(&self) -> Result<Epoch> {
        self.client.leases().epoch().await.map(Epoch)
    }

    fn epoch_signal(&self, epoch: &Epoch) -> LossSignal {
        epoch.0.session.epoch().signal()
    }

    async fn changed(&self, _epoch: &Epoch, watch: Changes) -> Result<()> {
        let Changes(mut watch) = watch;
        loop {
            if !watch.next().await?.events().is_empty() {
                return Ok(());
            }
        }
    }
}

impl BarrierStore for EtcdWaits {
    async fn is_set(&self, _epoch: &Epoch) -> Result<(bool, Changes)> {
        let etcd = self.etcd()?;
        let watch = Watch::key(&etcd, &self.name, self.rpc_timeout()).await?;
        let under = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_limit(100);
        let txn = Txn::new().and_then([
            TxnOp::get(
                self.name.as_str(),
                Some(GetOptions::new().with_count_only()),
            ),
            TxnOp::get(self.prefix(), Some(under)),
        ]);
        let what = format!("read the barrier {}", self.name);
        let resp = retrying_txn(&etcd, &what, self.rpc_timeout(), &txn).await?;
        let under: Vec<Vec<u8>> = read_at(&resp, 1)?
            .kvs()
            .iter()
            .map(|kv| kv.key().to_vec())
            .collect();
        self.refuse_others(&under, true)?;
        Ok((read_at(&resp, 0)?.count() > 0, Changes(watch)))
    }

    async fn set(&self, epoch: &Epoch, tied: bool) -> Result<()> {
        let etcd = self.etcd()?;
        let options = tied.then(|| PutOptions::new().with_lease(epoch.0.session.id()));
        let absent = Compare::create_revision(self.name.as_str(), CompareOp::Equal, 0);
        let txn = Txn::new()
            .when([absent])
            .and_then([TxnOp::put(self.name.as_str(), "", options)]);
        let what = format!("set the barrier {}", self.name);
        retrying_txn(&etcd, &what, self.rpc_timeout(), &txn).await?;
        Ok(())
    }

    async fn remove(&self, _epoch: &Epoch) -> Result<()> {
        let mut etcd = self.etcd()?;
        etcd.delete(self.name.as_str(), None)
            .await
            .map_err(|e| from_etcd(&format!("remove the barrier {}", self.name), e))?;
        Ok(())
    }
}

/// Names our member: its session and key, and its create revision once
/// known.
#[derive(Debug)]
pub struct Ticket {
    session: Arc<Session>,
    key: String,
    create_revision: Option<i64>,
}

impl DoubleBarrierStore for EtcdWaits {
    type Ticket = Ticket;

    fn count(&self) -> u32 {
        self.count
    }

    fn ticket(&self, epoch: &Epoch) -> Ticket {
        Ticket {
            session: epoch.0.session.clone(),
            key: permit_key(&self.waiters(), epoch.0.session.id()),
            create_revision: None,
        }
    }

    async fn join(&self, epoch: &Epoch, ticket: &mut Ticket) -> Result<i64> {
        let etcd = self.etcd()?;
        let key = ticket.key.as_str();
        let absent = Compare::create_revision(key, CompareOp::Equal, 0);
        let put = TxnOp::put(
            key,
            "",
            Some(PutOptions::new().with_lease(epoch.0.session.id())),
        );
        let txn = Txn::new()
            .when([absent])
            .and_then([put])
            .or_else([TxnOp::get(key, None)]);
        let resp = retrying_txn(&etcd, &format!("put {key}"), self.rpc_timeout(), &txn).await?;
        let created = if resp.succeeded() {
            crate::rpc::header_revision(&resp)?
        } else {
            // Ours, from a put whose reply was lost.
            let got = read_at(&resp, 0)?;
            let kv = got
                .kvs()
                .first()
                .ok_or_else(|| crate::rpc::unexpected("a vanished key"))?;
            if kv.lease() != epoch.0.session.id() {
                return Err(Error::backend(
                    format!("{key} exists on another lease"),
                    true,
                    std::io::Error::other("key taken"),
                ));
            }
            kv.create_revision()
        };
        ticket.create_revision = Some(created);
        Ok(created)
    }

    fn is_ours(ticket: &Ticket, member: &str) -> bool {
        ticket.key == member
    }

    async fn read(&self, _epoch: &Epoch) -> Result<(Gathering, Changes)> {
        let etcd = self.etcd()?;
        let watch = Watch::prefix(&etcd, &self.prefix(), self.rpc_timeout()).await?;
        let txn = Txn::new().and_then([
            TxnOp::get(self.ready(), None),
            TxnOp::get(
                self.prefix(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            ),
        ]);
        let what = format!("read the double barrier {}", self.name);
        let resp = retrying_txn(&etcd, &what, self.rpc_timeout(), &txn).await?;
        let flag = read_at(&resp, 0)?.kvs().first().map(|kv| Flag {
            set_at: kv.mod_revision(),
            version: kv.mod_revision(),
        });
        let got = read_at(&resp, 1)?;
        let under = got.kvs();
        let keys: Vec<Vec<u8>> = under.iter().map(|kv| kv.key().to_vec()).collect();
        self.refuse_others(&keys, false)?;
        let waiters = self.waiters();
        let members = (under.iter())
            .filter(|kv| kv.key().starts_with(waiters.as_bytes()))
            .map(|kv| Member {
                name: String::from_utf8_lossy(kv.key()).into_owned(),
                created: Some(kv.create_revision()),
            })
            .collect();
        Ok((Gathering { flag, members }, Changes(watch)))
    }

    async fn mark(&self, _epoch: &Epoch, stale: Option<Flag>) -> Result<()> {
        let etcd = self.etcd()?;
        let ready = self.ready();
        let seen = match stale {
            None => Compare::create_revision(ready.as_str(), CompareOp::Equal, 0),
            Some(f) => Compare::mod_revision(ready.as_str(), CompareOp::Equal, f.version),
        };
        let txn = Txn::new()
            .when([seen])
            .and_then([TxnOp::put(ready.as_str(), "", None)]);
        // Not applied: someone else set it since our read; we read again.
        retrying_txn(&etcd, &format!("put {ready}"), self.rpc_timeout(), &txn).await?;
        Ok(())
    }

    async fn unmark(&self, _epoch: &Epoch, flag: Flag) -> Result<()> {
        let etcd = self.etcd()?;
        let ready = self.ready();
        let same = Compare::mod_revision(ready.as_str(), CompareOp::Equal, flag.version);
        let txn = Txn::new()
            .when([same])
            .and_then([TxnOp::delete(ready.as_str(), None)]);
        retrying_txn(&etcd, &format!("delete {ready}"), self.rpc_timeout(), &txn).await?;
        Ok(())
    }

    fn remove(ticket: Ticket) -> impl Future<Output = ()> + Send + 'static {
        let turns = recipes_core::store::Turns::new(None, None);
        delete_until_done(ticket.session, ticket.key, ticket.create_revision, turns)
    }
}
