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
/// a TLS-only port), then that the server is up and reachable; an empty
/// `check` says only the latter.
pub fn no_server_answered(who: &str, after: Duration, check: &str) -> Error {
    let first = match check.trim() {
        "" => String::new(),
        check => format!("{check}, and that "),
    };
    Error::Backend {
        message: format!(
            "{who} answered within {after:?}: check that {first}the server is up and \
             reachable from this host"
        ),
        retryable: true,
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::{is_host_port, no_server_answered};
    use std::time::Duration;

    #[test]
    fn an_unanswered_connect_says_each_check_once() {
        let said = |check| no_server_answered("no server at h:1", Duration::from_secs(2), check);
        let with = said("the port is the store's").to_string();
        assert!(
            with.contains("check that the port is the store's, and that the server is up"),
            "{with}"
        );
        let without = said("").to_string();
        assert!(without.contains("check that the server is up"), "{without}");
        for text in [with, without] {
            assert_eq!(text.matches("is up").count(), 1, "{text}");
        }
    }

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
