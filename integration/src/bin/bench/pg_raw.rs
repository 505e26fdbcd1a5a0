//! PostgreSQL's extra figures (issue 25):
//!
//! - **statements per cycle** (`M1`'s `statements` line): the server's
//!   own count, from `log_statement = 'all'` turned on for the count only
//!   (every statement a line of `server.log`: simple queries and
//!   executions of the extended protocol alike), of ours and of the raw
//!   loop ([`crate::raw::pg_lease`], [`crate::raw::pg_session`]) in the
//!   same run, for each mode.
//! - **the raw handoff** ([`handoff`]): contenders on raw connections
//!   hand one lease row on by `NOTIFY`: the release is an update that
//!   notifies in the same statement, the next contender hears it on its
//!   `LISTEN` and takes the row with the raw loop's statement. With the
//!   plain `NOTIFY` round trip (one connection notifies, another hears)
//!   beside it: what M2's handoff is held against.

use std::time::{Duration, Instant};

use integration::{wait_until, PgServer};
use recipes_core::Client;
use recipes_pg::tokio_postgres::{AsyncMessage, Client as Raw, NoTls};
use tokio::sync::mpsc;

use crate::handoff::Handoffs;
use crate::out::{line, percentile_us, V};

/// Statements the server logged from here on: where the log ends now.
fn log_end(server: &PgServer) -> u64 {
    std::fs::metadata(server.dir().join("server.log")).map_or(0, |m| m.len())
}

/// How many statements the server logged after `from` (see [`log_end`]).
fn logged_since(server: &PgServer, from: u64) -> u64 {
    let log = std::fs::read(server.dir().join("server.log")).unwrap_or_default();
    let tail = String::from_utf8_lossy(&log[(from as usize).min(log.len())..]).into_owned();
    if std::env::var_os("BENCH_SHOW_STATEMENTS").is_some() {
        eprintln!("{tail}");
    }
    tail.lines()
        .filter(|l| l.contains("LOG:  statement: ") || l.contains("LOG:  execute "))
        .count() as u64
}

fn log_statements(server: &PgServer, on: bool) {
    let setting = if on { "all" } else { "none" };
    server.sql(&format!("ALTER SYSTEM SET log_statement = '{setting}'"));
    server.sql("SELECT pg_reload_conf()");
    // A new backend reads the file as it starts: wait until one sees it.
    wait_until("log_statement is in force", Duration::from_secs(10), || {
        server.sql("SHOW log_statement").trim() == setting
    });
}

/// The statements the server logged while `run` ran (`log_statement`
/// on for it alone), and what `run` returned (its cycles): M6's readers
/// count theirs and the raw clients' so.
pub fn counted(server: &PgServer, run: &mut dyn FnMut() -> usize) -> (u64, usize) {
    log_statements(server, true);
    let from = log_end(server);
    let wal = server.sql("SELECT pg_current_wal_lsn()");
    let cycles = run();
    // The log is written as each statement starts: wait for the last.
    std::thread::sleep(Duration::from_millis(200));
    let statements = logged_since(server, from);
    log_statements(server, false);
    if std::env::var_os("BENCH_SHOW_STATEMENTS").is_some() {
        let sql = format!(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{}')",
            wal.trim()
        );
        let bytes: f64 = server.sql(&sql).trim().parse().unwrap_or(0.0);
        eprintln!(
            "bench: {cycles} cycles wrote {:.0} WAL bytes a cycle",
            bytes / cycles.max(1) as f64
        );
    }
    (statements, cycles)
}

/// `M1`'s statements per uncontended cycle, ours (`cycles` of them, on a
/// client that already took and released the lock once) and the raw
/// loop's (for `raw_for`, its connect and table creation included).
pub fn statements(
    server: &PgServer,
    (backend, client): (&'static str, &recipes_pg::PgClient),
    cycles: usize,
    raw: &dyn Fn(Duration, usize) -> crate::raw::Samples,
    raw_for: Duration,
) {
    let mutex = client
        .mutex(&format!("/bench/{backend}/m1-statements"))
        .unwrap();
    mutex.lock().unwrap().release().unwrap();
    let (ours, _) = counted(server, &mut || {
        for _ in 0..cycles {
            mutex.lock().unwrap().release().unwrap();
        }
        cycles
    });
    let (raws, raw_cycles) = counted(server, &mut || raw(raw_for, 7).0.len());
    let figures = vec![
        ("what", V::S("statements".into())),
        ("cycles", V::N(cycles as f64)),
        ("statements_per_cycle", V::N(ours as f64 / cycles as f64)),
    ];
    let raw = vec![
        ("cycles", V::N(raw_cycles as f64)),
        (
            "statements_per_cycle",
            V::N(raws as f64 / raw_cycles as f64),
        ),
    ];
    line("M1", backend, figures, Some(raw), 0);
}

/// The server's CPU so far: the postmaster's and its ended children's
/// (reaped: counted in its own), and every live child's (backends, the
/// WAL writer, autovacuum), from `/proc`.
pub fn server_cpu(server: &PgServer) -> Option<crate::measures::Work> {
    let pid = std::fs::read_to_string(server.dir().join("data/postmaster.pid")).ok()?;
    let pid = pid.lines().next()?.trim().to_owned();
    // utime, stime, cutime, cstime: the 14th to 17th fields.
    let ticks = |pid: &str, fields: usize| -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = stat.rsplit_once(')').map(|(_, r)| r)?;
        // After the command: the state, then numbers; utime is the 12th.
        let values: Vec<&str> = rest.split_whitespace().collect();
        let counted = values.get(11..11 + fields)?.iter();
        counted.map(|v| v.parse::<f64>().ok()).sum()
    };
    let mut total = ticks(&pid, 4)?;
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    total += children
        .split_whitespace()
        .filter_map(|c| ticks(c, 2))
        .sum::<f64>();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(crate::measures::Work {
        cpu_seconds: total / hz,
        events: None,
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A raw connection whose notifications' payloads go to the receiver.
async fn listening(url: &str) -> (Raw, mpsc::UnboundedReceiver<String>) {
    let (client, mut connection) = recipes_pg::tokio_postgres::connect(url, NoTls)
        .await
        .expect("connect");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(m) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match m {
                Ok(AsyncMessage::Notification(n)) => {
                    let _ = tx.send(n.payload().to_owned());
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    (client, rx)
}

/// The p50 of a plain `NOTIFY` round trip: `pg_notify` sent on one
/// connection until a `LISTEN` on another hears it.
pub fn notify_p50_us(url: &str, rounds: usize) -> f64 {
    let rt = runtime();
    let mut took = rt.block_on(async {
        let (ear, mut heard) = listening(url).await;
        ear.batch_execute("LISTEN bench_notify").await.unwrap();
        let (mouth, _) = listening(url).await;
        let mut took = Vec::new();
        for _ in 0..rounds {
            let t = Instant::now();
            mouth
                .batch_execute("SELECT pg_notify('bench_notify', 'x')")
                .await
                .unwrap();
            heard.recv().await.expect("heard");
            took.push(t.elapsed());
        }
        took
    });
    percentile_us(&mut took, 50.0)
}

/// `n` raw contenders handing one lease row on by `NOTIFY` for `seconds`
/// (see the module's notes), and how long they ran.
pub fn handoff(url: &str, n: usize, seconds: Duration) -> (Handoffs, Duration) {
    let handoffs = Handoffs::default();
    let stop_at = Instant::now() + seconds;
    let started = Instant::now();
    std::thread::scope(|s| {
        for i in 0..n {
            let handoffs = &handoffs;
            s.spawn(move || runtime().block_on(contender(url, i, handoffs, stop_at)));
        }
    });
    (handoffs, started.elapsed())
}

const TAKE: &str = "INSERT INTO bench_leases AS l (name, holder, fence, expires_at) \
     VALUES ('/bench/raw-handoff', $1::text::uuid, 1, clock_timestamp() + interval '10 s') \
     ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, \
       fence = l.fence + 1, expires_at = EXCLUDED.expires_at \
     WHERE l.expires_at <= clock_timestamp() RETURNING l.fence";

const RELEASE: &str = "WITH r AS (UPDATE bench_leases SET expires_at = clock_timestamp() \
       WHERE name = '/bench/raw-handoff' AND holder = $1::text::uuid RETURNING 1) \
     SELECT pg_notify('bench_handoff', $1::text) FROM r";

async fn contender(url: &str, i: usize, handoffs: &Handoffs, stop_at: Instant) {
    let (c, mut heard) = listening(url).await;
    c.batch_execute(
        "CREATE TABLE IF NOT EXISTS bench_leases (name text PRIMARY KEY, holder uuid, \
           fence bigint NOT NULL DEFAULT 0, expires_at timestamptz NOT NULL); \
         LISTEN bench_handoff",
    )
    .await
    .ok();
    let me = format!("00000000-0000-0000-0000-{:012}", i + 1);
    let (take, release) = (
        c.prepare(TAKE).await.unwrap(),
        c.prepare(RELEASE).await.unwrap(),
    );
    while Instant::now() < stop_at {
        let row = c.query_opt(&take, &[&me]).await.unwrap();
        if let Some(row) = row {
            handoffs.acquired(row.get::<_, i64>(0) as u64);
            handoffs.releasing();
            c.query(&release, &[&me]).await.unwrap();
        }
        // Wait for another's release (no barging: a releaser waits too).
        let deadline = tokio::time::Instant::now() + Duration::from_millis(50);
        loop {
            match tokio::time::timeout_at(deadline, heard.recv()).await {
                Ok(Some(who)) if who != me => break,
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    }
}

/// `M2`'s plain `NOTIFY` round trip, as its own line.
pub fn notify_line(url: &str) {
    let p50 = notify_p50_us(url, 500);
    line(
        "M2",
        "pg-lease",
        vec![
            ("what", V::S("raw NOTIFY round trip".into())),
            ("notify_p50_us", V::N(p50)),
        ],
        None,
        0,
    );
}
