//! A minimal HTTP/1.0 client for etcd's `/health` and JSON gateway on
//! loopback: synchronous, no runtime, a hard timeout, so it can tell a
//! paused server from a live one.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// Sends one request and returns `(status code, body)`.
///
/// HTTP/1.0 keeps the answer unchunked and the connection closed after it.
///
/// # Errors
///
/// Connection errors, `TimedOut` after `timeout`, `InvalidData` for a
/// malformed answer.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    timeout: Duration,
) -> io::Result<(u16, String)> {
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = crate::tcp::exchange(addr, request.as_bytes(), timeout, || {
        format!("{method} {path} at {addr}: no answer in {timeout:?}")
    })?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("no HTTP header end in {text:?}"),
        )
    })?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("no HTTP status in {head:?}"),
            )
        })?;
    Ok((status, body.to_owned()))
}

/// The value of `"key":"value"` or `"key":value` (first occurrence) in a
/// flat JSON text. Enough for the gateway's status answers, where 64-bit
/// numbers are quoted strings.
pub fn json_field<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let start = json.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = json[start..].trim_start();
    if let Some(quoted) = rest.strip_prefix('"') {
        quoted.split('"').next()
    } else {
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        Some(rest[..end].trim())
    }
}

#[cfg(test)]
mod tests {
    use super::json_field;

    #[test]
    fn reads_quoted_and_bare_fields() {
        let json = r#"{"header":{"member_id":"136","revision":"1"},"leader":"136","dbSize":32768}"#;
        assert_eq!(json_field(json, "member_id"), Some("136"));
        assert_eq!(json_field(json, "leader"), Some("136"));
        assert_eq!(json_field(json, "dbSize"), Some("32768"));
        assert_eq!(json_field(json, "missing"), None);
    }
}
