//! Closing a client whose sessions end with a request each (an etcd
//! client's lease revokes): the requests are sent whatever the grace, and
//! the runtime stops after them.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::store::{deadline_in, Runtime};
use crate::{Error, LossReason, Result};

/// Fire every guard's loss (`Closed`), run `ends` (one future per session
/// to end) on `rt` and stop `rt`, all within `grace`. When `grace` runs
/// out first the ends go on in the background for `linger` at most, the
/// runtime stops after them, and the result is [`Error::Timeout`] for
/// `what`; otherwise it is the first failed end's error, if any.
pub fn end_sessions_within<F>(
    rt: &Runtime,
    what: &str,
    ends: Vec<F>,
    grace: Duration,
    linger: Duration,
) -> Result<()>
where
    F: Future<Output = Result<()>> + Send + 'static,
{
    // One budget for every step.
    let until = deadline_in(grace);
    // Every guard is lost from here on, whatever the ends do.
    rt.loss_root().fire(LossReason::Closed);
    let (done, ended) = crossbeam_channel::bounded(1);
    let ending = !ends.is_empty()
        && rt.spawn(async move {
            let mut running = tokio::task::JoinSet::new();
            for end in ends {
                running.spawn(end);
            }
            let mut outcome = Ok(());
            while let Some(finished) = running.join_next().await {
                if let Ok(Err(e)) = finished {
                    outcome = Err(e);
                }
            }
            let _ = done.send(outcome);
        });
    let closed = match ending.then(|| ended.recv_deadline(until)) {
        None | Some(Ok(Ok(()))) => Ok(()),
        Some(Ok(Err(e))) => Err(e),
        Some(Err(_)) => {
            let rt = rt.clone();
            std::thread::spawn(move || {
                let _ = ended.recv_timeout(linger);
                rt.shutdown(Duration::ZERO);
            });
            return Err(Error::Timeout {
                what: what.into(),
                after: grace,
            });
        }
    };
    rt.shutdown(until.saturating_duration_since(Instant::now()));
    closed
}
