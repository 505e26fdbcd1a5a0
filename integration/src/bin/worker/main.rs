//! A client in its own OS process, driven over stdin/stdout, so a test can
//! pause it (SIGSTOP) like a long garbage-collection pause, or kill it.
//! Written once against [`recipes_core::Client`]: the `connect` request
//! picks the store, everything after it is the same code.
//!
//! One request per line, one reply per line: `OK [fields…]` or
//! `ERR <kind> <message>`. Requests:
//!
//! - `connect zk <hosts> <session_timeout_ms>` → `OK session=<hex> timeout_ms=<n>`
//! - `connect etcd <endpoint[,endpoint…]> <ttl_ms>` → `OK`
//! - `connect pg <url> <ttl_ms> [listen_url]` → `OK`
//! - `connect pg-session <url> <ttl_ms>` → `OK` (advisory locks)
//! - `connect redis <url> <ttl_ms>` → `OK`
//! - `connect zk <hosts> <session_timeout_ms> [deadline|disconnect]` (the
//!   loss policy, default deadline)
//! - any `connect` followed by `tls <ca> <cert> <key>` (PEM files):
//!   over mutual TLS
//! - `ping` → `OK rtt_us=<n>`
//! - `lock <name> [wait_ms]` → `OK token=<n> holder=<path>`, or `OK timeout`
//!   when not acquired within `wait_ms` (no `wait_ms`: wait as long as it
//!   takes)
//! - `rwlock <read|write> <name> [wait_ms]` → as `lock`, for one side of
//!   the read-write lock `name`
//! - `multi <part>[,<part>…] [wait_ms]` → as `lock`, for a multi-lock; a
//!   part is `m:<name>` (a mutex), `r:<name>` or `w:<name>` (a side of a
//!   read-write lock); `token` and `holder` are the first name's, `tokens`
//!   lists `name:token` for every name
//! - `status` → `OK lost=<no|reason> token=<n> valid_until_ms=<boot ms>
//!   last_ack_ms=<boot ms>` for the held lock (times on CLOCK_BOOTTIME, so
//!   comparable across processes); after `multi`, also `lost_name=<name|->`
//! - `write <path> <value>` → a write fenced in the store by the held lock:
//!   `OK`, or `ERR fence-rejected …`
//! - `txwrite <table> <value>` (PostgreSQL only) → the value inserted into
//!   `<table> (fence bigint)` in a transaction fenced by the held lock:
//!   `OK`, or `ERR fence-rejected …`
//! - `release` → `OK` once the store confirmed; `drop` → `OK` at once (the
//!   release runs in the background)
//! - `latch <path> <id>` → `OK` once started; `selector <path> <id>` → `OK`
//!   once started (its closure leads until its loss signal fires)
//! - `leader-status` → `OK leading=<yes|no> token=<n> last_ack_ms=<boot ms>`
//!   for the latch or selector (token 0 when not leading)
//! - `pid` → `OK <pid>`
//! - `count-add <name> <n>` → `OK value=<last> conflicts=<n>`: `add(1)` to
//!   the 32-bit counter `name`, `n` times
//! - `barrier-set <name> [tied]` → `OK` once the barrier is up (`tied`:
//!   under this worker's session)
//! - `double-barrier <name> <count>` → `OK` once `count` members entered
//!   (waits as long as it takes); `leave` → `OK` once every member left
//! - `join <name> <id> [data]` → `OK`: join the group `<name>` as `<id>`;
//!   `member-status` → `OK lost=<no|reason> valid_until_ms=<boot ms>`;
//!   `group-leave` → `OK` (released).
//! - `permit <name> <size>` → `OK holder=<path>`: one permit of the
//!   semaphore `<name>` of `<size>` permits, held until the worker ends
//! - `exit` → `OK`, then the process exits
//!
//! The worker prints `READY` once it reads requests.

use std::io::{self, BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use integration::certs::with_tls;
use recipes_core::store::{ElectionBackend, LockStore};
use recipes_core::Tls;
use recipes_core::{
    BootInstant, Client, Error, LeaderLatch, LeaderSelector, LossPolicy, MutexGuard,
};
use recipes_etcd::{EtcdClient, EtcdClientBuilder};
use recipes_pg::{PgClient, PgClientBuilder};
use recipes_redis::{RedisClient, RedisClientBuilder};
use recipes_zk::{ZkClient, ZkClientBuilder};

/// A latch or selector this worker runs (dropping it closes it): the token
/// of the term it leads now, if any.
struct Participant {
    leading: Box<dyn Fn() -> Option<u64>>,
}

impl Participant {
    /// Start `latch`.
    fn latch<E: ElectionBackend>(latch: LeaderLatch<E>) -> Participant {
        latch.start();
        Participant {
            leading: Box::new(move || latch.leadership().map(|(t, _)| t.get())),
        }
    }

    /// Start `selector` with a closure that leads until its loss signal
    /// fires.
    fn selector<E: ElectionBackend>(selector: LeaderSelector<E>) -> Result<Participant, Error> {
        let term = Arc::new(Mutex::new(None));
        let t = term.clone();
        selector.start(true, move |guard| {
            *t.lock().unwrap() = Some(guard.token().get());
            guard.lost().wait();
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

/// The held lock of a client of type `C`.
type Held<C> = MutexGuard<<C as LockStore>::Lease>;

struct Worker<C: Client> {
    client: C,
    held: Option<Box<dyn Holding>>,
    participant: Option<Participant>,
    member: Option<recipes_core::DoubleBarrierMember<<C as Client>::Barrier>>,
    membership: Option<recipes_core::Membership<C::Group>>,
    /// Semaphore permits held (`permit`), released when the worker ends.
    permits: Vec<Box<dyn std::any::Any>>,
}

fn boot_ms(t: Option<BootInstant>) -> u128 {
    t.map(|t| t.since_boot().as_millis()).unwrap_or(0)
}

type Reply = Result<String, String>;

fn err(e: &Error) -> String {
    let kind = e.kind().replace('_', "-");
    format!("{kind} {}", e.to_string().replace('\n', " "))
}

fn usage(msg: &str) -> String {
    format!("usage {msg}")
}

fn millis(ms: &str, what: &str) -> Result<Duration, String> {
    ms.parse()
        .map(Duration::from_millis)
        .map_err(|_| usage(&format!("{what} is a number")))
}

impl<C: Client> Worker<C> {
    /// Keep what an acquiring request took: `OK token=… holder=…`, or
    /// `OK timeout`.
    fn take<G: Holding>(&mut self, taken: Result<Option<G>, Error>) -> Reply {
        match taken.map_err(|e| err(&e))? {
            None => Ok("timeout".to_owned()),
            Some(g) => {
                let mut reply = format!("token={} holder={}", g.token(), g.holder());
                if let Some(tokens) = g.tokens() {
                    reply.push_str(&format!(" tokens={tokens}"));
                }
                self.held = Some(Box::new(g));
                Ok(reply)
            }
        }
    }

    fn handle(&mut self, words: &[&str]) -> Reply {
        if matches!(words.first(), Some(&("lock" | "rwlock" | "multi"))) && self.held.is_some() {
            return Err(usage("already holding; release first"));
        }
        match words {
            ["ping"] => {
                let rtt = self.client.ping().map_err(|e| err(&e))?;
                Ok(format!("rtt_us={}", rtt.as_micros()))
            }
            ["lock", name, rest @ ..] => {
                let wait = wait_of(rest, "lock <name> [wait_ms]")?;
                let m = self.client.mutex(name).map_err(|e| err(&e))?;
                self.take(match wait {
                    None => m.lock().map(Some),
                    Some(w) => m.try_lock_for(w),
                })
            }
            ["rwlock", side, name, rest @ ..] => {
                let wait = wait_of(rest, "rwlock <read|write> <name> [wait_ms]")?;
                let rw = self.client.rw_lock(name).map_err(|e| err(&e))?;
                match *side {
                    "read" => self.take(match wait {
                        None => rw.read().map(Some),
                        Some(w) => rw.try_read_for(w),
                    }),
                    "write" => self.take(match wait {
                        None => rw.write().map(Some),
                        Some(w) => rw.try_write_for(w),
                    }),
                    _ => Err(usage("rwlock <read|write> <name> [wait_ms]")),
                }
            }
            ["multi", spec, rest @ ..] => {
                let wait = wait_of(rest, "multi <part>[,<part>…] [wait_ms]")?;
                let parts = multi_parts(spec)?;
                let multi = self.client.multi_lock_of(&parts).map_err(|e| err(&e))?;
                self.take(match wait {
                    None => multi.lock().map(Some),
                    Some(w) => multi.try_lock_for(w),
                })
            }
            ["status"] => {
                let h = self.held.as_ref().ok_or_else(|| usage("nothing held"))?;
                let lost = match h.lost().reason() {
                    None => "no".to_owned(),
                    Some(r) => format!("{r:?}"),
                };
                let mut reply = format!(
                    "lost={lost} token={} valid_until_ms={} last_ack_ms={}",
                    h.token(),
                    boot_ms(h.lost().valid_until()),
                    boot_ms(self.client.last_acknowledged())
                );
                if let Some(name) = h.lost_name() {
                    reply.push_str(&format!(" lost_name={}", name.as_deref().unwrap_or("-")));
                }
                Ok(reply)
            }
            ["write", path, value] => {
                let h = self.held.as_ref().ok_or_else(|| usage("nothing held"))?;
                // A write whose outcome is unknown (the connection dropped
                // before the reply) is retried until the store answers: the
                // value is the same, so applying it twice is harmless.
                let mut tries = 0;
                loop {
                    match h.put(path, value.as_bytes()) {
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
                let latch = self.client.leader_latch(path, id).map_err(|e| err(&e))?;
                self.participant = Some(Participant::latch(latch));
                Ok(String::new())
            }
            ["selector", path, id] => {
                let started = self
                    .client
                    .leader_selector(path, id)
                    .and_then(Participant::selector);
                self.participant = Some(started.map_err(|e| err(&e))?);
                Ok(String::new())
            }
            ["leader-status"] => {
                let participant = self.participant.as_ref();
                let token = (participant
                    .ok_or_else(|| usage("no latch or selector"))?
                    .leading)();
                let last_ack = boot_ms(self.client.last_acknowledged());
                Ok(match token {
                    Some(t) => format!("leading=yes token={t} last_ack_ms={last_ack}"),
                    None => format!("leading=no token=0 last_ack_ms={last_ack}"),
                })
            }
            ["pid"] => Ok(std::process::id().to_string()),
            ["count-add", name, n] => {
                let n: u64 = n.parse().map_err(|_| usage("count-add <name> <n>"))?;
                let c = self.client.counter(name).map_err(|e| err(&e))?;
                let (mut value, mut conflicts) = (0, 0);
                for _ in 0..n {
                    let added = c.add_counted(1).map_err(|e| err(&e))?;
                    (value, conflicts) = (added.now.value, conflicts + added.conflicts);
                }
                Ok(format!("value={value} conflicts={conflicts}"))
            }
            ["barrier-set", name, rest @ ..] => {
                let barrier = self.client.barrier(name).map_err(|e| err(&e))?;
                let barrier = match rest {
                    [] => barrier,
                    ["tied"] => barrier.tied_to_session(),
                    _ => return Err(usage("barrier-set <name> [tied]")),
                };
                barrier.set().map_err(|e| err(&e))?;
                Ok(String::new())
            }
            ["double-barrier", name, count] => {
                let count = count
                    .parse()
                    .map_err(|_| usage("double-barrier <name> <count>"))?;
                let barrier = self.client.double_barrier(name, count);
                let member = barrier.and_then(|b| b.enter()).map_err(|e| err(&e))?;
                self.member = Some(member);
                Ok(String::new())
            }
            ["leave"] => {
                let member = self.member.take().ok_or_else(|| usage("not a member"))?;
                member.leave().map_err(|e| err(&e))?;
                Ok(String::new())
            }
            ["join" | "member-status" | "group-leave", ..] => self.group_verb(words),
            ["permit", name, size] => {
                let size = size.parse().map_err(|_| usage("permit <name> <size>"))?;
                let sem = self.client.semaphore(name, size).map_err(|e| err(&e))?;
                let permit = sem.acquire().map_err(|e| err(&e))?;
                let reply = format!("holder={}", permit.holder());
                self.permits.push(Box::new(permit));
                Ok(reply)
            }
            _ => Err(usage(&format!("unknown request {:?}", words.join(" ")))),
        }
    }

    /// Close before exiting, so the session ends at once.
    fn close(mut self) {
        drop(self.held.take());
        drop(self.participant.take());
        drop(self.member.take());
        let _ = self.client.close_within(Duration::from_secs(2));
    }
}

/// A connected worker of either store.
// One per worker process: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Connected {
    Zk(Worker<ZkClient>),
    Etcd(Worker<EtcdClient>),
    Pg(Worker<PgClient>),
    Redis(Worker<RedisClient>),
}

fn worker<C: Client>(client: C) -> Worker<C> {
    Worker {
        client,
        held: None,
        participant: None,
        member: None,
        membership: None,
        permits: Vec::new(),
    }
}

fn connect(words: &[&str]) -> Result<(Connected, String), String> {
    let (words, tls) = match words {
        [head @ .., "tls", ca, cert, key] => (head, Some(Tls::new(ca).cert(cert).key(key))),
        _ => (words, None),
    };
    match words {
        ["connect", "zk", hosts, timeout_ms, rest @ ..] => {
            let policy = match rest {
                [] | ["deadline"] => LossPolicy::Deadline,
                ["disconnect"] => LossPolicy::OnDisconnect,
                _ => return Err(usage("loss policy is deadline or disconnect")),
            };
            let c = with_tls(ZkClient::builder(*hosts), tls.clone(), ZkClientBuilder::tls)
                .session_timeout(millis(timeout_ms, "timeout_ms")?)
                .loss_policy(policy)
                .connect()
                .map_err(|e| err(&e))?;
            let reply = format!(
                "session={:#x} timeout_ms={}",
                c.session_id().unwrap_or_default(),
                c.session_timeout().as_millis()
            );
            Ok((Connected::Zk(worker(c)), reply))
        }
        ["connect", "etcd", endpoints, ttl_ms] => {
            let c = with_tls(
                EtcdClient::builder(endpoints.split(',')),
                tls.clone(),
                EtcdClientBuilder::tls,
            )
            .ttl(millis(ttl_ms, "ttl_ms")?)
            .connect()
            .map_err(|e| err(&e))?;
            Ok((Connected::Etcd(worker(c)), String::new()))
        }
        ["connect", "pg-session", url, ttl_ms] => {
            let c = PgClient::builder(*url)
                .ttl(millis(ttl_ms, "ttl_ms")?)
                .session_mode()
                .connect()
                .map_err(|e| err(&e))?;
            Ok((Connected::Pg(worker(c)), String::new()))
        }
        ["connect", "pg", url, ttl_ms, listen @ ..] => {
            let mut builder = with_tls(PgClient::builder(*url), tls.clone(), PgClientBuilder::tls)
                .ttl(millis(ttl_ms, "ttl_ms")?);
            match listen {
                [] => {}
                [listen_url] => builder = builder.listen_url(*listen_url),
                _ => return Err(usage("connect pg <url> <ttl_ms> [listen_url]")),
            }
            let c = builder.connect().map_err(|e| err(&e))?;
            Ok((Connected::Pg(worker(c)), String::new()))
        }
        ["connect", "redis", url, ttl_ms] => {
            let c = with_tls(
                RedisClient::builder(*url),
                tls.clone(),
                RedisClientBuilder::tls,
            )
            .ttl(millis(ttl_ms, "ttl_ms")?)
            .connect()
            .map_err(|e| err(&e))?;
            Ok((Connected::Redis(worker(c)), String::new()))
        }
        _ => Err(usage("connect first")),
    }
}

/// Insert `value` into `table` in a transaction fenced by the held lock.
fn txwrite(w: &Worker<PgClient>, table: &str, value: &str) -> Reply {
    use recipes_pg::tokio_postgres::types::Type;
    use recipes_pg::FencedTransaction;
    let h = w.held.as_ref().ok_or_else(|| usage("nothing held"))?;
    let h = h
        .as_any()
        .downcast_ref::<Held<PgClient>>()
        .ok_or_else(|| usage("txwrite needs a mutex held"))?;
    let value: i64 = value.parse().map_err(|_| usage("the value is a number"))?;
    let sql = format!("INSERT INTO {table} (fence) VALUES ($1)");
    h.transaction(|tx| tx.execute(&sql, &[(&value, Type::INT8)]))
        .map_err(|e| err(&e))?;
    Ok(String::new())
}

mod group;
mod holding;

use holding::{multi_parts, wait_of, Holding};

fn main() {
    let stdin = io::stdin();
    let mut out = io::stdout().lock();
    let mut connected: Option<Connected> = None;
    let _ = writeln!(out, "READY");
    let _ = out.flush();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        if words == ["exit"] {
            let _ = writeln!(out, "OK");
            let _ = out.flush();
            break;
        }
        let reply = match (&mut connected, words.as_slice()) {
            (_, ["pid"]) => Ok(std::process::id().to_string()),
            (None, _) => connect(&words).map(|(c, reply)| {
                connected = Some(c);
                reply
            }),
            (Some(Connected::Zk(w)), _) => w.handle(&words),
            (Some(Connected::Etcd(w)), _) => w.handle(&words),
            (Some(Connected::Pg(w)), ["txwrite", table, value]) => txwrite(w, table, value),
            (Some(Connected::Pg(w)), _) => w.handle(&words),
            (Some(Connected::Redis(w)), _) => w.handle(&words),
        };
        let reply = match reply {
            Ok(fields) if fields.is_empty() => "OK".to_owned(),
            Ok(fields) => format!("OK {fields}"),
            Err(e) => format!("ERR {e}"),
        };
        let _ = writeln!(out, "{reply}");
        let _ = out.flush();
    }
    match connected {
        Some(Connected::Zk(w)) => w.close(),
        Some(Connected::Etcd(w)) => w.close(),
        Some(Connected::Pg(w)) => w.close(),
        Some(Connected::Redis(w)) => w.close(),
        None => {}
    }
}
