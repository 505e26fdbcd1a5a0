//! `recipes status`: who holds NAME and who waits, read from the store.
//!
//! ZooKeeper: the children of NAME (for a semaphore, of `NAME/leases`, with
//! N from NAME's data) in the queue order the recipes use, each with its
//! czxid — the fencing token of a mutex or latch holder. etcd: the keys exactly one level below
//! `NAME/` (for a semaphore, below `NAME/leases/`, with N from
//! `NAME/config`) by create_revision. The first (first N) hold, the rest
//! wait.

use std::fmt::Write as _;
use std::time::Duration;

use recipes_core::{Error, Result, Runtime};
use recipes_etcd::etcd_client::{self, GetOptions, SortOrder, SortTarget};
use recipes_zk::{QueuedNode, ZkClient};

use crate::cli::BackendChoice;

const TIMEOUT: Duration = Duration::from_secs(10);

/// One contender in queue order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Node path or key.
    pub holder: String,
    /// ZooKeeper czxid or etcd create_revision.
    pub order: i64,
    /// The stored value (a participant id for latches and elections).
    pub value: String,
}

/// What the store shows for NAME.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// How many may hold at once (1 unless NAME is a semaphore).
    pub permits: u32,
    /// Every contender in queue order.
    pub entries: Vec<Entry>,
}

/// Read NAME's contenders from the store.
///
/// # Errors
///
/// Connection and read errors.
pub fn read(choice: &BackendChoice, name: &str) -> Result<Status> {
    if !name.starts_with('/') || (name.len() > 1 && name.ends_with('/')) {
        return Err(Error::invalid(format!(
            "{name:?} is not a name like /locks/nightly-report"
        )));
    }
    let endpoints = match choice {
        BackendChoice::Zk(hosts) => return zk_status(hosts, name),
        BackendChoice::Etcd(endpoints) => endpoints.clone(),
    };
    let rt = Runtime::new("recipes-status")?;
    let result = rt.call(
        "read from etcd",
        TIMEOUT,
        etcd_status(endpoints, name.to_owned()),
    );
    rt.shutdown(Duration::from_secs(1));
    result
}

fn backend_error(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::backend(what, true, e)
}

/// The queue in the order the recipes use (`ZkClient::contenders`): NAME's
/// own contenders (mutex, latch, selector), else a semaphore's permit
/// nodes under `NAME/leases`.
fn zk_status(hosts: &str, name: &str) -> Result<Status> {
    let client = ZkClient::builder(hosts)
        .session_timeout(Duration::from_secs(4))
        .connect_timeout(Duration::from_secs(4))
        .connect()?;
    let read = || -> Result<Status> {
        let own = client.contenders(name)?;
        let (permits, nodes) = if own.is_empty() {
            let permits = client.semaphore_size(name)?.unwrap_or(1);
            (permits, client.contenders(&format!("{name}/leases"))?)
        } else {
            (1, own)
        };
        Ok(Status {
            permits,
            entries: nodes.into_iter().map(entry).collect(),
        })
    };
    let status = read();
    client.close(Duration::from_secs(1));
    status
}

fn entry(node: QueuedNode) -> Entry {
    Entry {
        holder: node.path,
        order: node.czxid,
        value: String::from_utf8_lossy(&node.data).into_owned(),
    }
}

async fn etcd_status(endpoints: Vec<String>, name: String) -> Result<Status> {
    let what = format!("connect to etcd at {}", endpoints.join(","));
    let options = etcd_client::ConnectOptions::new().with_connect_timeout(Duration::from_secs(4));
    let mut client = etcd_client::Client::connect(&endpoints, Some(options))
        .await
        .map_err(|e| backend_error(&what, e))?;
    let config = format!("{name}/config");
    let got = client
        .get(config.as_str(), None)
        .await
        .map_err(|e| backend_error(&format!("read {config}"), e))?;
    let (prefix, permits) = match got.kvs().first() {
        Some(kv) => (
            format!("{name}/leases/"),
            String::from_utf8_lossy(kv.value())
                .trim()
                .parse()
                .unwrap_or(1),
        ),
        None => (format!("{name}/"), 1),
    };
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let got = client
        .get(prefix.as_str(), Some(options))
        .await
        .map_err(|e| backend_error(&format!("list {prefix}"), e))?;
    let entries = got
        .kvs()
        .iter()
        .filter_map(|kv| {
            let key = kv.key_str().ok()?;
            let rest = key.strip_prefix(prefix.as_str())?;
            (!rest.is_empty() && !rest.contains('/')).then(|| Entry {
                holder: key.to_owned(),
                order: kv.create_revision(),
                value: String::from_utf8_lossy(kv.value()).into_owned(),
            })
        })
        .collect();
    Ok(Status { permits, entries })
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Render for people (`json == false`) or programs.
pub fn render(status: &Status, name: &str, zk: bool, json: bool) -> String {
    let order = if zk { "czxid" } else { "create_revision" };
    let n = status.permits as usize;
    let (holders, waiters) = status.entries.split_at(n.min(status.entries.len()));
    if json {
        let list = |es: &[Entry]| {
            es.iter()
                .map(|e| {
                    format!(
                        "{{\"holder\":{},\"{order}\":{},{}\"value\":{}}}",
                        json_string(&e.holder),
                        e.order,
                        if zk {
                            format!("\"fence\":{},", e.order)
                        } else {
                            String::new()
                        },
                        json_string(&e.value)
                    )
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        return format!(
            "{{\"name\":{},\"backend\":\"{}\",\"permits\":{},\"holders\":[{}],\"waiters\":[{}]}}\n",
            json_string(name),
            if zk { "zookeeper" } else { "etcd" },
            status.permits,
            list(holders),
            list(waiters)
        );
    }
    let mut out = String::new();
    if status.entries.is_empty() {
        let _ = writeln!(out, "{name}: free (no holders, no waiters)");
        return out;
    }
    for (i, e) in status.entries.iter().enumerate() {
        let role = if i < n { "holder" } else { "waiter" };
        let fence = if zk {
            format!("fence={}", e.order)
        } else {
            format!("{order}={}", e.order)
        };
        let value = if e.value.is_empty() {
            String::new()
        } else {
            format!(" value={}", json_string(&e.value))
        };
        let _ = writeln!(out, "{role:<6} {fence} {}{value}", e.holder);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes() {
        assert_eq!(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
