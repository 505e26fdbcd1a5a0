//! The local lease deadline: until when may we assume the server still
//! honours our session or lease?

use std::time::Duration;

use crate::clock::BootInstant;
use crate::error::{Error, Result};

/// The worst clock-rate difference we assume between this host and the
/// server, in parts per million (each side may drift this much, so the
/// margin counts it twice).
pub const CLOCK_DRIFT_PPM: u64 = 500;

/// The default scheduling slack subtracted from every lease on top of the
/// clock-drift margin.
pub const DEFAULT_SLACK: Duration = Duration::from_millis(100);

/// The safety margin for a lease of `granted`: `2 × 500 ppm × granted`
/// (both clocks drifting apart) plus `slack` (scheduling delays between
/// reading the clock and acting on it).
pub fn margin(granted: Duration, slack: Duration) -> Duration {
    let drift_nanos = granted.as_nanos() * 2 * u128::from(CLOCK_DRIFT_PPM) / 1_000_000;
    Duration::from_nanos(u64::try_from(drift_nanos).unwrap_or(u64::MAX)).saturating_add(slack)
}

/// Check that a lease of `granted` is usable with `slack`: its safety
/// margin must leave at least half of it, so the lease stays valid across a
/// renewal interval (a third or a quarter of the lease). `what` names the
/// lease for the message ("the session timeout", "the TTL").
///
/// # Errors
///
/// [`Error::InvalidArgument`] saying what to change.
pub fn check_lease(what: &str, granted: Duration, slack: Duration) -> Result<()> {
    let m = margin(granted, slack);
    if m > granted / 2 {
        return Err(Error::invalid(format!(
            "{what} of {granted:?} is too short for a lease slack of {slack:?}: the safety \
             margin ({m:?}, the slack plus clock drift) must leave at least half of it; ask \
             for a longer one (the server may cap it) or set a smaller lease slack"
        )));
    }
    Ok(())
}

/// Turns acknowledgements into a conservative local deadline.
///
/// It is fed "a request sent at `s` was acknowledged, and the server granted
/// `T`" and yields `valid_until = s + T − margin(T)`. The **send** time is
/// the only safe anchor: the server's timer restarted when the request
/// arrived, which is no earlier than when we sent it. A reply that arrives
/// late (a slow network, a paused process) therefore never stretches the
/// deadline past what the server promised.
///
/// Acknowledgements of requests sent before the newest one already counted
/// are ignored, so replies that overtake each other cannot move the deadline
/// back and forth.
#[derive(Debug, Clone)]
pub struct DeadlineTracker {
    slack: Duration,
    newest_sent: Option<BootInstant>,
    granted: Option<Duration>,
    valid_until: Option<BootInstant>,
}

impl DeadlineTracker {
    /// A tracker with no acknowledgement yet, using `slack` on top of the
    /// clock-drift margin.
    pub fn new(slack: Duration) -> DeadlineTracker {
        DeadlineTracker {
            slack,
            newest_sent: None,
            granted: None,
            valid_until: None,
        }
    }

    /// Record that the request sent at `sent_at` was acknowledged with a
    /// lease of `granted`. Returns whether the deadline was updated (false
    /// for an acknowledgement older than the newest one counted).
    pub fn acknowledged(&mut self, sent_at: BootInstant, granted: Duration) -> bool {
        if matches!(self.newest_sent, Some(newest) if sent_at < newest) {
            return false;
        }
        self.newest_sent = Some(sent_at);
        self.granted = Some(granted);
        let usable = granted.saturating_sub(margin(granted, self.slack));
        self.valid_until = Some(sent_at + usable);
        true
    }

    /// Until when the lease may be assumed held; `None` before the first
    /// acknowledgement.
    pub fn valid_until(&self) -> Option<BootInstant> {
        self.valid_until
    }

    /// The lease length granted by the newest acknowledgement.
    pub fn granted(&self) -> Option<Duration> {
        self.granted
    }

    /// Send time of the newest acknowledged request.
    pub fn last_acknowledged_send(&self) -> Option<BootInstant> {
        self.newest_sent
    }

    /// Whether the deadline has passed at `now` (false before the first
    /// acknowledgement: nothing can be held then).
    pub fn expired_at(&self, now: BootInstant) -> bool {
        matches!(self.valid_until, Some(v) if now >= v)
    }

    /// The slack this tracker subtracts on top of the drift margin.
    pub fn slack(&self) -> Duration {
        self.slack
    }
}

/// What is wrong when `store` granted a session timeout or lease TTL
/// (`granted`) below the one asked for (`asked`); `None` when it granted
/// at least that. The one wording of this hazard, for a backend's refusal
/// at connect and for `recipes doctor`.
pub fn granted_ttl_hazard(store: &str, asked: Duration, granted: Duration) -> Option<String> {
    (granted < asked).then(|| {
        format!(
            "{store} granted a session TTL of {granted:?}, below the {asked:?} asked for: a \
             holder paused between the two loses its lock sooner than it planned; raise the \
             server's limit (ZooKeeper: maxSessionTimeout in zoo.cfg) to at least {asked:?}, \
             or ask for at most {granted:?}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> BootInstant {
        BootInstant::from_since_boot(Duration::from_millis(ms))
    }

    #[test]
    fn margin_covers_twice_the_drift_plus_slack() {
        // 10 s × 2 × 500 ppm = 10 ms.
        assert_eq!(
            margin(Duration::from_secs(10), Duration::from_millis(100)),
            Duration::from_millis(110)
        );
        assert_eq!(
            margin(Duration::from_secs(1), Duration::ZERO),
            Duration::from_millis(1)
        );
        let m = margin(Duration::from_secs(3600), Duration::ZERO);
        assert!(m >= Duration::from_millis(3600), "{m:?}");
    }

    #[test]
    fn deadline_is_send_time_plus_grant_minus_margin() {
        let mut t = DeadlineTracker::new(Duration::from_millis(50));
        assert_eq!(t.valid_until(), None);
        assert!(!t.expired_at(at(1_000_000)));
        assert!(t.acknowledged(at(1000), Duration::from_secs(10)));
        // 1000 + 10000 - (10 + 50)
        assert_eq!(t.valid_until(), Some(at(10_940)));
        assert!(!t.expired_at(at(10_939)));
        assert!(t.expired_at(at(10_940)));
    }

    #[test]
    fn a_late_reply_does_not_extend_the_deadline() {
        // The request left at 1000; its reply arrives 4 s later (a stalled
        // network or a paused process). The deadline is anchored at the send
        // time, not at the arrival.
        let mut t = DeadlineTracker::new(Duration::ZERO);
        t.acknowledged(at(1000), Duration::from_secs(5));
        assert_eq!(t.valid_until(), Some(at(5995)));
    }

    #[test]
    fn older_acknowledgements_are_ignored() {
        let mut t = DeadlineTracker::new(Duration::ZERO);
        assert!(t.acknowledged(at(2000), Duration::from_secs(5)));
        let v = t.valid_until();
        // The reply to an earlier request overtakes: ignored.
        assert!(!t.acknowledged(at(1500), Duration::from_secs(50)));
        assert_eq!(t.valid_until(), v);
        assert_eq!(t.last_acknowledged_send(), Some(at(2000)));
        // A newer one moves it forward, and may shorten the grant.
        assert!(t.acknowledged(at(3000), Duration::from_secs(2)));
        assert_eq!(t.valid_until(), Some(at(4998)));
        assert_eq!(t.granted(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn a_grant_smaller_than_the_margin_is_already_expired() {
        let mut t = DeadlineTracker::new(Duration::from_secs(1));
        t.acknowledged(at(1000), Duration::from_millis(500));
        assert_eq!(t.valid_until(), Some(at(1000)));
        assert!(t.expired_at(at(1000)));
    }
}
