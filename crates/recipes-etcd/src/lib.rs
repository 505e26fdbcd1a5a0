//! # recipes-etcd
//!
//! The etcd backend of the `recipes` coordination library: a blocking
//! client whose streams run on its own runtime thread. Recipes (mutex,
//! semaphore, election, leader latch, leader selector) arrive on top of it
//! with the layouts of etcd's `concurrency` package, so `etcdctl lock` and
//! `etcdctl elect` contend with them correctly.
//!
//! ```no_run
//! # fn main() -> Result<(), recipes_core::Error> {
//! use std::time::Duration;
//! let client = recipes_etcd::EtcdClient::connect(["127.0.0.1:2379"])?;
//! client.ping()?;
//! client.close(Duration::from_secs(2));
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]
#![deny(missing_debug_implementations)]

mod client;
mod error;

pub use client::{
    EtcdClient, EtcdClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RPC_TIMEOUT, HTTP2_KEEP_ALIVE,
};
pub use recipes_core::{Error, Result};
