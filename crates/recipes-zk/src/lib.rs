//! # recipes-zk
//!
//! The ZooKeeper backend of the `recipes` coordination library: a blocking
//! client whose session runs on its own runtime thread. Recipes (mutex,
//! semaphore, leader latch, leader selector) arrive on top of it with
//! Apache Curator's node layouts.
//!
//! ```no_run
//! # fn main() -> Result<(), recipes_core::Error> {
//! use std::time::Duration;
//! let client = recipes_zk::ZkClient::builder("127.0.0.1:2181")
//!     .session_timeout(Duration::from_secs(10))
//!     .connect()?;
//! println!("session timeout granted: {:?}", client.session_timeout());
//! client.ping()?;
//! client.close(Duration::from_secs(2));
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]
#![deny(missing_debug_implementations)]

mod client;
mod error;
mod latch;
mod lock_internals;
mod mutex;
mod names;
mod node_lease;
mod selector;
mod semaphore;
mod session;

pub use client::{
    ZkClient, ZkClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RPC_TIMEOUT,
    DEFAULT_SESSION_TIMEOUT, MIN_SESSION_TIMEOUT,
};
pub use latch::{LatchEvent, LeaderLatch, Participant};
pub use mutex::{InterProcessMutex, ZkLock, ZkMutex};
pub use node_lease::ZkNodeLease;
pub use recipes_core::{Error, LossPolicy, Result};
pub use selector::LeaderSelector;
pub use semaphore::{InterProcessSemaphore, ZkPermit, ZkSemaphore};
pub use session::SessionState;

/// A held [`InterProcessMutex`].
pub type MutexGuard = recipes_core::MutexGuard<ZkLock>;
