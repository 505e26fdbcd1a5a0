//! M1–M5, written once over [`recipes_core::Client`]: what each store adds
//! is in [`Store`].

use std::time::{Duration, Instant};

use integration::wait_until;
use recipes_core::Client;

use crate::handoff::Handoffs;
use crate::out::{line, percentile_us, rate_and_latency, Figures, V};
use crate::raw::Samples;

/// A raw handoff among this many contenders for this long: what it saw,
/// and how long it ran.
pub type RawHandoff = dyn Fn(usize, Duration) -> (Handoffs, Duration);

/// The raw minimum of a failover: one handoff after a release (`false`)
/// or after the holder's lease or session ended (`true`), timed as M3
/// times ours.
pub type RawFailover = dyn Fn(bool) -> Duration;

/// A raw queue of this many waiters over this many clients, with the
/// store's request counter.
pub type RawQueue = dyn Fn(usize, usize, &dyn Fn() -> Option<u64>) -> crate::raw_queue::PerRelease;

/// A raw barrier of this many waiters over this many clients, in this
/// round: each waiter's wake after the release's start.
pub type RawFanout = dyn Fn(usize, usize, usize) -> Vec<Duration>;

/// Statements the server ran while the closure ran, and the closure's
/// cycles (PostgreSQL's log count: `pg_raw.rs`).
pub type StatementCount = dyn Fn(&mut dyn FnMut() -> usize) -> (u64, usize);

/// A store under measurement.
pub struct Store<C> {
    pub name: &'static str,
    /// A new client (its own session) with this TTL.
    pub connect: Box<dyn Fn(Duration) -> C + Send + Sync>,
    /// The raw minimum of an uncontended cycle, for this long, by the
    /// raw client numbered so (clients of different numbers may run at
    /// once: their names differ).
    pub raw: Option<Box<dyn Fn(Duration, usize) -> Samples + Send + Sync>>,
    /// The raw limit of a handoff among this many contenders, for this
    /// long, where the bench has one (etcd's: `handoff.rs`); M2 is
    /// otherwise beside the uncontended raw minimum.
    pub raw_handoff: Option<Box<RawHandoff>>,
    /// The raw failover, where the bench has one (`failover.rs`).
    pub raw_failover: Option<Box<RawFailover>>,
    /// The raw queue of waiters, where the bench has one (`raw_queue.rs`):
    /// this many waiters over this many clients.
    pub raw_queue: Option<Box<RawQueue>>,
    /// The raw holder of many, where the bench has one (`raw_held.rs`).
    pub raw_held: Option<Box<crate::raw_held::RawHeld>>,
    /// M8's raw fan-out (`raw_fanout.rs`): this many waiters over this
    /// many clients, in this round; each wake after the release.
    pub raw_fanout: Option<Box<RawFanout>>,
    /// The server's count of requests served so far, where it keeps one.
    pub requests: Box<dyn Fn() -> Option<u64>>,
    /// The server's CPU seconds and the watch events it sent so far, where
    /// it says (etcd's metrics; PostgreSQL's processes, no events): M6
    /// readers' cost a cycle beside the raw's.
    pub server_work: Box<dyn Fn() -> Option<Work>>,
    /// Where the server counts statements only on demand (PostgreSQL):
    /// how many ran while the closure ran.
    pub statements: Option<Box<StatementCount>>,
    /// How many waiters or held locks a run can keep open at once, where
    /// the store bounds it below M4's and M5's sizes (PostgreSQL's session
    /// mode holds a server connection for each); larger sizes print a
    /// line that says why they were skipped.
    pub most_open: Option<(usize, &'static str)>,
    /// End a client as a crash would.
    pub kill: Box<dyn Fn(&C)>,
    /// What [`kill`](Store::kill) is on this store.
    pub kill_is: &'static str,
}

/// The sizes of one run: `--quick` makes every one small.
pub struct Sizes {
    pub seconds: Duration,
    pub contenders: &'static [usize],
    pub rounds: usize,
    pub waiters: &'static [usize],
    pub held: &'static [usize],
    pub idle: Duration,
}

impl<C> Store<C> {
    /// Whether `n` open waiters or held locks fit; if not, print M4's or
    /// M5's line for `n` saying why it was skipped.
    pub fn fits(&self, metric: &str, size: &'static str, n: usize) -> bool {
        match self.most_open {
            Some((most, why)) if n > most => {
                let figures = vec![
                    (size, V::N(n as f64)),
                    ("skipped", V::S(format!("{why}; at most {most} here"))),
                ];
                line(metric, self.name, figures, None, 0);
                false
            }
            _ => true,
        }
    }

    /// The name of one measurement's lock, the store's own: two stores on
    /// one server (PostgreSQL's two modes) never share a name.
    pub fn lock_name(&self, what: &str) -> String {
        format!("/bench/{}/{what}", self.name)
    }
}

fn raw_figures<C>(store: &Store<C>, seconds: Duration) -> Option<Figures> {
    let raw = store.raw.as_ref()?;
    let meter = Meter::start(store);
    let (mut samples, elapsed) = raw(seconds, 0);
    let mut figures = rate_and_latency(&mut samples, elapsed);
    figures.extend(meter.per_cycle(samples.len()));
    Some(figures)
}

/// CPU seconds and watch events so far: the server's, or this process's
/// CPU (the clients', [`own_cpu`]).
#[derive(Clone, Copy, Default)]
pub struct Work {
    pub cpu_seconds: f64,
    /// Watch events (`None`: the store has no watches to count).
    pub events: Option<f64>,
}

/// This process's CPU seconds so far (user and system, every thread).
pub fn own_cpu() -> f64 {
    process_cpu("self")
}

/// The CPU seconds so far of process `pid` (`self`: this one).
pub fn process_cpu(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's closing parenthesis: fields 3 on; utime and
    // stime are the 14th and 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    match (ticks(11), ticks(12)) {
        (Some(u), Some(s)) if hz > 0.0 => (u + s) / hz,
        _ => 0.0,
    }
}

/// The server's and this process's work from now until [`Meter::per_cycle`].
pub struct Meter<'a, C> {
    store: &'a Store<C>,
    server: Option<Work>,
    own: f64,
}

impl<'a, C> Meter<'a, C> {
    pub fn start(store: &'a Store<C>) -> Meter<'a, C> {
        Meter {
            store,
            server: (store.server_work)(),
            own: own_cpu(),
        }
    }

    /// Client and server CPU microseconds and server watch events a cycle
    /// since the start (`null` where the store does not say).
    pub fn per_cycle(&self, cycles: usize) -> Vec<(&'static str, V)> {
        let n = cycles.max(1) as f64;
        let client = V::N(((own_cpu() - self.own) * 1e6 / n).round());
        let (server, events) = match ((self.store.server_work)(), self.server) {
            (Some(now), Some(then)) => (
                V::N(((now.cpu_seconds - then.cpu_seconds) * 1e6 / n).round()),
                match (now.events, then.events) {
                    (Some(now), Some(then)) => V::N(((now - then) / n * 10.0).round() / 10.0),
                    _ => V::Null,
                },
            ),
            _ => (V::Null, V::Null),
        };
        vec![
            ("client_cpu_us_per_cycle", client),
            ("server_cpu_us_per_cycle", server),
            ("server_watch_events_per_cycle", events),
        ]
    }
}

/// The server's requests since `served` per cycle of `cycles`, where the
/// store counts them (heartbeats and keep-alives included: a little above
/// the true count).
pub fn requests_per_cycle<C>(store: &Store<C>, served: Option<u64>, cycles: usize) -> V {
    match ((store.requests)(), served) {
        (Some(after), Some(before)) => V::N(after.saturating_sub(before) as f64 / cycles as f64),
        _ => V::Null,
    }
}

/// M1: `lock` then `release` of a free lock, one client.
/// `cycle` run for `seconds`: each run's time, and how long they all took.
pub fn timed(seconds: Duration, mut cycle: impl FnMut()) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < seconds {
        let t = Instant::now();
        cycle();
        samples.push(t.elapsed());
    }
    (samples, started.elapsed())
}

/// `clients` handing the mutex `name` on among them until `stop_at`, one
/// thread each: M2's loop.
pub fn hand_on<C: Client>(clients: &[C], name: &str, handoffs: &Handoffs, stop_at: Instant) {
    std::thread::scope(|s| {
        for c in clients {
            let mutex = c.mutex(name).unwrap();
            s.spawn(move || {
                while Instant::now() < stop_at {
                    let g = mutex.lock().unwrap();
                    handoffs.acquired(g.token().get());
                    handoffs.releasing();
                    g.release().unwrap();
                }
            });
        }
    });
}

/// M1's two loops for `seconds` each, unmeasured, before any measure of
/// a store: so that no loop measured runs on a cold server. ZooKeeper's
/// JVM compiles its request path during the first seconds of load (its
/// compiler thread took 286 ms of CPU in M1's first 3 s, ours, and 6 ms
/// in the raw's after them), and whichever loop ran first paid for it in
/// its tail (p99 twice the other's).
pub fn warm_up<C: Client>(store: &Store<C>, seconds: Duration) {
    let client = (store.connect)(Duration::from_secs(10));
    let mutex = client.mutex(&store.lock_name("warm-up")).unwrap();
    timed(seconds, || mutex.lock().unwrap().release().unwrap());
    let _ = client.close();
    if let Some(raw) = &store.raw {
        raw(seconds, 0);
    }
}

pub fn m1<C: Client>(store: &Store<C>, sizes: &Sizes) {
    let client = (store.connect)(Duration::from_secs(10));
    let mutex = client.mutex(&store.lock_name("m1")).unwrap();
    let (meter, served) = (Meter::start(store), (store.requests)());
    let (mut samples, elapsed) = timed(sizes.seconds, || {
        mutex.lock().unwrap().release().unwrap();
    });
    let per_cycle = requests_per_cycle(store, served, samples.len());
    let mut figures = rate_and_latency(&mut samples, elapsed);
    figures.push(("server_requests_per_cycle", per_cycle));
    figures.extend(meter.per_cycle(samples.len()));
    figures.push(("bridge_call_p50_us", V::N(bridge_call_p50_us())));
    line(
        "M1",
        store.name,
        figures,
        raw_figures(store, sizes.seconds),
        0,
    );
    let _ = client.close();
}

/// The median round trip of an empty blocking call on an idle client
/// runtime (the caller's thread to the runtime thread and back): what the
/// blocking bridge adds to each call, twice per M1 cycle, beyond the
/// requests themselves.
fn bridge_call_p50_us() -> f64 {
    let runtime = recipes_core::store::Runtime::new("recipes-bench").unwrap();
    let mut samples: Vec<Duration> = (0..2000)
        .map(|_| {
            let t = Instant::now();
            runtime
                .call("empty", Duration::from_secs(5), async { Ok(()) })
                .unwrap();
            t.elapsed()
        })
        .collect();
    runtime.shutdown(Duration::ZERO);
    percentile_us(&mut samples, 50.0)
}

/// M2: `n` clients handing one lock on; acquisitions/s, the handoff (a
/// release to the next acquisition) p50/p99, overlaps and fence
/// inversions (violations).
pub fn m2<C: Client>(store: &Store<C>, sizes: &Sizes) {
    let name = store.lock_name("m2");
    for &n in sizes.contenders {
        let handoffs = Handoffs::default();
        let stop_at = Instant::now() + sizes.seconds;
        let clients: Vec<C> = (0..n)
            .map(|_| (store.connect)(Duration::from_secs(10)))
            .collect();
        let started = Instant::now();
        let (meter, served) = (Meter::start(store), (store.requests)());
        hand_on(&clients, &name, &handoffs, stop_at);
        let elapsed = started.elapsed();
        let mut figures = vec![("processes", V::N(n as f64))];
        figures.extend(handoffs.figures(elapsed));
        figures.extend(meter.per_cycle(handoffs.count()));
        let requests = requests_per_cycle(store, served, handoffs.count());
        figures.push(("requests_per_cycle", requests));
        let mut violations = handoffs.violations();
        let raw = match &store.raw_handoff {
            Some(raw) => {
                let (meter, served) = (Meter::start(store), (store.requests)());
                let (raw, elapsed) = raw(n, sizes.seconds);
                violations += raw.violations();
                let mut figures = raw.figures(elapsed);
                figures.extend(meter.per_cycle(raw.count()));
                let requests = requests_per_cycle(store, served, raw.count());
                figures.push(("requests_per_cycle", requests));
                Some(figures)
            }
            None => raw_figures(store, sizes.seconds),
        };
        line("M2", store.name, figures, raw, violations);
        for c in clients {
            let _ = c.close();
        }
    }
}

/// M3: failover — the time from a leader's resignation, and from its
/// crash, to the next leader's `campaign` returning.
pub fn m3<C: Client>(store: &Store<C>, sizes: &Sizes) {
    let ttl = Duration::from_secs(2);
    for crash in [false, true] {
        let mut took = Vec::new();
        let mut violations = 0;
        for round in 0..sizes.rounds {
            let name = store.lock_name(&format!("m3-{crash}-{round}"));
            let (a, b) = ((store.connect)(ttl), (store.connect)(ttl));
            let leading = a.election(&name).unwrap().campaign(b"a").unwrap();
            let fence_a = leading.token();
            let next = std::thread::scope(|s| {
                let waiting = s.spawn(|| {
                    let l = b.election(&name).unwrap().campaign(b"b").unwrap();
                    (Instant::now(), l)
                });
                wait_until("b is queued behind a", Duration::from_secs(60), || {
                    a.contenders(&name).unwrap().len() >= 2
                });
                let ended = Instant::now();
                if crash {
                    (store.kill)(&a);
                    std::mem::forget(leading);
                } else {
                    leading.resign().unwrap();
                }
                let (at, l) = waiting.join().unwrap();
                (at.saturating_duration_since(ended), l)
            });
            if next.1.token() <= fence_a {
                violations += 1;
            }
            took.push(next.0);
            drop(next.1);
            let _ = b.close();
            let _ = a.close_within(Duration::from_millis(100));
        }
        let how = if crash { store.kill_is } else { "resign" };
        let raw = store.raw_failover.as_ref().map(|raw| {
            let mut took: Vec<_> = (0..sizes.rounds).map(|_| raw(crash)).collect();
            vec![
                ("median_us", V::N(percentile_us(&mut took, 50.0))),
                ("max_us", V::N(percentile_us(&mut took, 100.0))),
            ]
        });
        let figures = vec![
            ("after", V::S(how.into())),
            ("ttl_ms", V::N(ttl.as_millis() as f64)),
            ("median_us", V::N(percentile_us(&mut took, 50.0))),
            ("max_us", V::N(percentile_us(&mut took, 100.0))),
        ];
        line("M3", store.name, figures, raw, violations);
    }
}
