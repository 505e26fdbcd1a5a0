//! A client in its own OS process, driven over stdin/stdout, so a test can
//! pause it (SIGSTOP) like a long garbage-collection pause, or kill it.
//!
//! One request per line, one reply per line: `OK [fields…]` or
//! `ERR <kind> <message>`. Requests:
//!
//! - `connect zk <hosts> <session_timeout_ms>` → `OK session=<hex> timeout_ms=<n>`
//! - `connect etcd <endpoint[,endpoint…]> <ttl_ms>` → `OK`
//! - `connect zk <hosts> <session_timeout_ms> [deadline|disconnect]` (the
//!   loss policy, default deadline)
//! - `ping` → `OK rtt_us=<n>`
//! - `lock <name> [wait_ms]` → `OK token=<n> holder=<path>`, or `OK timeout`
//!   when not acquired within `wait_ms` (no `wait_ms`: wait as long as it
//!   takes)
//! - `status` → `OK lost=<no|reason> token=<n> valid_until_ms=<boot ms>
//!   last_ack_ms=<boot ms>` for the held lock (times on CLOCK_BOOTTIME, so
//!   comparable across processes)
//! - `write <path> <value>` → a write fenced in the store by the held lock:
//!   `OK`, or `ERR fence-rejected …`
//! - `release` → `OK` once the store confirmed; `drop` → `OK` at once (the
//!   release runs in the background)
//! - `latch <path> <id>` → `OK` once started; `selector <path> <id>` → `OK`
//!   once started (its closure leads until its loss signal fires)
//! - `leader-status` → `OK leading=<yes|no> token=<n> last_ack_ms=<boot ms>`
//!   for the latch or selector (token 0 when not leading)
//! - `pid` → `OK <pid>`
//! - `exit` → `OK`, then the process exits
//!
//! The worker prints `READY` once it reads requests.

use std::io::{self, BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use recipes_core::{
    BootInstant, Error, LatchBackend, LeaderLatch, LeaderSelector, LossPolicy, SelectorBackend,
};
use recipes_etcd::EtcdClient;
use recipes_zk::ZkClient;

enum Client {
    None,
    Zk(ZkClient),
    Etcd(EtcdClient),
}

/// What the worker holds.
enum Held {
    Zk(recipes_zk::MutexGuard),
    Etcd(recipes_etcd::MutexGuard),
}

impl Held {
    fn token(&self) -> u64 {
        match self {
            Held::Zk(g) => g.token().get(),
            Held::Etcd(g) => g.token().get(),
        }
    }

    fn holder(&self) -> &str {
        match self {
            Held::Zk(g) => g.holder(),
            Held::Etcd(g) => g.holder(),
        }
    }

    fn lost(&self) -> &recipes_core::LossSignal {
        match self {
            Held::Zk(g) => g.lost(),
            Held::Etcd(g) => g.lost(),
        }
    }

    fn write(&self, path: &str, value: &str) -> Result<(), Error> {
        match self {
            Held::Zk(g) => g.lease().put(path, value.as_bytes()),
            Held::Etcd(g) => g.lease().put(path, value).map(drop),
        }
    }

    fn release(self) -> Result<(), Error> {
        match self {
            Held::Zk(g) => g.release(),
            Held::Etcd(g) => g.release(),
        }
    }
}

/// A latch or selector this worker runs (dropping it closes it): the token
/// of the term it leads now, if any.
struct Participant {
    leading: Box<dyn Fn() -> Option<u64>>,
}

impl Participant {
    /// Start `latch`.
    fn latch<B: LatchBackend>(latch: LeaderLatch<B>) -> Participant {
        latch.start();
        Participant {
            leading: Box::new(move || latch.leadership().map(|(t, _)| t.get())),
        }
    }

    /// Start `selector` with a closure that leads until its loss signal
    /// fires.
    fn selector<B: SelectorBackend>(selector: LeaderSelector<B>) -> Result<Participant, Error> {
        let term = Arc::new(Mutex::new(None));
        let t = term.clone();
        selector.start(true, move |guard| {
            *t.lock().unwrap() = Some(B::token(guard).get());
            B::trigger(guard).signal().wait();
            *t.lock().unwrap() = None;
        })?;
        Ok(Participant {
            leading: Box::new(move || {
                let t = *term.lock().unwrap();
                t.filter(|_| selector.has_leadership())
            }),
        })
    }
}

struct Worker {
    client: Client,
    held: Option<Held>,
    participant: Option<Participant>,
}

fn boot_ms(t: Option<BootInstant>) -> u128 {
    t.map(|t| t.since_boot().as_millis()).unwrap_or(0)
}

type Reply = Result<String, String>;

fn err(e: &Error) -> String {
    let kind = match e {
        Error::SessionExpired => "session-expired",
        Error::LeaseLost { .. } => "lease-lost",
        Error::ConnectionLoss => "connection-loss",
        Error::Indeterminate { .. } => "indeterminate",
        Error::FenceRejected { .. } => "fence-rejected",
        Error::Timeout { .. } => "timeout",
        Error::NotHeld { .. } => "not-held",
        Error::Closed => "closed",
        Error::InvalidArgument(_) => "invalid-argument",
        _ => "backend",
    };
    format!("{kind} {}", e.to_string().replace('\n', " "))
}

fn usage(msg: &str) -> String {
    format!("usage {msg}")
}

impl Worker {
    fn last_acknowledged(&self) -> Option<BootInstant> {
        match &self.client {
            Client::Zk(c) => c.last_acknowledged(),
            Client::Etcd(c) => c.last_acknowledged(),
            Client::None => None,
        }
    }

    fn handle(&mut self, line: &str) -> Reply {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["connect", "zk", hosts, timeout_ms, rest @ ..] => {
                let ms: u64 = timeout_ms
                    .parse()
                    .map_err(|_| usage("timeout_ms is a number"))?;
                let policy = match rest {
                    [] | ["deadline"] => LossPolicy::Deadline,
                    ["disconnect"] => LossPolicy::OnDisconnect,
                    _ => return Err(usage("loss policy is deadline or disconnect")),
                };
                let c = ZkClient::builder(*hosts)
                    .session_timeout(Duration::from_millis(ms))
                    .loss_policy(policy)
                    .connect()
                    .map_err(|e| err(&e))?;
                let reply = format!(
                    "session={:#x} timeout_ms={}",
                    c.session_id(),
                    c.session_timeout().as_millis()
                );
                self.client = Client::Zk(c);
                Ok(reply)
            }
            ["connect", "etcd", endpoints, ttl_ms] => {
                let ms: u64 = ttl_ms.parse().map_err(|_| usage("ttl_ms is a number"))?;
                let c = EtcdClient::builder(endpoints.split(','))
                    .ttl(Duration::from_millis(ms))
                    .connect()
                    .map_err(|e| err(&e))?;
                self.client = Client::Etcd(c);
                Ok(String::new())
            }
            ["ping"] => {
                let rtt = match &self.client {
                    Client::Zk(c) => c.ping(),
                    Client::Etcd(c) => c.ping(),
                    Client::None => return Err(usage("connect first")),
                }
                .map_err(|e| err(&e))?;
                Ok(format!("rtt_us={}", rtt.as_micros()))
            }
            ["lock", name, rest @ ..] => {
                if self.held.is_some() {
                    return Err(usage("already holding; release first"));
                }
                let wait = match rest {
                    [] => None,
                    [ms] => Some(Duration::from_millis(
                        ms.parse().map_err(|_| usage("wait_ms is a number"))?,
                    )),
                    _ => return Err(usage("lock <name> [wait_ms]")),
                };
                let held = match &self.client {
                    Client::Zk(c) => {
                        let m = c.mutex(name).map_err(|e| err(&e))?;
                        match wait {
                            None => Some(m.lock()),
                            Some(w) => m.try_lock_for(w).transpose(),
                        }
                        .transpose()
                        .map_err(|e| err(&e))?
                        .map(Held::Zk)
                    }
                    Client::Etcd(c) => {
                        let m = c.mutex(name).map_err(|e| err(&e))?;
                        match wait {
                            None => Some(m.lock()),
                            Some(w) => m.try_lock_for(w).transpose(),
                        }
                        .transpose()
                        .map_err(|e| err(&e))?
                        .map(Held::Etcd)
                    }
                    Client::None => return Err(usage("connect first")),
                };
                match held {
                    None => Ok("timeout".to_owned()),
                    Some(h) => {
                        let reply = format!("token={} holder={}", h.token(), h.holder());
                        self.held = Some(h);
                        Ok(reply)
                    }
                }
            }
            ["status"] => {
                let h = self.held.as_ref().ok_or_else(|| usage("nothing held"))?;
                let lost = match h.lost().reason() {
                    None => "no".to_owned(),
                    Some(r) => format!("{r:?}"),
                };
                let last_ack = self.last_acknowledged();
                Ok(format!(
                    "lost={lost} token={} valid_until_ms={} last_ack_ms={}",
                    h.token(),
                    boot_ms(h.lost().valid_until()),
                    boot_ms(last_ack)
                ))
            }
            ["write", path, value] => {
                let h = self.held.as_ref().ok_or_else(|| usage("nothing held"))?;
                // A write whose outcome is unknown (the connection dropped
                // before the reply) is retried until the store answers: the
                // value is the same, so applying it twice is harmless.
                let mut tries = 0;
                loop {
                    match h.write(path, value) {
                        Err(Error::Indeterminate { .. } | Error::ConnectionLoss) if tries < 50 => {
                            tries += 1;
                            std::thread::sleep(Duration::from_millis(100));
                        }
                        r => break r.map_err(|e| err(&e))?,
                    }
                }
                Ok(String::new())
            }
            ["release"] => {
                let h = self.held.take().ok_or_else(|| usage("nothing held"))?;
                h.release().map_err(|e| err(&e))?;
                Ok(String::new())
            }
            ["drop"] => {
                drop(self.held.take().ok_or_else(|| usage("nothing held"))?);
                Ok(String::new())
            }
            ["latch", path, id] => {
                self.participant = Some(match &self.client {
                    Client::Zk(c) => {
                        Participant::latch(c.leader_latch(path, id).map_err(|e| err(&e))?)
                    }
                    Client::Etcd(c) => {
                        Participant::latch(c.leader_latch(path, id).map_err(|e| err(&e))?)
                    }
                    Client::None => return Err(usage("connect first")),
                });
                Ok(String::new())
            }
            ["selector", path, id] => {
                let started = match &self.client {
                    Client::Zk(c) => c.leader_selector(path, id).and_then(Participant::selector),
                    Client::Etcd(c) => c.leader_selector(path, id).and_then(Participant::selector),
                    Client::None => return Err(usage("connect first")),
                };
                self.participant = Some(started.map_err(|e| err(&e))?);
                Ok(String::new())
            }
            ["leader-status"] => {
                let participant = self.participant.as_ref();
                let token = (participant
                    .ok_or_else(|| usage("no latch or selector"))?
                    .leading)();
                let last_ack = self.last_acknowledged();
                Ok(match token {
                    Some(t) => format!("leading=yes token={t} last_ack_ms={}", boot_ms(last_ack)),
                    None => format!("leading=no token=0 last_ack_ms={}", boot_ms(last_ack)),
                })
            }
            ["pid"] => Ok(std::process::id().to_string()),
            _ => Err(usage(&format!("unknown request {line:?}"))),
        }
    }
}

fn main() {
    let stdin = io::stdin();
    let mut out = io::stdout().lock();
    let mut worker = Worker {
        client: Client::None,
        held: None,
        participant: None,
    };
    let _ = writeln!(out, "READY");
    let _ = out.flush();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "exit" {
            let _ = writeln!(out, "OK");
            let _ = out.flush();
            break;
        }
        let reply = match worker.handle(line) {
            Ok(fields) if fields.is_empty() => "OK".to_owned(),
            Ok(fields) => format!("OK {fields}"),
            Err(e) => format!("ERR {e}"),
        };
        let _ = writeln!(out, "{reply}");
        let _ = out.flush();
    }
    // Close the clients before exiting, so sessions end at once.
    drop(worker.held.take());
    drop(worker.participant.take());
    match worker.client {
        Client::Zk(c) => c.close(Duration::from_secs(2)),
        Client::Etcd(c) => c.close(Duration::from_secs(2)),
        Client::None => {}
    }
}
