//! [`Nudge`]: the notification a read arms on a store whose change
//! messages are hints (PostgreSQL's `NOTIFY`, Redis pub/sub) and whose
//! sessions expire without a message: wake on a message, when the
//! earliest session the read depends on would expire, or after a poll
//! interval, whichever comes first.

use std::fmt;
use std::future::Future;
use std::time::Duration;

/// A subscription (`ear`, if one could be made) and how long to wait for
/// it at most.
pub struct Nudge<E> {
    ear: Option<E>,
    nap: Duration,
}

/// A little past an expiry, so that the read after it finds it expired.
const PAST: Duration = Duration::from_millis(5);

impl<E> Nudge<E> {
    /// Wait on `ear` (none: poll) until a message, or `left` (the time
    /// the earliest session the read depends on has left, if any) has
    /// passed, or `poll`.
    pub fn new(ear: Option<E>, left: Option<Duration>, poll: Duration) -> Nudge<E> {
        let nap = left.map_or(poll, |left| left.saturating_add(PAST).min(poll));
        Nudge { ear, nap }
    }

    /// Resolve on the next message `heard` reads from the ear, or when the
    /// nap is over.
    pub async fn wait<F: Future>(self, heard: impl FnOnce(E) -> F) {
        let Nudge { ear, nap } = self;
        let message = async {
            match ear {
                Some(ear) => drop(heard(ear).await),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = message => {}
            () = tokio::time::sleep(nap) => {}
        }
    }
}

impl<E> fmt::Debug for Nudge<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nudge")
            .field("listening", &self.ear.is_some())
            .field("nap", &self.nap)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_nudge_wakes_at_the_earliest_expiry_or_the_poll() {
        let started = tokio::time::Instant::now();
        let left = Some(Duration::from_millis(100));
        Nudge::<()>::new(None, left, Duration::from_secs(1))
            .wait(|()| async {})
            .await;
        assert_eq!(started.elapsed(), Duration::from_millis(105));
        let started = tokio::time::Instant::now();
        Nudge::<()>::new(None, None, Duration::from_secs(1))
            .wait(|()| async {})
            .await;
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        let started = tokio::time::Instant::now();
        Nudge::new(Some(()), None, Duration::from_secs(1))
            .wait(|()| async {})
            .await;
        assert_eq!(started.elapsed(), Duration::ZERO, "a message wakes at once");
    }
}
