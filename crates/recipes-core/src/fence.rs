//! Fencing tokens and the resource-side gate that checks them.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// A number that strictly increases in the order holders acquire one lock or
/// win one election.
///
/// Hand it to the protected resource with every write; the resource refuses a
/// token lower than the highest it has seen. That is what keeps a paused or
/// partitioned former holder from overwriting the work of the holder after
/// it: the lease can expire while its holder still runs, the fence cannot.
///
/// ZooKeeper: the `czxid` of the lock node. etcd mutex: the revision at which
/// ownership was confirmed (what `etcdctl lock` exports as `ETCD_LOCK_REV`).
/// Tokens restart if the store's data is restored from a snapshot or wiped.
///
/// # Examples
///
/// ```
/// use recipes_core::FencingToken;
/// let t: FencingToken = "42".parse().unwrap();
/// assert!(t > FencingToken(41));
/// assert_eq!(t.to_string(), "42");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The token as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for FencingToken {
    type Err = Error;

    /// Parses a decimal token, as `recipes` exports it in `RECIPES_FENCE`.
    fn from_str(s: &str) -> Result<Self> {
        s.trim().parse::<u64>().map(FencingToken).map_err(|e| {
            Error::invalid(format!(
                "fencing token {s:?} is not a decimal number from 0 to {}: {e}",
                u64::MAX
            ))
        })
    }
}

impl From<FencingToken> for u64 {
    fn from(t: FencingToken) -> u64 {
        t.0
    }
}

/// The resource side of fencing: accepts a token at least as high as the
/// highest it has seen, and refuses lower ones.
///
/// Equal tokens pass, so one holder may write many times. This is the
/// in-memory form of the SQL fence
/// `UPDATE t SET …, fence = $tok WHERE id = $id AND fence <= $tok`
/// (check the row count). Thread-safe; `admit` is one atomic step.
///
/// # Examples
///
/// ```
/// use recipes_core::{FenceGate, FencingToken};
/// let gate = FenceGate::new();
/// gate.admit(FencingToken(7)).unwrap();
/// gate.admit(FencingToken(7)).unwrap(); // the same holder writes again
/// assert!(gate.admit(FencingToken(5)).is_err()); // a stale holder
/// ```
#[derive(Debug, Default)]
pub struct FenceGate {
    highest: AtomicU64,
}

impl FenceGate {
    /// A gate that has seen no token yet.
    pub fn new() -> FenceGate {
        FenceGate::default()
    }

    /// Admit a write fenced by `token`.
    ///
    /// # Errors
    ///
    /// [`Error::FenceRejected`] if a higher token has been admitted before.
    pub fn admit(&self, token: FencingToken) -> Result<()> {
        let before = self.highest.fetch_max(token.0, Ordering::AcqRel);
        if before > token.0 {
            return Err(Error::FenceRejected {
                what: format!("token {token} is older than the highest admitted token {before}"),
            });
        }
        Ok(())
    }

    /// The highest token admitted so far (0 when none).
    pub fn highest(&self) -> FencingToken {
        FencingToken(self.highest.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn token_orders_parses_and_displays() {
        assert!(FencingToken(2) > FencingToken(1));
        assert_eq!(" 123\n".parse::<FencingToken>().unwrap(), FencingToken(123));
        assert_eq!(FencingToken(9).to_string(), "9");
        for bad in ["", "-1", "abc", "18446744073709551616"] {
            let e = bad.parse::<FencingToken>().unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad}: {e}");
        }
    }

    #[test]
    fn gate_admits_equal_and_higher_rejects_lower() {
        let g = FenceGate::new();
        g.admit(FencingToken(10)).unwrap();
        g.admit(FencingToken(10)).unwrap();
        g.admit(FencingToken(11)).unwrap();
        let e = g.admit(FencingToken(10)).unwrap_err();
        assert!(matches!(e, Error::FenceRejected { .. }));
        assert_eq!(g.highest(), FencingToken(11));
    }

    #[test]
    fn racing_threads_never_lower_the_gate() {
        let g = Arc::new(FenceGate::new());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let g = g.clone();
                std::thread::spawn(move || {
                    let mut last_seen = 0;
                    for i in 0..5000u64 {
                        let tok = FencingToken(i * 4 + t);
                        let admitted = g.admit(tok).is_ok();
                        let now = g.highest().get();
                        // The gate never goes down, and an admitted token is
                        // never above what the gate reports afterwards.
                        assert!(now >= last_seen);
                        assert!(!admitted || now >= tok.get());
                        last_seen = now;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(g.highest(), FencingToken(4999 * 4 + 3));
    }
}
