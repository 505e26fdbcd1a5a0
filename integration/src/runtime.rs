//! The harness's own tokio runtime, for the async client crates it uses to
//! read facts from the servers.
//!
//! One process-wide runtime with one worker thread, started on first use.
//! Tasks spawned by the clients (the ZooKeeper session, etcd streams) run on
//! the worker all the time, so a fact client's session stays alive between
//! calls; callers drive a request with [`block_on`] from any test thread.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::{Builder, Runtime};

/// The harness runtime.
///
/// # Panics
///
/// When the runtime cannot be built (no threads left).
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("integration-rt")
            .enable_all()
            .build()
            .expect("cannot build the integration runtime")
    })
}

/// Runs `future` to completion on the harness runtime, on this thread.
///
/// # Panics
///
/// When called from inside an async context (tokio forbids nested
/// `block_on`).
pub fn block_on<F: Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

/// Runs `future` on the harness runtime for at most `limit`; `None` when it
/// did not finish in time. `limit` is used as given (not scaled).
pub fn block_on_timeout<F: Future>(limit: Duration, future: F) -> Option<F::Output> {
    block_on(async { tokio::time::timeout(limit, future).await.ok() })
}
