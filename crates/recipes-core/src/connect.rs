//! What every backend's connect shares: the check of one server address,
//! and the error when no server answered.

use std::time::Duration;

use crate::error::Error;

/// Whether `address` is `host:port`: a host without `/` and a numeric
/// port (`[::1]:2379` too).
pub fn is_host_port(address: &str) -> bool {
    matches!(
        address.rsplit_once(':'),
        Some((host, port)) if !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok()
    )
}

/// No server answered the connect within `after`: a retryable
/// [`Error::Backend`] that names who did not (`no etcd member of …`) and
/// says what to `check` (the likely mistakes: another store's port, HTTP,
/// a TLS-only port).
pub fn no_server_answered(who: &str, after: Duration, check: &str) -> Error {
    Error::Backend {
        message: format!("{who} answered within {after:?}: check that {check}, and that it is up"),
        retryable: true,
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::is_host_port;

    #[test]
    fn addresses_are_host_and_numeric_port() {
        for good in ["127.0.0.1:2379", "etcd-0.local:2379", "[::1]:2379"] {
            assert!(is_host_port(good), "{good}");
        }
        for bad in ["", "127.0.0.1", "h:port", ":2379", "h:99999", "a/b:1"] {
            assert!(!is_host_port(bad), "{bad}");
        }
    }
}
