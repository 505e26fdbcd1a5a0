//! **M1p** (PostgreSQL; run with M1 too): the uncontended `lock` +
//! `release` cycle of each mode beside what a user writes by hand in
//! Python with psycopg2 (`pg_py_loops.py`, run by `python3 -c`), rounds
//! interleaved on the bench's one server (fsync on):
//!
//! 1. our lease mode;
//! 2. psycopg2's fenced lease row: one statement bumps the name's fence
//!    (an upsert in a CTE) and inserts the lease row when the name is
//!    free or expired, returning the fence; then `DELETE … WHERE name =
//!    %s AND fence = %s` (two statements a cycle);
//! 3. our session mode;
//! 4. psycopg2's fenced advisory lock: `pg_advisory_lock(key)`, `UPDATE
//!    py_fences SET v = v + 1 … RETURNING v`, `pg_advisory_unlock(key)`
//!    (three statements a cycle).
//!
//! The Python loops run on one autocommit connection, parameters passed as
//! psycopg2 does by default (quoted into the text on the client, one
//! simple query a statement: parsed and planned by the server each time,
//! where ours and the raw loops use prepared statements). Each loop's line
//! has its rate, p50 and p99, the CPU a cycle of the client (ours: this
//! process; Python's: its own) and of the server (`pg_raw::server_cpu`);
//! ours also its ratio to the Python loop of its mode in the same round.
//! In a full run, the Python loops' statements a cycle as the server logs
//! them (`pg_raw::counted`; ours are M1's `statements` lines).
//!
//! Nothing is printed when neither Debian's `/usr/bin/python3` nor the
//! `python3` on the `PATH` imports `psycopg2` (`scripts/setup` installs
//! `python3-psycopg2`).

use std::process::{Command, Stdio};
use std::time::Duration;

use integration::PgServer;
use recipes_core::Client;
use recipes_pg::{PgClient, PgMode};

use crate::measures::own_cpu;
use crate::out::{line, rate_and_latency, Figures, V};

/// A Python that imports psycopg2: Debian's, where `python3-psycopg2`
/// installs it, or the one on the `PATH`.
fn python() -> Option<&'static str> {
    ["/usr/bin/python3", "python3"].into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import psycopg2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// CPU microseconds a cycle, rounded.
fn per_cycle_us(seconds: f64, cycles: usize) -> V {
    V::N((seconds * 1e6 / cycles.max(1) as f64).round())
}

/// The server's CPU seconds so far (0 where `/proc` does not say).
fn server_cpu(server: &PgServer) -> f64 {
    crate::pg_raw::server_cpu(server).map_or(0.0, |w| w.cpu_seconds)
}

/// Our cycle for `seconds`: rate, p50, p99, client and server CPU.
fn ours(server: &PgServer, client: &PgClient, name: &str, seconds: Duration) -> Figures {
    let mutex = client.mutex(name).unwrap();
    let (cpu, served) = (own_cpu(), server_cpu(server));
    let (mut samples, elapsed) = crate::measures::timed(seconds, || {
        mutex.lock().unwrap().release().unwrap();
    });
    let (cpu, served) = (own_cpu() - cpu, server_cpu(server) - served);
    let mut figures = rate_and_latency(&mut samples, elapsed);
    figures.push(("client_cpu_us_per_cycle", per_cycle_us(cpu, samples.len())));
    figures.push((
        "server_cpu_us_per_cycle",
        per_cycle_us(served, samples.len()),
    ));
    figures
}

/// A Python loop (`lease` or `advisory`) for `seconds`: its cycles and
/// figures, as [`ours`]; `None` when it did not run.
fn py(python: &str, server: &PgServer, loop_: &str, seconds: Duration) -> Option<(usize, Figures)> {
    let served = server_cpu(server);
    let out = Command::new(python)
        .arg("-c")
        .arg(include_str!("pg_py_loops.py"))
        .args([
            server.url(),
            loop_.into(),
            seconds.as_secs_f64().to_string(),
        ])
        .stderr(Stdio::inherit())
        .output()
        .ok()?;
    let served = server_cpu(server) - served;
    let text = String::from_utf8(out.stdout).ok()?;
    let fields: Vec<f64> = text
        .split_whitespace()
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let &[cycles, elapsed, p50, p99, cpu] = fields.as_slice() else {
        return None;
    };
    let cycles = cycles as usize;
    Some((
        cycles,
        vec![
            ("ops_per_sec", V::N(cycles as f64 / elapsed)),
            ("p50_us", V::N(p50)),
            ("p99_us", V::N(p99)),
            ("client_cpu_us_per_cycle", per_cycle_us(cpu, cycles)),
            // The server's CPU while the script ran, its connect and
            // table checks included.
            ("server_cpu_us_per_cycle", per_cycle_us(served, cycles)),
        ],
    ))
}

/// `rounds` rounds of `seconds` each loop (see the module's notes).
pub fn m1p(server: &PgServer, seconds: Duration, rounds: usize) {
    let Some(python) = python() else { return };
    let connect = |mode| {
        PgClient::builder(server.url())
            .mode(mode)
            .ttl(Duration::from_secs(10))
            .connect()
            .unwrap()
    };
    let (lease, session) = (connect(PgMode::Lease), connect(PgMode::Session));
    let loops = [
        ("pg-lease", &lease, "psycopg2 fenced lease row", "lease"),
        (
            "pg-session",
            &session,
            "psycopg2 fenced advisory lock",
            "advisory",
        ),
    ];
    for round in 0..rounds {
        for (backend, client, py_backend, loop_) in loops {
            let name = format!("/bench/{backend}/m1p");
            let mine = ours(server, client, &name, seconds);
            let Some((_, theirs)) = py(python, server, loop_, seconds) else {
                continue;
            };
            let ratio = match (&mine[0].1, &theirs[0].1) {
                (V::N(a), V::N(b)) => V::R(a / b),
                _ => V::Null,
            };
            let mut shown = vec![("round", V::N(round as f64))];
            shown.extend(mine);
            shown.push(("ratio_to_py", ratio));
            line("M1p", backend, shown, None, 0);
            let mut shown = vec![("round", V::N(round as f64))];
            shown.extend(theirs);
            line("M1p", py_backend, shown, None, 0);
        }
    }
    let _ = (lease.close(), session.close());
    // The Python loops' statements as the server logs them (a full run
    // only: turning the log on and off takes a while).
    if rounds > 1 {
        for (py_backend, loop_) in [
            ("psycopg2 fenced lease row", "lease"),
            ("psycopg2 fenced advisory lock", "advisory"),
        ] {
            let (statements, cycles) = crate::pg_raw::counted(server, &mut || {
                py(python, server, loop_, Duration::from_secs(1)).map_or(0, |(n, _)| n)
            });
            let figures = vec![
                ("what", V::S("statements".into())),
                ("cycles", V::N(cycles as f64)),
                (
                    "statements_per_cycle",
                    V::N(statements as f64 / cycles.max(1) as f64),
                ),
            ];
            line("M1p", py_backend, figures, None, 0);
        }
    }
}
