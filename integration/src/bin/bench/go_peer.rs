//! **M1g** and **M2g** (etcd; run with M1 and M2 too): etcd's own Go
//! `Mutex` (`go.etcd.io/etcd/clientv3/concurrency`, etcd 3.4, the program
//! `integration/peers/go_etcd_mutex`, built by `scripts/go-etcd-peer`)
//! beside our mutex and the raw minimum, on the bench's one etcd server.
//!
//! - M1g: rounds interleaved, each one ours (`lock` + `release`), the raw
//!   loop (`raw::etcd`) and Go's `Lock` + `Unlock`, each for the same
//!   time, the order rotated round by round; ours' line carries the raw's
//!   figures and both ratios.
//! - M2g: at each contender count, ours (M2's loop: a client each), the
//!   raw handoff on persistent watches (`handoff::etcd`), then Go's (a
//!   client and session each, goroutines in one process): acquisitions a
//!   second and the handoff p50/p99; Go's overlaps count as violations.
//!
//! Without the Go binary, one line says `skipped` and why; nothing else
//! of these two runs (M1 and M2 have ours beside the raw already).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use recipes_core::Client;
use recipes_etcd::EtcdClient;

use crate::handoff::Handoffs;
use crate::measures::Sizes;
use crate::out::{figure, line, rate_and_latency, ratio, Figures, V};

const GO: &str = "etcd Go Mutex";

/// Where `scripts/go-etcd-peer` puts the Go program.
fn binary() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/go-etcd-peer/go-etcd-mutex")
}

/// The Go program's whitespace-separated numbers, or why there are none.
fn go(
    endpoints: &[String],
    seconds: Duration,
    name: &str,
    mode: &[&str],
) -> Result<Vec<f64>, String> {
    let out = Command::new(binary())
        .arg(endpoints.join(","))
        .arg(seconds.as_secs_f64().to_string())
        .arg(name)
        .args(mode)
        .output()
        .map_err(|e| format!("{}: {e}", binary().display()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{}: {}", out.status, stderr.trim()));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let numbers: Vec<f64> = text
        .split_whitespace()
        .map(|f| f.parse().map_err(|e| format!("{f:?}: {e}")))
        .collect::<Result<_, _>>()?;
    // uncontended: cycles, seconds, p50, p99; contended: and overlaps.
    let fields = if mode[0] == "contended" { 5 } else { 4 };
    if numbers.len() != fields || numbers[1] <= 0.0 {
        return Err(format!("unexpected output {:?}", text.trim()));
    }
    Ok(numbers)
}

/// M1g and M2g where `wanted` says so (`M1`/`M1g`, `M2`/`M2g`).
pub fn run(endpoints: &[String], sizes: &Sizes, wanted: fn(&str) -> bool) {
    let (m1, m2) = (wanted("M1") || wanted("M1g"), wanted("M2") || wanted("M2g"));
    if !(m1 || m2) {
        return;
    }
    if !binary().exists() {
        let why = format!(
            "{} is missing: run scripts/go-etcd-peer",
            binary().display()
        );
        line("M1g", GO, vec![("skipped", V::S(why))], None, 0);
        return;
    }
    if m1 {
        m1g(endpoints, sizes);
    }
    if m2 {
        m2g(endpoints, sizes);
    }
}

fn connect(endpoints: &[String]) -> EtcdClient {
    EtcdClient::builder(endpoints.to_vec())
        .ttl(Duration::from_secs(10))
        .connect()
        .unwrap()
}

/// Uncontended, `sizes.rounds` rounds of ours, the raw loop and Go's.
fn m1g(endpoints: &[String], sizes: &Sizes) {
    let client = connect(endpoints);
    let mutex = client.mutex("/bench/etcd/m1g").unwrap();
    for round in 0..sizes.rounds {
        // Each round starts with the next of the three, so none always
        // runs first or right after another.
        let (mut ours, mut raw, mut theirs) = (Vec::new(), Vec::new(), Err(String::new()));
        for step in 0..3 {
            match (round + step) % 3 {
                0 => ours = ours_cycles(&mutex, sizes.seconds),
                1 => {
                    let (mut samples, elapsed) = crate::raw::etcd(endpoints, sizes.seconds, 0);
                    raw = rate_and_latency(&mut samples, elapsed);
                }
                _ => theirs = go(endpoints, sizes.seconds, "/bench/go/m1g", &["uncontended"]),
            }
        }
        let (ours_rate, raw_rate) = (figure(&ours, "ops_per_sec"), figure(&raw, "ops_per_sec"));
        let go_rate = theirs.as_ref().ok().map(|f| f[0] / f[1]);
        let mut shown = vec![("round", V::N(round as f64))];
        shown.extend(ours);
        shown.push(("ratio_to_raw", ratio(ours_rate, raw_rate)));
        shown.push(("ratio_to_go", ratio(ours_rate, go_rate)));
        line("M1g", "etcd", shown, Some(raw), 0);
        let mut shown = vec![("round", V::N(round as f64))];
        match theirs {
            Ok(f) => shown.extend([
                ("ops_per_sec", V::N(f[0] / f[1])),
                ("p50_us", V::N(f[2])),
                ("p99_us", V::N(f[3])),
                ("ratio_to_raw", ratio(go_rate, raw_rate)),
            ]),
            Err(why) => shown.push(("failed", V::S(why))),
        }
        line("M1g", GO, shown, None, 0);
    }
    let _ = client.close();
}

/// Our uncontended `lock` + `release` for `seconds`: rate, p50, p99.
fn ours_cycles(mutex: &recipes_etcd::Mutex, seconds: Duration) -> Figures {
    let (mut samples, elapsed) = crate::measures::timed(seconds, || {
        mutex.lock().unwrap().release().unwrap();
    });
    rate_and_latency(&mut samples, elapsed)
}

/// Contended, at each of `sizes.contenders`: ours, the raw handoff, Go's.
fn m2g(endpoints: &[String], sizes: &Sizes) {
    for &n in sizes.contenders {
        let handoffs = Handoffs::default();
        let clients: Vec<EtcdClient> = (0..n).map(|_| connect(endpoints)).collect();
        let stop_at = Instant::now() + sizes.seconds;
        let started = Instant::now();
        crate::measures::hand_on(&clients, "/bench/etcd/m2g", &handoffs, stop_at);
        let ours = handoffs.figures(started.elapsed());
        for c in clients {
            let _ = c.close();
        }
        let (raw, elapsed) = crate::handoff::etcd(endpoints, n, sizes.seconds);
        let violations = handoffs.violations() + raw.violations();
        let raw = raw.figures(elapsed);
        let count = n.to_string();
        let theirs = go(
            endpoints,
            sizes.seconds,
            "/bench/go/m2g",
            &["contended", &count],
        );
        let rate = "acquisitions_per_sec";
        let (ours_rate, raw_rate) = (figure(&ours, rate), figure(&raw, rate));
        let go_rate = theirs.as_ref().ok().map(|f| f[0] / f[1]);
        let mut shown = vec![("processes", V::N(n as f64))];
        shown.extend(ours);
        shown.push(("ratio_to_raw", ratio(ours_rate, raw_rate)));
        shown.push(("ratio_to_go", ratio(ours_rate, go_rate)));
        line("M2g", "etcd", shown, Some(raw), violations);
        let mut shown = vec![("processes", V::N(n as f64))];
        let overlaps = match theirs {
            Ok(f) => {
                shown.extend([
                    (rate, V::N(f[0] / f[1])),
                    ("handoff_p50_us", V::N(f[2])),
                    ("handoff_p99_us", V::N(f[3])),
                    ("ratio_to_raw", ratio(go_rate, raw_rate)),
                ]);
                f[4] as u64
            }
            Err(why) => {
                shown.push(("failed", V::S(why)));
                0
            }
        };
        line("M2g", GO, shown, None, overlaps);
    }
}
