//! The semaphore's admission ([`admit`]) over the simulated store: its
//! internal mutex on one store, its permits on another.

use std::time::Duration;

use tokio::time::Instant;

use super::contend::contend;
use super::decide::Rule;
use super::driver::ContendDriver;
use super::semaphore::{admit, Admission, Unlock};
use super::sim_store::{FenceBy, SimDriver, SimWon, Store};

/// The simulated internal mutex's give-back: a store that never answers
/// it (cut off, say), as `delete_until_done` waits on ZooKeeper until
/// the connection is back or the session is gone.
impl Unlock for SimWon {
    fn unlock(self) -> impl std::future::Future<Output = ()> + Send + 'static {
        std::future::pending()
    }
}

/// A timed admission that finds no permit ends by its deadline plus the
/// RPC timeout, however long giving its internal mutex back takes (the
/// give-back goes on meanwhile). It waited for the give-back without a
/// bound: here, for ever.
#[tokio::test(start_paused = true)]
async fn a_timed_admission_ends_by_its_deadline_whatever_its_give_back_takes() {
    let (locks, permits) = (Store::new(1, 0), Store::new(2, 0));
    let other = SimDriver::new(permits.clone(), Rule::Leases(1), FenceBy::CreateRevision);
    let _held = contend(&other, None)
        .await
        .unwrap()
        .expect("the one permit");
    let admission = Admission {
        lock: SimDriver::new(locks, Rule::Mutex, FenceBy::CreateRevision),
        permits: SimDriver::new(permits, Rule::Leases(1), FenceBy::CreateRevision),
        size: (),
    };
    let rpc = admission.lock.rpc_timeout();
    let (started, wait) = (Instant::now(), Duration::from_millis(100));
    let admitted = tokio::time::timeout(
        Duration::from_secs(3600),
        admit(&admission, Some(started + wait)),
    )
    .await
    .expect("the admission ended");
    assert!(matches!(admitted, Ok(None)), "{admitted:?}");
    let took = started.elapsed();
    // The permits' wait is cut at deadline + RPC timeout, the give-back's
    // at one RPC timeout more.
    assert!(took <= wait + 2 * rpc, "{took:?}");
}
