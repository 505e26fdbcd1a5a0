//! The Redis mutex: a queue of members, the lock key `SET NX PX` by the
//! first live one, the fence minted in the same script (`contend.rs`).

use recipes_core::store::engine::{self, Rule};
use recipes_core::Result;
use tokio::time::Instant;

use crate::client::RedisClient;
use crate::contend::{Acquired, QueueContender};
use crate::names::{validate_name, Queue};

/// A handle of a lock or election name: what a mutex and an election
/// backend hold.
#[derive(Debug, Clone)]
pub(crate) struct NameHandle {
    pub(crate) client: RedisClient,
    pub(crate) name: String,
    pub(crate) queue: Queue,
}

impl NameHandle {
    /// A handle of `name`, checked as the name of a `what`.
    pub(crate) fn new(client: RedisClient, what: &str, name: &str) -> Result<NameHandle> {
        validate_name(what, name)?;
        Ok(NameHandle {
            client,
            name: name.to_owned(),
            queue: Queue::lock(name),
        })
    }

    /// Contend with `value` until ours or `deadline`.
    pub(crate) async fn contend(
        &self,
        value: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired>> {
        let driver = QueueContender {
            client: &self.client,
            queue: &self.queue,
            value,
            rule: Rule::Mutex,
        };
        engine::contend(&driver, deadline).await
    }
}

/// A mutex in Redis (the layout is in the crate's documentation); see
/// [`recipes_core::Mutex`] for the API and what holds under pause and
/// partition. Made by [`Client::mutex`](crate::Client::mutex).
pub type Mutex = recipes_core::Mutex<RedisMutex>;

/// The Redis mutex backend: core's queue lock over this client's verbs
/// (`locks.rs`); use it through [`Mutex`].
pub type RedisMutex = recipes_core::store::QueueLock<RedisClient>;
