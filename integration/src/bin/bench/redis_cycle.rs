//! **M1c** (Redis): the uncontended `lock` + `release` cycle against the
//! raw loop (`SET NX PX`, `INCR` of a fence, a compare-and-delete
//! script), interleaved round by round on one server, each counted by the
//! server: `commands_per_cycle` from `INFO stats`'
//! `total_commands_processed` (every command, those a script runs
//! included), `requests_per_cycle` from `total_reads_processed` (what a
//! client sent: one read a request for a client that waits for each
//! reply) and `scripts_per_cycle` from `INFO commandstats`' `evalsha`, `fcall` and
//! `eval` calls. Each round prints both loops' rates and their ratio; the
//! keep-alive and the held-entry poll of our client run meanwhile, and
//! are counted with it.

use std::time::{Duration, Instant};

use integration::RedisServer;
use recipes_core::Client;

use crate::out::{line, V};

/// The server's counters: commands, reads, script calls.
fn counters(server: &RedisServer) -> [u64; 3] {
    let stats: String = server.cmd(&["INFO", "stats"]);
    let stat = |name: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let commandstats: String = server.cmd(&["INFO", "commandstats"]);
    let scripts = ["evalsha", "fcall", "eval"]
        .iter()
        .filter_map(|c| {
            commandstats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{c}:calls=")))
                .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
        })
        .sum();
    [
        stat("total_commands_processed"),
        stat("total_reads_processed"),
        scripts,
    ]
}

/// Figures of `cycles` over `elapsed`, the counters' deltas per cycle (the
/// two `INFO`s that read them taken off).
fn figures(
    cycles: usize,
    elapsed: Duration,
    before: [u64; 3],
    after: [u64; 3],
) -> Vec<(&'static str, V)> {
    let per = |i: usize, own: u64| {
        V::N(after[i].saturating_sub(before[i]).saturating_sub(own) as f64 / cycles.max(1) as f64)
    };
    vec![
        ("ops_per_sec", V::N(cycles as f64 / elapsed.as_secs_f64())),
        ("commands_per_cycle", per(0, 2)),
        ("requests_per_cycle", per(1, 2)),
        ("scripts_per_cycle", per(2, 0)),
    ]
}

/// `rounds` rounds of `seconds` each: ours, then the raw loop.
pub fn m1c(server: &RedisServer, url: &str, seconds: Duration, rounds: usize) {
    let client = recipes_redis::RedisClient::builder(url)
        .ttl(Duration::from_secs(10))
        .connect()
        .unwrap();
    let mutex = client.mutex("/bench/redis/m1c").unwrap();
    for round in 0..rounds {
        let before = counters(server);
        let started = Instant::now();
        let mut cycles = 0;
        while started.elapsed() < seconds {
            mutex.lock().unwrap().release().unwrap();
            cycles += 1;
        }
        let ours = figures(cycles, started.elapsed(), before, counters(server));
        let before = counters(server);
        let (samples, elapsed) = crate::raw::redis(url, seconds, 1);
        let raw = figures(samples.len(), elapsed, before, counters(server));
        let ratio = match (&ours[0].1, &raw[0].1) {
            (V::N(a), V::N(b)) => V::N((a / b * 100.0).round() / 100.0),
            _ => V::Null,
        };
        let mut shown = vec![("round", V::N(round as f64))];
        shown.extend(ours);
        shown.push(("ratio_to_raw", ratio));
        line("M1c", "redis", shown, Some(raw), 0);
        let before = counters(server);
        if let Some((cycles, elapsed)) = redis_py(url, seconds) {
            let mut py = vec![("round", V::N(round as f64))];
            py.extend(figures(cycles, elapsed, before, counters(server)));
            line("M1c", "redis-py Lock", py, None, 0);
        }
    }
    let _ = client.close();
}

/// redis-py's `Lock` for `seconds`, in Python (`redis_py_lock.py`):
/// cycles and elapsed; `None` when Python or redis-py is missing.
fn redis_py(url: &str, seconds: Duration) -> Option<(usize, Duration)> {
    // Debian's Python, where `python3-redis` installs redis-py, else the
    // one on the `PATH`.
    let python = ["/usr/bin/python3", "python3"].into_iter().find(|p| {
        std::process::Command::new(p)
            .args(["-c", "import redis"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })?;
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(include_str!("redis_py_lock.py"))
        .arg(url)
        .arg(seconds.as_secs_f64().to_string())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let mut fields = text.split_whitespace();
    let cycles = fields.next()?.parse().ok()?;
    let elapsed = fields.next()?.parse().ok()?;
    Some((cycles, Duration::from_secs_f64(elapsed)))
}
