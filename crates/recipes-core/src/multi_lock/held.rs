//! The parts a multi-lock holds, and their release all at once.

use crate::backend::Releasing;
use crate::client::{Client, FencedWrites};
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::loss::{LossReason, LossSignal};
use crate::mutex::MutexGuard;
use crate::queue_lock::{LockStore, QueueLock};
use crate::rw_lock::{RwLockReadGuard, RwLockWriteGuard};

type MutexLease<C> = <C as LockStore>::Lease;

pub(super) enum Held<C: Client> {
    Mutex(MutexGuard<MutexLease<C>>),
    Read(RwLockReadGuard<QueueLock<C>>),
    Write(RwLockWriteGuard<QueueLock<C>>),
}

impl<C: Client> Held<C> {
    pub(super) fn token(&self) -> FencingToken {
        match self {
            Held::Mutex(g) => g.token(),
            Held::Read(g) => g.token(),
            Held::Write(g) => g.token(),
        }
    }

    pub(super) fn holder(&self) -> &str {
        match self {
            Held::Mutex(g) => g.holder(),
            Held::Read(g) => g.holder(),
            Held::Write(g) => g.holder(),
        }
    }

    pub(super) fn lost(&self) -> &LossSignal {
        match self {
            Held::Mutex(g) => g.lost(),
            Held::Read(g) => g.lost(),
            Held::Write(g) => g.lost(),
        }
    }

    pub(super) fn release(self) -> Result<()> {
        match self {
            Held::Mutex(g) => g.release(),
            Held::Read(g) => g.release(),
            Held::Write(g) => g.release(),
        }
    }

    /// The part's release as a future (see [`Releasing`]); `Err` (the
    /// part untouched) when its lease has none.
    pub(super) fn release_later(self) -> std::result::Result<Releasing, Held<C>> {
        match self {
            Held::Mutex(g) => g.release_later().map_err(Held::Mutex),
            Held::Read(g) => g.release_later().map_err(Held::Read),
            Held::Write(g) => g.release_later().map_err(Held::Write),
        }
    }

    pub(super) fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        match self {
            Held::Mutex(g) => g.lease().put(key, value),
            Held::Read(g) => g.lease().put(key, value),
            Held::Write(g) => g.lease().put(key, value),
        }
    }

    pub(super) fn delete(&self, key: &str) -> Result<()> {
        match self {
            Held::Mutex(g) => g.lease().delete(key),
            Held::Read(g) => g.lease().delete(key),
            Held::Write(g) => g.lease().delete(key),
        }
    }
}

/// Give back what a failed acquisition took, newest first, waiting for
/// each (a release the store does not confirm goes on in the background).
pub(super) fn give_back<C: Client>(held: Vec<(String, Held<C>)>) {
    for (name, released) in release_all(held) {
        if let Err(e) = released {
            log::debug!("multi-lock: giving back {name}: {e}");
        }
    }
}

/// Release every part at once, their releases side by side in one
/// blocking call on the client's runtime: a round trip in all, and at most
/// one RPC timeout when the store does not answer (a part whose lease has
/// no such future is released on its own first). Each part's result.
pub(super) fn release_all<C: Client>(held: Vec<(String, Held<C>)>) -> Vec<(String, Result<()>)> {
    if held.len() < 2 {
        return held.into_iter().map(|(n, h)| (n, h.release())).collect();
    }
    let mut results = Vec::with_capacity(held.len());
    let (mut names, mut futures, mut runtime) = (Vec::new(), Vec::new(), None);
    for (name, h) in held.into_iter().rev() {
        match h.release_later() {
            Ok(Releasing {
                runtime: rt,
                future,
            }) => {
                runtime.get_or_insert(rt);
                names.push(name);
                futures.push(future);
            }
            Err(h) => results.push((name, h.release())),
        }
    }
    let Some(runtime) = runtime else {
        return results;
    };
    // Each handed to the runtime first, so that it goes on whatever
    // becomes of the call that waits for them.
    let answers: Vec<_> = (names.iter().zip(futures))
        .map(|(name, future)| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let spawned = runtime.spawn(async move {
                let _ = tx.send(future.await);
            });
            if !spawned {
                log::warn!("multi-lock: client closed: {name} stays until its session ends");
            }
            rx
        })
        .collect();
    let all = Box::pin(async move {
        let mut done = Vec::with_capacity(answers.len());
        for answer in answers {
            // Never answered: the client closed first (its loss fired).
            let closed = Error::LeaseLost {
                reason: LossReason::Closed,
            };
            done.push(answer.await.unwrap_or(Err(closed)));
        }
        Ok(done)
    });
    match runtime.call_boxed("release a multi-lock", None, all) {
        Ok(done) => results.extend(names.into_iter().zip(done)),
        Err(e) => results.extend(names.into_iter().map(|n| (n, Err(e.clone())))),
    }
    results
}
