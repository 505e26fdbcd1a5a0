//! Test harness of the `recipes` workspace: real ZooKeeper, etcd and
//! PostgreSQL servers and clusters on loopback, fault injection, and waits on
//! server facts.
//!
//! - [`ZkServer`] / [`ZkCluster`], [`EtcdServer`] / [`EtcdCluster`],
//!   [`PgServer`] / [`PgBouncer`], [`RedisServer`]: server processes in their own temp
//!   folders on free loopback ports, with `kill` (SIGKILL), `pause`/`resume`
//!   (SIGSTOP/SIGCONT) and `restart` (same ports, same data). Dropping one
//!   kills and reaps its processes.
//! - [`Proxy`]: a TCP proxy per server address that black-holes, freezes
//!   replies or cuts connections.
//! - [`ZkFacts`] / [`EtcdFacts`] and the `watches_by_*` 4lw tables: what the
//!   server says, for assertions and for [`wait_until`]-style waits.
//! - [`scale`]: the `RECIPES_TEST_SLOW` factor for upper bounds only.
//!
//! # Process hygiene
//!
//! Every server is forked by one long-lived spawner thread with
//! `PR_SET_PDEATHSIG = SIGKILL` (see [`spawner`]), so a test run that dies
//! leaves no server behind, while servers still outlive the test thread that
//! started them (for [`ZkServer::shared`] and [`EtcdServer::shared`]).
//!
//! Under nextest, where every test is a process of its own, the `shared()`
//! servers of a test binary are started once per run instead (detached,
//! recorded in `<tmp>/recipes-it-shared/`, killed by a keeper when the
//! nextest process is gone; `RECIPES_TEST_SHARED=process` turns this off),
//! and PostgreSQL data folders are copied from one `initdb` template
//! (`RECIPES_PG_TEMPLATE=0` turns that off).
//!
//! # Panics
//!
//! The harness panics instead of returning errors: it only runs in tests.
//! Every panic about a server quotes the tail of its log.

/// The README's code blocks, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

pub mod certs;
pub mod clock_shim;
pub mod env;
pub mod etcd_cluster;
pub mod etcd_facts;
pub mod etcd_server;
mod facts;
pub mod four_letter;
pub mod handoff;
pub mod http;
pub mod logs;
pub mod owned;
pub mod peers;
pub mod pg_facts;
pub mod pg_server;
pub mod pgbouncer;
pub mod ports;
pub mod process;
pub mod process_tree;
pub mod proxy;
pub mod psql;
pub mod redis_server;
mod run_shared;
pub mod runtime;
mod server;
pub mod spawner;
mod tcp;
pub mod test_dir;
pub mod wait;
pub mod worker;
pub mod zk_cluster;
pub mod zk_facts;
pub mod zk_server;

pub use certs::{CertFiles, ServerTls, TestPki};
pub use env::scale;
pub use etcd_cluster::EtcdCluster;
pub use etcd_facts::EtcdFacts;
pub use etcd_server::{EtcdConfig, EtcdServer, EtcdStatus};
pub use four_letter::ZkMode;
pub use logs::{ExpectOrLogs, ServerLogs};
pub use pg_facts::PgFacts;
pub use pg_server::{PgConfig, PgServer};
pub use pgbouncer::{PgBouncer, PoolMode};
pub use process::{continue_and_wait, stop_and_wait, ManagedProcess};
pub use proxy::{Proxy, ProxyMode};
pub use redis_server::{RedisConfig, RedisSentinel, RedisServer};
pub use wait::{seen_within, wait_for, wait_for_with, wait_until, wait_until_with};
pub use zk_cluster::ZkCluster;
pub use zk_facts::ZkFacts;
pub use zk_server::{ZkConfig, ZkServer};
