//! `recipes status`: who holds NAME and who waits, read from the store.
//!
//! ZooKeeper: the children of NAME (for a semaphore, of `NAME/leases`, with
//! N from NAME's data) in the queue order the recipes use, each with its
//! czxid — the fencing token of a mutex or latch holder. etcd: the keys exactly one level below
//! `NAME/` (for a semaphore, below `NAME/leases/`, with N from
//! `NAME/config`) by create_revision. PostgreSQL: NAME's live queue rows
//! (for a semaphore, `NAME/leases`'s, with N from NAME's row) by `seq`, and
//! for a name used in session mode first the backends that hold or wait
//! for its advisory lock. The first (first N) hold, the rest wait. A lone
//! holder's fence is shown where the store keeps it
//! ([`Client::holder_fence`]: PostgreSQL's name counter, Redis's fence key;
//! ZooKeeper's is
//! each node's czxid).

use std::fmt::Write as _;
use std::time::Duration;

use recipes_core::store::engine::{Role, Rule, Verdict};
use recipes_core::{Client, Contender, Result};

/// One contender in queue order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Node path or key.
    pub holder: String,
    /// ZooKeeper czxid or etcd create_revision.
    pub order: i64,
    /// The stored value (a participant id for latches and elections).
    pub value: String,
    /// What it is, where the store's layout says (a read-write lock's
    /// readers and writers).
    pub role: Option<Role>,
}

/// What the store shows for NAME.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// How many may hold at once (1 unless NAME is a semaphore).
    pub permits: u32,
    /// Every contender in queue order.
    pub entries: Vec<Entry>,
    /// The holder's fence as the store keeps it ([`Client::holder_fence`]),
    /// when NAME has one holder (not a semaphore's permits).
    pub fence: Option<u64>,
}

/// How long NAME has had no holder, as `--watch` saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vacancy {
    /// Since the last holder went, or since the watch began.
    pub for_: Duration,
    /// It had none when the watch began: it may have had none for longer.
    pub at_least: bool,
}

/// Read NAME's contenders in the order the recipes use
/// ([`Client::contenders`]): a semaphore's permits when NAME stores a
/// size, else NAME's own contenders (mutex, election, latch, selector).
///
/// # Errors
///
/// A name the store refuses; connection and read errors.
pub fn read<C: Client>(client: &C, name: &str) -> Result<Status> {
    let (size, permits) = client.permits(name)?;
    let (permits, contenders, fenced) = match size {
        Some(n) => (n, permits, false),
        None => {
            let own = client.contenders(name)?;
            // A semaphore only Curator used stores no size.
            if own.is_empty() && !permits.is_empty() {
                (1, permits, false)
            } else {
                let fenced = !own.is_empty();
                (1, own, fenced)
            }
        }
    };
    let fence = match fenced {
        true => client.holder_fence(name)?,
        false => None,
    };
    Ok(Status {
        permits,
        entries: contenders.into_iter().map(entry).collect(),
        fence,
    })
}

fn entry(c: Contender) -> Entry {
    Entry {
        holder: c.holder,
        order: c.created,
        value: String::from_utf8_lossy(&c.value).into_owned(),
        role: c.role,
    }
}

/// How many at the head of the queue hold: a read-write lock's by its
/// rule (readers up to the first writer, or the writer at the head), any
/// other recipe's the first `permits`.
fn holding(status: &Status) -> usize {
    let rw = |e: &Entry| matches!(e.role, Some(Role::Reader | Role::Writer));
    if !status.entries.iter().any(rw) {
        return (status.permits as usize).min(status.entries.len());
    }
    let roles: Vec<Role> = status
        .entries
        .iter()
        .map(|e| e.role.unwrap_or(Role::Writer))
        .collect();
    (0..roles.len())
        .take_while(|i| Rule::ReadWrite.decide(&roles, *i) == Verdict::Holds)
        .count()
}

/// A read-write lock's entry's side, as shown: `reader ` or `writer `.
fn side(e: &Entry) -> &'static str {
    match e.role {
        Some(Role::Reader) => "reader ",
        Some(Role::Writer) => "writer ",
        _ => "",
    }
}

pub(crate) fn json_string(s: &str) -> String {
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

/// Render for people (`json == false`) or programs; `store` is
/// [`Client::store`]. `watched` is `None` for a one-shot read; under
/// `--watch` it is `Some` of how long NAME has had no holder (`Some(None)`
/// while it has one).
pub fn render(
    status: &Status,
    name: &str,
    store: &str,
    json: bool,
    watched: Option<Option<Vacancy>>,
) -> String {
    let zk = store == "zk";
    let (order, backend) = match store {
        "zk" => ("czxid", "zookeeper"),
        "pg" => ("seq", "postgresql"),
        "redis" => ("place", "redis"),
        _ => ("create_revision", "etcd"),
    };
    let n = holding(status);
    let (holders, waiters) = status.entries.split_at(n);
    // ZooKeeper's fence is each node's czxid; the other stores keep the
    // holder's alone (when they keep it).
    let fence_of = |i: usize, e: &Entry| match (zk, status.fence) {
        (true, _) => Some(e.order.unsigned_abs()),
        (false, Some(f)) if i == 0 && n == 1 && side(e).is_empty() => Some(f),
        _ => None,
    };
    if json {
        let list = |es: &[Entry], first: usize| {
            es.iter()
                .enumerate()
                .map(|(i, e)| {
                    format!(
                        "{{\"holder\":{},{}\"{order}\":{},{}\"value\":{}}}",
                        json_string(&e.holder),
                        match side(e) {
                            "" => String::new(),
                            s => format!("\"role\":\"{}\",", s.trim_end()),
                        },
                        e.order,
                        match fence_of(first + i, e) {
                            Some(f) => format!("\"fence\":{f},"),
                            None => String::new(),
                        },
                        json_string(&e.value)
                    )
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        let vacancy = match watched {
            None => String::new(),
            Some(None) => ",\"no_holder_for_ms\":null".into(),
            Some(Some(v)) => format!(
                ",\"no_holder_for_ms\":{},\"at_least\":{}",
                v.for_.as_millis(),
                v.at_least
            ),
        };
        return format!(
            "{{\"name\":{},\"backend\":\"{}\",\"permits\":{},\"holders\":[{}],\"waiters\":[{}]{vacancy}}}\n",
            json_string(name),
            backend,
            status.permits,
            list(holders, 0),
            list(waiters, holders.len())
        );
    }
    let mut out = String::new();
    if let Some(watched) = watched {
        let _ = writeln!(out, "{name} on {backend} (watching; Ctrl-C ends)");
        if let Some(v) = watched {
            let at_least = if v.at_least { "at least " } else { "" };
            let _ = writeln!(
                out,
                "no leader: no holder for {at_least}{:.1} s",
                v.for_.as_secs_f64()
            );
        }
    }
    if status.entries.is_empty() {
        let _ = writeln!(out, "{name}: free (no holders, no waiters)");
        return out;
    }
    for (i, e) in status.entries.iter().enumerate() {
        let role = if i < n { "holder" } else { "waiter" };
        let fence = match (zk, fence_of(i, e)) {
            (true, _) => format!("fence={}", e.order),
            (false, Some(f)) => format!("{order}={} fence={f}", e.order),
            (false, None) => format!("{order}={}", e.order),
        };
        let value = if e.value.is_empty() {
            String::new()
        } else {
            format!(" value={}", json_string(&e.value))
        };
        let _ = writeln!(out, "{role:<6} {}{fence} {}{value}", side(e), e.holder);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(holder: &str, role: Role) -> Entry {
        Entry {
            holder: holder.into(),
            order: 1,
            value: String::new(),
            role: Some(role),
        }
    }

    #[test]
    fn readers_up_to_the_first_writer_hold_and_the_rest_wait() {
        let status = Status {
            permits: 1,
            entries: vec![
                entry("/rw/r1", Role::Reader),
                entry("/rw/r2", Role::Reader),
                entry("/rw/w1", Role::Writer),
                entry("/rw/r3", Role::Reader),
            ],
            fence: Some(9),
        };
        let text = render(&status, "/rw", "etcd", false, None);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("holder reader "), "{text}");
        assert!(lines[1].starts_with("holder reader "), "{text}");
        assert!(lines[2].starts_with("waiter writer "), "{text}");
        assert!(lines[3].starts_with("waiter reader "), "{text}");
        let json = render(&status, "/rw", "etcd", true, None);
        assert!(
            json.contains("\"holders\":[{\"holder\":\"/rw/r1\",\"role\":\"reader\""),
            "{json}"
        );
        assert!(
            !json.contains("fence"),
            "no one reader owns the name's fence: {json}"
        );
    }

    #[test]
    fn json_escapes() {
        assert_eq!(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
