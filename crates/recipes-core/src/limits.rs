//! One set of defaults and limits for every backend: the same setting has
//! the same name, default and bounds whatever the store, and a value out of
//! bounds gets the same [`Error::InvalidArgument`] saying what to change.

use std::time::Duration;

use crate::error::{Error, Result};

/// The lease a client asks for when not told: the ZooKeeper session
/// timeout, the etcd lease TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// The shortest lease a client may ask for. ZooKeeper grants no less than
/// 2 × tickTime and etcd no less than its minimum TTL anyway.
pub const MIN_TTL: Duration = Duration::from_secs(1);

/// The longest lease, connect timeout or RPC timeout a client may ask
/// for: past a day, a crashed holder would block its lock for longer than
/// anyone waits.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// How long connecting may take when not told.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one request may take when not told.
pub const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Check a lease length the caller asked for.
///
/// # Errors
///
/// [`Error::InvalidArgument`] below [`MIN_TTL`] or above [`MAX_DURATION`].
pub fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL {
        return Err(Error::invalid(format!(
            "a lease (TTL, session timeout) of {ttl:?} is below the minimum of {MIN_TTL:?}; \
             ask for at least that, such as 10 s"
        )));
    }
    check_at_most_a_day("lease (TTL, session timeout)", ttl)
}

/// `d` in whole seconds, rounded up (so that a lease of whole seconds is
/// never shorter than asked), saturating at `i64::MAX`.
pub fn whole_seconds_up(d: Duration) -> i64 {
    let secs = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// Check a timeout (`what` names it): more than zero, at most a day.
///
/// # Errors
///
/// [`Error::InvalidArgument`] saying which bound was crossed.
pub fn check_timeout(what: &str, d: Duration) -> Result<()> {
    if d.is_zero() {
        return Err(Error::invalid(format!("the {what} must be more than zero")));
    }
    check_at_most_a_day(what, d)
}

fn check_at_most_a_day(what: &str, d: Duration) -> Result<()> {
    if d > MAX_DURATION {
        return Err(Error::invalid(format!(
            "the {what} of {d:?} is above the maximum of {MAX_DURATION:?} (a day); ask for less"
        )));
    }
    Ok(())
}

/// The settings every client has, with one set of defaults and bounds;
/// builders set them with the setters of [`settings_setters!`](crate::settings_setters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The lease to ask for: the ZooKeeper session timeout, the etcd lease
    /// TTL.
    pub ttl: Duration,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// The deadline of each request.
    pub rpc_timeout: Duration,
    /// Scheduling slack subtracted from every lease deadline on top of the
    /// clock-drift margin.
    pub lease_slack: Duration,
    /// Whether a disconnect is loss, or only the lease's deadline is (the
    /// default). Honoured by the stores whose builder has a `loss_policy`
    /// setter.
    pub loss_policy: crate::LossPolicy,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            ttl: DEFAULT_TTL,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            rpc_timeout: DEFAULT_RPC_TIMEOUT,
            lease_slack: crate::deadline::DEFAULT_SLACK,
            loss_policy: crate::LossPolicy::Deadline,
        }
    }
}

impl Settings {
    /// Check every bound; `lease` names the lease in messages (`the
    /// session timeout`, `the lease TTL`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] saying which bound was crossed.
    pub fn validate(&self, lease: &str) -> Result<()> {
        check_ttl(self.ttl)?;
        check_timeout("connect timeout", self.connect_timeout)?;
        check_timeout("rpc timeout", self.rpc_timeout)?;
        crate::deadline::check_lease(lease, self.ttl, self.lease_slack)
    }
}

/// The setters of [`Settings`] for a client builder whose `settings` field
/// holds them; `ttl` is what the store says about its lease.
#[macro_export]
macro_rules! settings_setters {
    (ttl = $ttl:literal) => {
        /// The lease to ask for (default
        /// [`DEFAULT_TTL`](recipes_core::DEFAULT_TTL), at least
        /// [`MIN_TTL`](recipes_core::MIN_TTL)): a holder that stops
        /// renewing it (a crash, a partition, a pause) blocks others for
        /// at most about this long, and its guards report the loss before
        /// the server can give the lock away.
        #[doc = $ttl]
        pub fn ttl(mut self, ttl: ::std::time::Duration) -> Self {
            self.settings.ttl = ttl;
            self
        }

        /// How long `connect` may take (default
        /// [`DEFAULT_CONNECT_TIMEOUT`](recipes_core::DEFAULT_CONNECT_TIMEOUT)).
        pub fn connect_timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.settings.connect_timeout = timeout;
            self
        }

        /// The deadline of each request (default
        /// [`DEFAULT_RPC_TIMEOUT`](recipes_core::DEFAULT_RPC_TIMEOUT)).
        pub fn rpc_timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.settings.rpc_timeout = timeout;
            self
        }

        /// Scheduling slack subtracted from every lease deadline on top of
        /// the clock-drift margin (default
        /// [`DEFAULT_SLACK`](recipes_core::DEFAULT_SLACK)).
        pub fn lease_slack(mut self, slack: ::std::time::Duration) -> Self {
            self.settings.lease_slack = slack;
            self
        }
    };
}

/// The longest recipe name or key (a ZooKeeper path, an etcd key prefix, a
/// PostgreSQL name, a Redis key) in bytes, the same on every store: the
/// smallest store's, PostgreSQL's, whose btree index holds an entry of at
/// most about 2,700 bytes; far inside ZooKeeper's packet limit (1 MiB by
/// default) and etcd's request limit (1.5 MiB). A longer name is refused
/// before anything is sent, saying this limit.
pub const MAX_NAME_BYTES: usize = 2_048;

/// The largest value (a fenced write's value, an election value, a
/// participant id) in bytes, on every store. ZooKeeper refuses a packet
/// over 1 MiB (`jute.maxbuffer`) and, worse, drops the connection with
/// every request on it; etcd refuses a request over 1.5 MiB. A value this
/// size plus a name of [`MAX_NAME_BYTES`] fits both with room to spare.
pub const MAX_VALUE_BYTES: usize = 1_000_000;

/// Check a value the caller wants stored (`what` names it) against
/// [`MAX_VALUE_BYTES`].
///
/// # Errors
///
/// [`Error::InvalidArgument`] saying the size and the limit.
pub fn check_value(what: &str, value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(Error::invalid(format!(
            "the {what} is {} bytes, over the limit of {MAX_VALUE_BYTES} bytes on every store; \
             store a smaller value (or a reference to the data)",
            value.len()
        )));
    }
    Ok(())
}

/// How much of a caller's text an error message quotes.
const QUOTED: usize = 64;

/// `text` as an error message quotes it: debug-escaped, and cut to its
/// first 64 characters (with how long it was) so that a megabyte of name
/// never becomes a megabyte of error.
pub fn quote(text: &str) -> String {
    let count = text.chars().count();
    if count <= QUOTED {
        return format!("{text:?}");
    }
    let head: String = text.chars().take(QUOTED).collect();
    format!("{head:?}… ({count} characters)")
}

/// `d` from now, saturating: a duration too long for the clock (such as
/// `Duration::MAX`) gives a moment centuries away instead of a panic.
pub fn deadline_in(d: Duration) -> std::time::Instant {
    let now = std::time::Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(FAR_AWAY))
        .unwrap_or(now)
}

/// Later than any wait anyone means.
const FAR_AWAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_seconds_round_up() {
        assert_eq!(whole_seconds_up(Duration::from_secs(10)), 10);
        assert_eq!(whole_seconds_up(Duration::from_millis(1500)), 2);
        assert_eq!(whole_seconds_up(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds_up(Duration::MAX), i64::MAX);
    }

    #[test]
    fn quotes_are_cut() {
        assert_eq!(quote("/a"), "\"/a\"");
        let long = "x".repeat(1000);
        let q = quote(&long);
        assert!(q.len() < 100 && q.ends_with("(1000 characters)"), "{q}");
    }

    #[test]
    fn a_deadline_from_any_duration_saturates() {
        let now = std::time::Instant::now();
        assert!(deadline_in(Duration::MAX) > now + Duration::from_secs(3600 * 24 * 365));
        assert!(deadline_in(Duration::ZERO) >= now);
    }

    #[test]
    fn leases_and_timeouts_have_one_set_of_bounds() {
        assert!(check_ttl(DEFAULT_TTL).is_ok());
        assert!(check_ttl(MIN_TTL).is_ok());
        assert!(check_ttl(MAX_DURATION).is_ok());
        for bad in [
            Duration::ZERO,
            Duration::from_millis(999),
            MAX_DURATION + Duration::from_secs(1),
        ] {
            assert!(
                matches!(check_ttl(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        assert!(
            matches!(check_timeout("rpc timeout", Duration::ZERO), Err(Error::InvalidArgument(m)) if m.contains("rpc timeout"))
        );
        assert!(matches!(
            check_timeout("rpc timeout", Duration::MAX),
            Err(Error::InvalidArgument(_))
        ));
        assert!(check_timeout("rpc timeout", Duration::from_millis(1)).is_ok());
    }
}
