//! The one retry pause every recipe uses: doubling from a first pause up to
//! a cap, so a store that is down is not hammered and one that comes back
//! is found soon.

use std::time::Duration;

/// A doubling pause between retries.
///
/// Deterministic (no jitter): contenders that retry in step are already
/// ordered by the store, and a deterministic pause keeps the engine's
/// simulation replayable.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    next: Duration,
    cap: Duration,
}

impl Backoff {
    /// The pause after a failed read or write: 20 ms, doubling to 1 s.
    pub const RETRY: Backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));

    /// The pause for work that waits for the store to come back (a latch
    /// or selector contending again after an error, a removal that keeps
    /// failing): 50 ms, doubling to 2 s.
    pub const RECOVER: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));

    /// Pauses starting at `first`, doubling up to `cap`.
    pub const fn new(first: Duration, cap: Duration) -> Backoff {
        Backoff {
            first,
            next: first,
            cap,
        }
    }

    /// The pause to take now; the one after it is twice as long (at most
    /// the cap).
    pub fn next_pause(&mut self) -> Duration {
        let pause = self.next.min(self.cap);
        self.next = self.next.saturating_mul(2).min(self.cap);
        pause
    }

    /// Start again from the first pause (after a success).
    pub fn reset(&mut self) {
        self.next = self.first;
    }

    /// Sleep for [`next_pause`](Backoff::next_pause) on the tokio clock.
    pub async fn pause(&mut self) {
        tokio::time::sleep(self.next_pause()).await;
    }

    /// As [`pause`](Backoff::pause), but wake by `deadline` at the latest:
    /// a timed wait never sleeps past its end between retries.
    pub async fn pause_within(&mut self, deadline: Option<tokio::time::Instant>) {
        let wake = tokio::time::Instant::now() + self.next_pause();
        tokio::time::sleep_until(deadline.map_or(wake, |d| wake.min(d))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_and_reset() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(35));
        let got: Vec<_> = (0..4).map(|_| b.next_pause().as_millis()).collect();
        assert_eq!(got, [10, 20, 35, 35]);
        b.reset();
        assert_eq!(b.next_pause(), Duration::from_millis(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_within_a_deadline_ends_by_it() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
        let started = tokio::time::Instant::now();
        let deadline = started + Duration::from_millis(100);
        b.pause_within(Some(deadline)).await;
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        b.pause_within(None).await;
        assert!(started.elapsed() >= Duration::from_secs(1));
    }

    #[test]
    fn a_huge_cap_never_overflows() {
        let mut b = Backoff::new(Duration::MAX / 2, Duration::MAX);
        for _ in 0..4 {
            b.next_pause();
        }
        assert_eq!(b.next_pause(), Duration::MAX);
    }
}
