//! The one environment factor of the harness: `RECIPES_TEST_SLOW`.
//!
//! Slow machines (CI under load, sanitizers, a laptop on battery) need longer
//! *upper* bounds: how long we wait for a server to start, for a node to
//! disappear, for a client to reconnect. [`scale`] stretches such a bound by
//! the factor in `RECIPES_TEST_SLOW` (a float, default `1.0`).
//!
//! **Lower bounds are never scaled.** "The lock was held for at least the
//! TTL" or "a paused server does not answer within 300 ms" stay as written:
//! a slow machine makes things later, never earlier, so scaling a lower bound
//! would only weaken the assertion.

use std::ffi::OsStr;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// Name of the environment variable that holds the slow-machine factor.
pub const SLOW_FACTOR_VAR: &str = "RECIPES_TEST_SLOW";

/// A command for `program` that inherits none of the test's own
/// `RECIPES_*` variables (a developer's `RECIPES_ZK`, say) but the slow
/// factor: whatever it is told comes from the test.
pub fn command_without_recipes_env(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (k, _) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if name.starts_with("RECIPES_") && name != SLOW_FACTOR_VAR {
            cmd.env_remove(&k);
        }
    }
    cmd
}

/// The slow-machine factor from `RECIPES_TEST_SLOW`, read once per process.
///
/// # Panics
///
/// If the variable is set to something that is not a finite number ≥ 1.0 —
/// a factor below 1 would shorten upper bounds and make tests flaky.
pub fn slow_factor() -> f64 {
    static FACTOR: OnceLock<f64> = OnceLock::new();
    *FACTOR.get_or_init(|| match std::env::var(SLOW_FACTOR_VAR) {
        Err(_) => 1.0,
        Ok(text) => {
            parse_factor(&text).unwrap_or_else(|why| panic!("{SLOW_FACTOR_VAR}={text:?}: {why}"))
        }
    })
}

fn parse_factor(text: &str) -> Result<f64, String> {
    let factor: f64 = text
        .trim()
        .parse()
        .map_err(|e| format!("not a number ({e}); use e.g. {SLOW_FACTOR_VAR}=2.5"))?;
    if !factor.is_finite() || factor < 1.0 {
        return Err("must be a finite number >= 1.0".to_owned());
    }
    Ok(factor)
}

/// Stretches an **upper** bound by the slow-machine factor.
///
/// Use it for deadlines ("the node is gone within 5 s"), never for lower
/// bounds ("the lock is not granted before 2 s").
pub fn scale(upper_bound: Duration) -> Duration {
    upper_bound.mul_f64(slow_factor())
}

#[cfg(test)]
mod tests {
    use super::parse_factor;

    #[test]
    fn factor_parses_and_rejects_shrinking() {
        assert_eq!(parse_factor(" 2.5 "), Ok(2.5));
        assert_eq!(parse_factor("1"), Ok(1.0));
        assert!(parse_factor("0.5").is_err());
        assert!(parse_factor("fast").is_err());
        assert!(parse_factor("inf").is_err());
    }
}
