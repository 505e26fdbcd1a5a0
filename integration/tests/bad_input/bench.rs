//! One bench per area and store: a client holding an innocent lock, and a
//! table of cases run against it. After each case the bench asserts what
//! issue 10 asks of every bad input: the call returned within its bound, it
//! did not panic, nothing it made is left in the store (nodes, keys,
//! leases), and the innocent lock on the same client is still held.
//! Every case runs, whatever the others did; the test fails at the end with
//! the table of failed cases.

use std::cell::RefCell;
use std::fmt::Debug;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use integration::scale;
use recipes_core::store::LockStore;
use recipes_core::{Client, Error};

use crate::stores::{Settings, Store};

/// The innocent lock's guard on a store's client.
pub type Guard<S> = recipes_core::MutexGuard<<<S as Store>::C as LockStore>::Lease>;

/// How long a dropped guard or client may take to remove its entries.
const CLEANUP_BOUND: Duration = Duration::from_secs(3);

/// The default bound of a case: one RPC or connect timeout of the bench's
/// settings, and room for the store to answer.
pub const CASE_BOUND: Duration = Duration::from_secs(8);

/// What one case may use.
pub struct Ctx<'a, S: Store> {
    /// The bench's client, which holds the innocent lock.
    pub client: &'a S::C,
    root: String,
    allowed: RefCell<Vec<String>>,
}

impl<S: Store> Ctx<'_, S> {
    /// A name inside this case's own root.
    pub fn name(&self, what: &str) -> String {
        format!("{}/{what}", self.root)
    }

    /// The case's own root: nothing else writes below it.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Entries at or under `prefix` are a documented outcome of the case
    /// (a stored semaphore size, a chroot the client made), not a leak.
    pub fn may_leave(&self, prefix: &str) {
        self.allowed.borrow_mut().push(prefix.to_owned());
    }
}

struct Row {
    case: String,
    outcome: Result<(), String>,
    took: Duration,
}

/// One bench of a store at a time in this process: a case's check for new
/// leases sees every session the shared server holds, so benches of one
/// store running side by side (plain `cargo test` runs tests as threads of
/// one process) would see each other's. Under nextest each test is a
/// process of its own.
fn one_bench_at_a_time(store: &str) -> std::sync::MutexGuard<'static, ()> {
    static STORES: [std::sync::Mutex<()>; 4] = [const { std::sync::Mutex::new(()) }; 4];
    let at = ["zk", "etcd", "pg", "redis"]
        .iter()
        .position(|s| *s == store)
        .expect("a known store");
    // A bench that failed panicked holding it: the next may still run.
    STORES[at].lock().unwrap_or_else(|e| e.into_inner())
}

/// A table of cases on one store.
pub struct Bench<S: Store> {
    _alone: std::sync::MutexGuard<'static, ()>,
    area: &'static str,
    root: String,
    client: S::C,
    innocent: Option<Guard<S>>,
    innocent_name: String,
    rows: Vec<Row>,
}

impl<S: Store> Bench<S> {
    /// A bench for `area`: a client of the shared server and its innocent
    /// lock.
    pub fn new(area: &'static str) -> Bench<S> {
        let alone = one_bench_at_a_time(S::LABEL);
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let root = format!("/bad-input/{area}-{}-{n}", std::process::id());
        let settings = Settings {
            ttl: Duration::from_secs(10),
            ..Settings::default()
        };
        let client = S::connect(&settings).expect("the bench's client connects");
        let innocent_name = format!("/bad-input-innocent/{area}-{}-{n}", std::process::id());
        let mut bench = Bench {
            _alone: alone,
            area,
            root,
            client,
            innocent: None,
            innocent_name,
            rows: Vec::new(),
        };
        bench.innocent = Some(bench.lock_innocent());
        bench
    }

    fn lock_innocent(&self) -> Guard<S> {
        self.client
            .mutex(&self.innocent_name)
            .and_then(|m| m.lock())
            .expect("the innocent lock is taken")
    }

    /// Run one case with the default bound.
    pub fn case(&mut self, case: &str, body: impl FnOnce(&Ctx<S>) -> Result<(), String>) {
        self.case_within(case, CASE_BOUND, body)
    }

    /// Run one case, which must return within `bound` (scaled).
    pub fn case_within(
        &mut self,
        case: &str,
        bound: Duration,
        body: impl FnOnce(&Ctx<S>) -> Result<(), String>,
    ) {
        let ctx = Ctx::<S> {
            client: &self.client,
            root: format!("{}/c{}", self.root, self.rows.len()),
            allowed: RefCell::new(Vec::new()),
        };
        let leases_before = S::leases();
        let started = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| body(&ctx)));
        let took = started.elapsed();
        let mut problems = Vec::new();
        match result {
            Ok(Ok(())) => {}
            Ok(Err(wrong)) => problems.push(wrong),
            Err(panic) => problems.push(format!("panicked: {}", panic_text(&panic))),
        }
        if took > scale(bound) {
            problems.push(format!("took {took:?}, more than {bound:?} (scaled)"));
        }
        let allowed = ctx.allowed.borrow().clone();
        if let Some(left) = settle(|| {
            let left: Vec<String> = S::leftovers(&ctx.root)
                .into_iter()
                .filter(|e| !allowed.iter().any(|a| e.starts_with(a.as_str())))
                .collect();
            let leases: Vec<i64> = S::leases()
                .into_iter()
                .filter(|l| !leases_before.contains(l))
                .collect();
            (left.is_empty() && leases.is_empty())
                .then_some(())
                .ok_or((left, leases))
        }) {
            let (entries, leases) = left;
            let entries: Vec<String> = entries.iter().map(|e| cut(e, 160)).collect();
            problems.push(format!(
                "left in the store: {entries:?}, new leases {leases:x?}"
            ));
        }
        self.check_innocent(&mut problems);
        let outcome = if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        };
        self.rows.push(Row {
            case: case.to_owned(),
            outcome,
            took,
        });
    }

    fn check_innocent(&mut self, problems: &mut Vec<String>) {
        let guard = self.innocent.as_ref().expect("the innocent lock");
        let held = guard.check().map_err(|e| e.to_string()).and_then(|()| {
            S::exists(guard.holder())
                .then_some(())
                .ok_or_else(|| format!("its entry {} is gone", guard.holder()))
        });
        if let Err(why) = held {
            problems.push(format!(
                "the innocent lock on the same client was lost: {why}"
            ));
            drop(self.innocent.take());
            // The next case starts from a held lock again, if the client
            // still works at all.
            match self
                .client
                .mutex(&self.innocent_name)
                .and_then(|m| m.lock())
            {
                Ok(g) => self.innocent = Some(g),
                Err(e) => panic!(
                    "{} {}: the bench's client no longer works ({e}); results so far:\n{}",
                    S::LABEL,
                    self.area,
                    self.table()
                ),
            }
        }
    }

    fn table(&self) -> String {
        let mut out = String::new();
        for row in &self.rows {
            let verdict = match &row.outcome {
                Ok(()) => "pass".to_owned(),
                Err(why) => format!("FAIL: {why}"),
            };
            out.push_str(&format!(
                "  [{} {}] {} ({:?}): {verdict}\n",
                S::LABEL,
                self.area,
                row.case,
                row.took
            ));
        }
        out
    }

    /// Print every case's outcome; fail the test if any case failed.
    pub fn finish(mut self) {
        let table = self.table();
        println!("{table}");
        let failed = self.rows.iter().filter(|r| r.outcome.is_err()).count();
        if let Some(g) = self.innocent.take() {
            let _ = g.release();
        }
        let _ = self.client.close_within(Duration::from_secs(5));
        assert!(
            failed == 0,
            "{failed} of {} {} cases failed on {}:\n{table}",
            self.rows.len(),
            self.area,
            S::LABEL
        );
    }
}

/// Poll `probe` until it is `Ok` or the cleanup bound passed; `None` when
/// it settled, else the last `Err`.
fn settle<E>(mut probe: impl FnMut() -> Result<(), E>) -> Option<E> {
    let limit = Instant::now() + scale(CLEANUP_BOUND);
    loop {
        match probe() {
            Ok(()) => return None,
            Err(e) if Instant::now() > limit => return Some(e),
            Err(_) => std::thread::sleep(integration::wait::POLL_INTERVAL),
        }
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// `r` is `InvalidArgument` with a short message that says what to change.
pub fn invalid<T: Debug>(r: recipes_core::Result<T>) -> Result<(), String> {
    match r {
        Err(Error::InvalidArgument(msg)) if !msg.is_empty() && msg.len() < 600 => Ok(()),
        Err(Error::InvalidArgument(msg)) => Err(format!(
            "InvalidArgument, but its message is {} bytes long",
            msg.len()
        )),
        other => Err(format!("expected InvalidArgument, got {}", shown(&other))),
    }
}

/// `r` is `InvalidArgument` whose message holds every one of `words`.
pub fn invalid_saying<T: Debug>(r: recipes_core::Result<T>, words: &[&str]) -> Result<(), String> {
    let msg = match &r {
        Err(Error::InvalidArgument(msg)) => msg.clone(),
        _ => String::new(),
    };
    invalid(r)?;
    match words.iter().find(|w| !msg.contains(**w)) {
        None => Ok(()),
        Some(w) => Err(format!("the message does not say {w:?}: {msg}")),
    }
}

/// `r` is an error that `matches` accepts (`what` names the expected kind).
pub fn error_is<T: Debug>(
    r: recipes_core::Result<T>,
    what: &str,
    matches: impl FnOnce(&Error) -> bool,
) -> Result<(), String> {
    match &r {
        Err(e) if matches(e) => Ok(()),
        _ => Err(format!("expected {what}, got {}", shown(&r))),
    }
}

/// `Ok`, or what went wrong.
pub fn ok<T>(what: &str, r: recipes_core::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: expected Ok, got {}", shown::<()>(&Err(e))))
}

/// A result as messages show it: the variant and its text, cut short.
pub fn shown<T: Debug>(r: &recipes_core::Result<T>) -> String {
    let text = match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!("Err({e:?}) \"{e}\""),
    };
    cut(&text, 400)
}

/// `text`, cut to about `max` bytes with its length said.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}
