//! Following an election's leader, written once: arm a watch, read the
//! leader, report it if it changed, wait for the watch, again. A store
//! supplies the watch and the read ([`LeaderWatch`]).

use std::future::Future;
use std::time::Duration;

use crossbeam_channel::Sender;
use tokio::sync::oneshot;

use crate::backend::LeaderInfo;
use crate::backoff::Backoff;
use crate::election::LeaderObserver;
use crate::error::{Error, Result};
use crate::runtime::Runtime;

/// A store's side of a [`LeaderObserver`].
pub trait LeaderWatch: Send + 'static {
    /// Arm a watch unless one is armed (so that no change after this read is
    /// missed), then read the leader: its info and a term that tells two
    /// terms of the same holder apart (0 where the holder already does).
    fn look(&mut self) -> impl Future<Output = Result<Option<(LeaderInfo, i64)>>> + Send;

    /// Resolve when the leader may have changed since the last look. An
    /// error means the watch broke: the next look arms another.
    fn changed(&mut self) -> impl Future<Output = Result<()>> + Send;
}

/// Follow the leader through `watch` on `runtime`; returns once the first
/// look is done (the watch armed, the current leader reported), within
/// `timeout`.
///
/// # Errors
///
/// The first look's error; [`Error::Timeout`] past `timeout`.
pub fn follow_leader<W: LeaderWatch>(
    runtime: &Runtime,
    timeout: Duration,
    watch: W,
) -> Result<LeaderObserver> {
    let (tx, rx) = crossbeam_channel::unbounded();
    // One pending look is all a reader needs: it reads the store anew.
    let (looked, looks) = crossbeam_channel::bounded(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let (ready, first) = oneshot::channel();
    let started = runtime.spawn(async move {
        tokio::select! {
            _ = stopped => {}
            () = follow(watch, tx, looked, ready) => {}
        }
    });
    if !started {
        return Err(Error::Closed);
    }
    runtime.call("observe the election", timeout, async move {
        first.await.unwrap_or(Err(Error::Closed))
    })?;
    Ok(LeaderObserver::new(rx, stop).with_looks(looks))
}

async fn follow<W: LeaderWatch>(
    mut watch: W,
    tx: Sender<LeaderInfo>,
    looked: Sender<()>,
    ready: oneshot::Sender<Result<()>>,
) {
    let mut ready = Some(ready);
    let mut last: Option<(String, i64, Vec<u8>)> = None;
    let mut backoff = Backoff::RECOVER;
    loop {
        let leader = match watch.look().await {
            Ok(leader) => leader,
            Err(e) => {
                // The first look's error is the caller's; later ones are
                // retried until the client closes.
                if let Some(r) = ready.take() {
                    let _ = r.send(Err(e));
                    return;
                }
                if matches!(e, Error::Closed) {
                    return;
                }
                log::debug!("leader observer: {e}; looking again");
                backoff.pause().await;
                continue;
            }
        };
        backoff.reset();
        // Full: a look is already pending, and the reader reads anew.
        let _ = looked.try_send(());
        if let Some((info, term)) = leader {
            // A moment without a leader is not reported.
            let now = (info.holder.clone(), term, info.value.clone());
            if last.as_ref() != Some(&now) {
                last = Some(now);
                if tx.send(info).is_err() {
                    return;
                }
            }
        }
        if let Some(r) = ready.take() {
            let _ = r.send(Ok(()));
        }
        match watch.changed().await {
            Ok(()) => {}
            Err(Error::Closed) => return,
            Err(e) => log::debug!("leader observer: the watch broke: {e}"),
        }
    }
}
