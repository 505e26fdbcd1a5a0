//! A clock that keeps counting while the host sleeps.
//!
//! Leases on the server keep running while this host is suspended, so the
//! local estimate of a lease's end must too. `std::time::Instant` is
//! `CLOCK_MONOTONIC` on Linux, which stops during suspend; [`BootInstant`]
//! reads `CLOCK_BOOTTIME`, which does not.

use std::fmt;
use std::ops::{Add, Sub};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A point on the boot-time clock (`CLOCK_BOOTTIME` on Linux).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BootInstant(Duration);

/// Where [`BootInstant::to_instant`] puts a point too far ahead for
/// `Instant`: a year from now.
const BEYOND_INSTANT: Duration = Duration::from_secs(365 * 24 * 3600);

impl BootInstant {
    /// The current reading of the system's boot-time clock.
    pub fn now() -> BootInstant {
        BootInstant(read_boottime())
    }

    /// A point `since_boot` after the clock's origin (for tests and clocks).
    pub fn from_since_boot(since_boot: Duration) -> BootInstant {
        BootInstant(since_boot)
    }

    /// Time since the clock's origin.
    pub fn since_boot(self) -> Duration {
        self.0
    }

    /// How long after `earlier` this is; zero if it is not later.
    pub fn saturating_duration_since(self, earlier: BootInstant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// The std `Instant` at which this point is reached, assuming the host
    /// does not sleep in between. For waiting with std and crossbeam APIs;
    /// a point too far ahead for `Instant` (a grant of `Duration::MAX`)
    /// maps to a year from now.
    pub fn to_instant(self) -> Instant {
        let (now_boot, now_instant) = (BootInstant::now(), Instant::now());
        if self >= now_boot {
            let ahead = self.saturating_duration_since(now_boot);
            now_instant
                .checked_add(ahead)
                .unwrap_or_else(|| now_instant + BEYOND_INSTANT)
        } else {
            now_instant
                .checked_sub(now_boot.saturating_duration_since(self))
                .unwrap_or(now_instant)
        }
    }
}

impl fmt::Debug for BootInstant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BootInstant({:?})", self.0)
    }
}

impl Add<Duration> for BootInstant {
    type Output = BootInstant;
    fn add(self, d: Duration) -> BootInstant {
        BootInstant(self.0.saturating_add(d))
    }
}

impl Sub<Duration> for BootInstant {
    type Output = BootInstant;
    fn sub(self, d: Duration) -> BootInstant {
        BootInstant(self.0.saturating_sub(d))
    }
}

impl Sub<BootInstant> for BootInstant {
    type Output = Duration;
    /// Saturating: zero when `rhs` is later.
    fn sub(self, rhs: BootInstant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
const CLOCK_ID: libc::clockid_t = libc::CLOCK_BOOTTIME;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const CLOCK_ID: libc::clockid_t = libc::CLOCK_MONOTONIC;

fn read_boottime() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant
    // the platform supports.
    let rc = unsafe { libc::clock_gettime(CLOCK_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A source of [`BootInstant`]s. Real code uses [`SystemClock`]; tests use
/// [`ManualClock`] to simulate pauses and stalls deterministically.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> BootInstant;
}

/// The system's boot-time clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> BootInstant {
        BootInstant::now()
    }
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// The system clock as a [`SharedClock`].
pub fn system_clock() -> SharedClock {
    Arc::new(SystemClock)
}

/// A clock that moves only when told to: for tests of deadline logic.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<BootInstant>,
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: BootInstant) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            now: Mutex::new(start),
        })
    }

    /// Move the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let mut now = self.now.lock();
        *now = *now + d;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> BootInstant {
        *self.now.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boottime_is_monotonic_and_tracks_real_time() {
        let (b0, i0) = (BootInstant::now(), Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (b1, i1) = (BootInstant::now(), Instant::now());
        assert!(b1 > b0);
        let boot = b1 - b0;
        let mono = i1 - i0;
        // Without a suspend in between both clocks measure the same interval.
        let diff = boot.abs_diff(mono);
        assert!(diff < Duration::from_millis(5), "{boot:?} vs {mono:?}");
    }

    #[test]
    fn arithmetic_saturates() {
        let a = BootInstant::from_since_boot(Duration::from_secs(1));
        let b = a + Duration::from_secs(2);
        assert_eq!(b - a, Duration::from_secs(2));
        assert_eq!(a - b, Duration::ZERO);
        assert_eq!(
            a - Duration::from_secs(5),
            BootInstant::from_since_boot(Duration::ZERO)
        );
    }

    #[test]
    fn to_instant_of_a_point_past_what_instant_holds_is_a_year_ahead() {
        let far = BootInstant::now() + Duration::MAX;
        let mapped = far.to_instant();
        assert!(mapped > Instant::now() + BEYOND_INSTANT - Duration::from_secs(60));
    }

    #[test]
    fn to_instant_maps_future_and_past_points() {
        let now = BootInstant::now();
        let later = (now + Duration::from_secs(3)).to_instant();
        let d = later.saturating_duration_since(Instant::now());
        assert!(
            d > Duration::from_millis(2900) && d <= Duration::from_secs(3),
            "{d:?}"
        );
        let past = (now - Duration::from_millis(1)).to_instant();
        assert!(past <= Instant::now());
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(BootInstant::from_since_boot(Duration::from_secs(10)));
        assert_eq!(c.now().since_boot(), Duration::from_secs(10));
        c.advance(Duration::from_millis(1500));
        assert_eq!(c.now().since_boot(), Duration::from_millis(11_500));
    }
}
