//! **M1z** and **M2z** (ZooKeeper; run with M1 and M2 too): kazoo 2.8's
//! `Lock` (Debian's `/usr/bin/python3` with `python3-kazoo`) and Apache
//! Curator 5.4's `InterProcessMutex` (Debian's jars, in a JVM with its
//! full compiler) beside our mutex, on the bench's one ZooKeeper server.
//! Each peer is a process of its own, kept for the whole run
//! (`integration/peers/zk_bench.py`, `integration/peers/CuratorBench.java`)
//! and asked over the worker line protocol to loop `acquire` + `release`
//! for a time; it answers with four monotonic clock readings a cycle.
//!
//! - M1z: at most 3 rounds, each ours (`lock` + `release`), the raw loop
//!   (`raw::zk`: create, list, delete), kazoo's and Curator's for the same
//!   time, which runs first rotating round by round: rate, p50, p99, the
//!   server's requests a cycle (`mntr`'s packets received), the client's
//!   CPU a cycle (the peer's process; ours and the raw's: the bench's) and
//!   the server's. Ours' line carries the raw's figures and its ratios to
//!   the raw and to each peer; a peer's line its ratio to the raw.
//! - M2z: 2 and 4 contenders on one name — ours as M2 (a client and
//!   session each, threads of the bench), a peer as that many of its
//!   processes: acquisitions a second, the handoff p50/p99 (a release's
//!   call to the next acquisition's return; the peer processes' cycles
//!   merged by time) and the same per acquisition; a peer's overlaps (the
//!   next acquired before the holder called release) are violations.
//!
//! Every peer process is started and warmed up (each on a name of its own,
//! for one measurement's time) before the first measurement. A peer that
//! cannot run (no `python3-kazoo`; no `java`, `javac` or Curator's jars)
//! prints one line with `skipped` and why, and the rest runs without it.

use std::panic::AssertUnwindSafe;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration::peers::{curator_classpath, peers_source_dir, KAZOO_PYTHON};
use integration::test_dir::TestDir;
use integration::worker::Worker;
use integration::ZkServer;
use recipes_core::Client;
use recipes_zk::ZkClient;

use crate::handoff::Handoffs;
use crate::measures::{hand_on, process_cpu, timed, Sizes};
use crate::out::{figure, line, percentile_us, rate_and_latency, ratio, Figures, V};

/// One cycle as a peer clocks it (nanoseconds): the acquire's call and
/// return, the release's call and return.
type Cycle = [u64; 4];

/// A peer measurement: its figures and overlaps, or why it failed; `None`
/// when the peer has no processes (skipped or failed before).
type Measured = Option<Result<(Figures, u64), String>>;

/// A peer library and its processes, or why it has none.
struct Peer {
    backend: &'static str,
    /// A word for its lock names.
    short: &'static str,
    /// The key of ours' ratio to it.
    ratio_key: &'static str,
    workers: Result<Vec<Worker>, String>,
}

/// The server's packets received so far (`mntr`).
pub fn packets(server: &ZkServer) -> Option<u64> {
    let mntr = server.four_letter("mntr");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_packets_received"))
        .and_then(|v| v.trim().parse().ok())
}

/// `f`, its panic (a peer that did not start or answer: the worker's
/// message, whose full text the panic hook printed) as the error.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|e| {
        let text = e
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| e.downcast_ref::<&str>().copied())
            .unwrap_or("panicked");
        text.lines().next().unwrap_or_default().to_owned()
    })
}

/// Whether `cmd` runs and succeeds (its output dropped).
fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `n` kazoo processes, or why there are none.
fn kazoo(hosts: &str, dir: &TestDir, n: usize) -> Result<Vec<Worker>, String> {
    if !succeeds(Command::new(KAZOO_PYTHON).args(["-c", "import kazoo"])) {
        return Err(format!(
            "{KAZOO_PYTHON} cannot import kazoo (python3-kazoo)"
        ));
    }
    guarded(|| {
        (0..n)
            .map(|i| {
                let mut cmd = Command::new(KAZOO_PYTHON);
                cmd.arg("-u")
                    .arg(peers_source_dir().join("zk_bench.py"))
                    .arg(hosts)
                    .env("PYTHONDONTWRITEBYTECODE", "1");
                let log = dir.path().join(format!("kazoo-{i}.log"));
                Worker::spawn(&format!("kazoo-bench-{i}"), cmd, log)
            })
            .collect()
    })
}

/// `n` Curator JVMs, or why there are none.
fn curator(hosts: &str, dir: &TestDir, n: usize) -> Result<Vec<Worker>, String> {
    if !succeeds(Command::new("java").arg("-version")) {
        return Err("no java (Debian's openjdk-17-jdk)".into());
    }
    guarded(|| {
        let classpath = curator_classpath(dir, "CuratorBench");
        (0..n)
            .map(|i| {
                let mut cmd = Command::new("java");
                cmd.args(["-XX:+UseSerialGC", "-cp"])
                    .arg(&classpath)
                    .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
                    .arg("CuratorBench")
                    .arg(hosts);
                let log = dir.path().join(format!("curator-{i}.log"));
                Worker::spawn(&format!("curator-bench-{i}"), cmd, log)
            })
            .collect()
    })
}

/// Each of `workers` looping on its path of `paths` at once for
/// `seconds`: the cycles of each.
fn loops(
    workers: &mut [Worker],
    paths: &[String],
    seconds: Duration,
) -> Result<Vec<Vec<Cycle>>, String> {
    let secs = seconds.as_secs_f64();
    let replies = guarded(|| {
        for (w, path) in workers.iter_mut().zip(paths) {
            w.send(&format!("run {path} {secs}"));
        }
        let most = seconds + Duration::from_secs(60);
        workers
            .iter_mut()
            .map(|w| w.reply(most))
            .collect::<Vec<_>>()
    })?;
    replies.into_iter().map(|r| cycles(&r?)).collect()
}

/// A `run`'s reply: four numbers a cycle.
fn cycles(reply: &str) -> Result<Vec<Cycle>, String> {
    let numbers: Vec<u64> = reply
        .split_whitespace()
        .map(|f| f.parse().map_err(|e| format!("{f:?}: {e}")))
        .collect::<Result<_, _>>()?;
    if numbers.is_empty() || !numbers.len().is_multiple_of(4) {
        return Err(format!("{} numbers, not four a cycle", numbers.len()));
    }
    Ok(numbers
        .chunks_exact(4)
        .map(|c| [c[0], c[1], c[2], c[3]])
        .collect())
}

/// The time between two clock readings.
fn between(from: u64, to: u64) -> Duration {
    Duration::from_nanos(to.saturating_sub(from))
}

/// One process's uncontended cycles: rate, p50, p99.
fn cycle_figures(cycles: &[Cycle]) -> Figures {
    let mut samples: Vec<Duration> = cycles.iter().map(|c| between(c[0], c[3])).collect();
    let elapsed = between(cycles[0][0], cycles[cycles.len() - 1][3]);
    rate_and_latency(&mut samples, elapsed)
}

/// Several processes' cycles on one name, merged by the acquisitions'
/// times: acquisitions a second, handoff p50 and p99 (as [`Handoffs`]),
/// and the overlaps.
fn handoff_figures(processes: Vec<Vec<Cycle>>) -> (Figures, u64) {
    let mut all: Vec<Cycle> = processes.into_iter().flatten().collect();
    all.sort_unstable_by_key(|c| c[1]);
    let mut overlaps = 0;
    let mut samples: Vec<Duration> = all
        .windows(2)
        .map(|w| {
            let (held, next) = (w[0], w[1]);
            // Taken before the holder began to give it back: two holders.
            overlaps += u64::from(next[1] < held[2]);
            between(held[2], next[1])
        })
        .collect();
    let start = all.iter().map(|c| c[0]).min().unwrap_or(0);
    let end = all.iter().map(|c| c[3]).max().unwrap_or(0);
    let rate = all.len() as f64 / between(start, end).as_secs_f64();
    let figures = vec![
        ("acquisitions_per_sec", V::N(rate)),
        ("handoff_p50_us", V::N(percentile_us(&mut samples, 50.0))),
        ("handoff_p99_us", V::N(percentile_us(&mut samples, 99.0))),
    ];
    (figures, overlaps)
}

/// The server's packets and CPU and the clients' CPU from now on.
struct Meter {
    packets: Option<u64>,
    server: f64,
    clients: f64,
    pids: Vec<String>,
}

impl Meter {
    /// From now, for the client processes `pids` (`self`: the bench).
    fn start(server: &ZkServer, pids: Vec<String>) -> Meter {
        Meter {
            packets: packets(server),
            server: server_cpu(server),
            clients: pids.iter().map(|p| process_cpu(p)).sum(),
            pids,
        }
    }

    /// Requests and CPU microseconds a cycle of `cycles` since the start.
    fn per_cycle(&self, server: &ZkServer, cycles: usize) -> Figures {
        let n = cycles.max(1) as f64;
        let clients: f64 = self.pids.iter().map(|p| process_cpu(p)).sum();
        let requests = match (packets(server), self.packets) {
            (Some(now), Some(then)) => V::N(((now - then) as f64 / n * 10.0).round() / 10.0),
            _ => V::Null,
        };
        vec![
            ("server_requests_per_cycle", requests),
            (
                "client_cpu_us_per_cycle",
                V::N(((clients - self.clients) * 1e6 / n).round()),
            ),
            (
                "server_cpu_us_per_cycle",
                V::N(((server_cpu(server) - self.server) * 1e6 / n).round()),
            ),
        ]
    }
}

fn server_cpu(server: &ZkServer) -> f64 {
    server
        .pid()
        .map_or(0.0, |pid| process_cpu(&pid.to_string()))
}

impl Peer {
    /// `n` of its processes looping on `path` at once for `seconds`,
    /// metered (one: the uncontended figures; more: the handoff's).
    fn measure(&mut self, server: &ZkServer, n: usize, path: &str, seconds: Duration) -> Measured {
        let workers = self.workers.as_mut().ok()?;
        let pids = workers[..n].iter().map(|w| w.pid().to_string()).collect();
        let meter = Meter::start(server, pids);
        let paths = vec![path.to_owned(); n];
        let processes = match loops(&mut workers[..n], &paths, seconds) {
            Ok(processes) => processes,
            Err(why) => {
                // Its processes may be in any state: none runs again.
                self.workers = Err(why.clone());
                return Some(Err(why));
            }
        };
        let count: usize = processes.iter().map(Vec::len).sum();
        let (mut figures, overlaps) = match n {
            1 => (cycle_figures(&processes[0]), 0),
            _ => handoff_figures(processes),
        };
        figures.extend(meter.per_cycle(server, count));
        Some(Ok((figures, overlaps)))
    }

    /// Its line of a measurement: `head`, then its figures and, given the
    /// raw's rate (M1z), its ratio to it; or why it failed; no line when
    /// it has no processes.
    fn line(&self, metric: &str, head: (&'static str, V), measured: Measured, raw: Option<f64>) {
        let Some(measured) = measured else { return };
        let mut shown = vec![head];
        let overlaps = match measured {
            Ok((figures, overlaps)) => {
                let rate = figure(&figures, "ops_per_sec");
                shown.extend(figures);
                if raw.is_some() {
                    shown.push(("ratio_to_raw", ratio(rate, raw)));
                }
                overlaps
            }
            Err(why) => {
                shown.push(("failed", V::S(why)));
                0
            }
        };
        line(metric, self.backend, shown, None, overlaps);
    }
}

/// The rate named `key` of a peer's measurement, if it has one.
fn peer_rate(measured: &Measured, key: &str) -> Option<f64> {
    figure(&measured.as_ref()?.as_ref().ok()?.0, key)
}

fn connect(hosts: &str) -> ZkClient {
    ZkClient::builder(hosts)
        .ttl(Duration::from_secs(10))
        .connect()
        .unwrap()
}

/// M1z and M2z where `wanted` says so (`M1`/`M1z`, `M2`/`M2z`).
pub fn run(server: &ZkServer, sizes: &Sizes, wanted: fn(&str) -> bool) {
    let (m1, m2) = (wanted("M1") || wanted("M1z"), wanted("M2") || wanted("M2z"));
    let contenders: Vec<usize> = match m2 {
        true => sizes
            .contenders
            .iter()
            .copied()
            .filter(|&n| n <= 4)
            .collect(),
        false => Vec::new(),
    };
    if !m1 && contenders.is_empty() {
        return;
    }
    let most = contenders.iter().copied().max().unwrap_or(1);
    let (hosts, dir) = (server.connect_string(), TestDir::new("zk-bench-peers"));
    let mut peers = [
        Peer {
            backend: "kazoo Lock",
            short: "kazoo",
            ratio_key: "ratio_to_kazoo",
            workers: kazoo(&hosts, &dir, most),
        },
        Peer {
            backend: "Curator InterProcessMutex",
            short: "curator",
            ratio_key: "ratio_to_curator",
            workers: curator(&hosts, &dir, most),
        },
    ];
    let metric = if m1 { "M1z" } else { "M2z" };
    for peer in &mut peers {
        // Warm up: each process on its own name, at once (the JVM's
        // compiler, kazoo's first `ensure_path`), unmeasured.
        if let Ok(workers) = &mut peer.workers {
            let paths: Vec<String> = (0..workers.len())
                .map(|i| format!("/bench/{}/warm-{i}", peer.short))
                .collect();
            if let Err(why) = loops(workers, &paths, sizes.seconds) {
                peer.workers = Err(format!("warming up: {why}"));
            }
        }
        if let Err(why) = &peer.workers {
            line(
                metric,
                peer.backend,
                vec![("skipped", V::S(why.clone()))],
                None,
                0,
            );
        }
    }
    if m1 {
        m1z(server, &mut peers, sizes);
    }
    for (i, &n) in contenders.iter().enumerate() {
        m2z(server, &mut peers, (i, n), sizes.seconds);
    }
    for workers in peers.iter_mut().filter_map(|p| p.workers.as_mut().ok()) {
        for w in workers {
            let _ = guarded(|| w.request("exit", Duration::from_secs(10)));
        }
    }
}

/// Uncontended: ours, the raw, kazoo's and Curator's, rounds interleaved.
fn m1z(server: &ZkServer, peers: &mut [Peer; 2], sizes: &Sizes) {
    let hosts = server.connect_string();
    let client = connect(&hosts);
    let mutex = client.mutex("/bench/zk/m1z").unwrap();
    let seconds = sizes.seconds;
    for round in 0..sizes.rounds.min(3) {
        let (mut ours, mut raw) = (Figures::new(), Figures::new());
        let mut theirs: [Measured; 2] = [None, None];
        // Each round starts with the next of the four.
        for step in 0..4 {
            match (round + step) % 4 {
                k @ (0 | 1) => {
                    let meter = Meter::start(server, vec!["self".into()]);
                    let (mut samples, elapsed) = match k {
                        0 => timed(seconds, || mutex.lock().unwrap().release().unwrap()),
                        _ => crate::raw::zk(&hosts, seconds, 0),
                    };
                    let mut figures = rate_and_latency(&mut samples, elapsed);
                    figures.extend(meter.per_cycle(server, samples.len()));
                    *if k == 0 { &mut ours } else { &mut raw } = figures;
                }
                k => {
                    let path = format!("/bench/{}/m1z", peers[k - 2].short);
                    theirs[k - 2] = peers[k - 2].measure(server, 1, &path, seconds);
                }
            }
        }
        let key = "ops_per_sec";
        let (ours_rate, raw_rate) = (figure(&ours, key), figure(&raw, key));
        let mut shown = vec![("round", V::N(round as f64))];
        shown.extend(ours);
        shown.push(("ratio_to_raw", ratio(ours_rate, raw_rate)));
        for (peer, measured) in peers.iter().zip(&theirs) {
            shown.push((peer.ratio_key, ratio(ours_rate, peer_rate(measured, key))));
        }
        line("M1z", "zk", shown, Some(raw), 0);
        for (peer, measured) in peers.iter().zip(theirs) {
            let head = ("round", V::N(round as f64));
            peer.line("M1z", head, measured, raw_rate);
        }
    }
    let _ = client.close();
}

/// `n` contenders on one name: ours, kazoo's and Curator's; the `i`-th
/// size starts with the `i`-th of the three.
fn m2z(server: &ZkServer, peers: &mut [Peer; 2], (i, n): (usize, usize), seconds: Duration) {
    let hosts = server.connect_string();
    let (mut ours, mut violations) = (Figures::new(), 0);
    let mut theirs: [Measured; 2] = [None, None];
    for step in 0..3 {
        match (i + step) % 3 {
            0 => {
                let clients: Vec<ZkClient> = (0..n).map(|_| connect(&hosts)).collect();
                let handoffs = Handoffs::default();
                let meter = Meter::start(server, vec!["self".into()]);
                let started = Instant::now();
                hand_on(&clients, "/bench/zk/m2z", &handoffs, started + seconds);
                ours = handoffs.figures(started.elapsed());
                ours.extend(meter.per_cycle(server, handoffs.count()));
                violations = handoffs.violations();
                for c in clients {
                    let _ = c.close();
                }
            }
            k => {
                let path = format!("/bench/{}/m2z", peers[k - 1].short);
                theirs[k - 1] = peers[k - 1].measure(server, n, &path, seconds);
            }
        }
    }
    let key = "acquisitions_per_sec";
    let ours_rate = figure(&ours, key);
    let mut shown = vec![("processes", V::N(n as f64))];
    shown.extend(ours);
    for (peer, measured) in peers.iter().zip(&theirs) {
        shown.push((peer.ratio_key, ratio(ours_rate, peer_rate(measured, key))));
    }
    line("M2z", "zk", shown, None, violations);
    for (peer, measured) in peers.iter().zip(theirs) {
        peer.line("M2z", ("processes", V::N(n as f64)), measured, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three processes' cycles (microseconds as nanoseconds): the third
    /// acquired before the second called release.
    #[test]
    fn merged_cycles_count_an_overlap_and_time_each_handoff() {
        let us = |c: [u64; 4]| c.map(|t| t * 1000);
        let processes = vec![
            vec![us([0, 10, 20, 22])],
            vec![us([5, 25, 35, 40])],
            vec![us([6, 30, 45, 50])],
        ];
        let (figures, overlaps) = handoff_figures(processes);
        assert_eq!(overlaps, 1);
        // Handoffs of 5 µs and 0 (the overlap), 3 acquisitions in 50 µs.
        let near = |key, want: f64| (figure(&figures, key).unwrap() - want).abs() < 1e-6 * want;
        assert!(near("handoff_p50_us", 5.0));
        assert!(near("acquisitions_per_sec", 60_000.0));
        assert!(cycles("1 2 3").is_err());
    }
}
