//! The checks every store shares: the round trip against the TTL, the
//! granted TTL against the asked one, the server's clock rate against
//! ours, and a real lock taken, fenced and released.

use std::time::{Duration, Instant};

use recipes_core::{Client, Result};

use super::{Asked, Level, Report};

/// How many round trips the sample takes.
const SAMPLES: usize = 20;
/// The TTL should be at least this many p99 round trips (a warning below).
const TTL_ROUND_TRIPS: u32 = 10;
/// Below this many, a lease cannot be kept at all (a failure).
const TTL_ROUND_TRIPS_MIN: u32 = 3;
/// How long the clock-rate check watches both clocks.
const CLOCK_SPAN: Duration = Duration::from_secs(2);
/// The clock-rate difference the library's guarantees assume at most.
const CLOCK_PPM: f64 = recipes_core::store::CLOCK_DRIFT_PPM as f64;

/// A duration for people: `1.25 ms`, `3.0 s`.
pub fn ms(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// How the server's clock is read.
pub enum ServerClock<'a> {
    /// A read of the server's time since the epoch, to within a
    /// resolution (a clock in whole milliseconds: 1 ms).
    Read(&'a dyn Fn() -> Result<Duration>, Duration),
    /// A rate measured by the store's own means: a span of the server's
    /// clock, the same span of ours, and the error of pairing them.
    Measured(Result<(Duration, Duration, Duration)>),
    /// Cannot be read: why, and which right would let it.
    Cannot(String, &'static str),
}

/// Every shared check, with the server's clock read as `clock` says.
pub fn checks<C: Client>(
    client: &C,
    asked: &Asked<'_>,
    prefix: &str,
    clock: ServerClock<'_>,
    report: &mut Report,
) {
    granted_ttl(client, asked.ttl, report);
    round_trip(client, asked.ttl, report);
    match clock {
        ServerClock::Read(read, resolution) => {
            clock_verdict(measure_clock(read, resolution), report)
        }
        ServerClock::Measured(measured) => clock_verdict(measured, report),
        ServerClock::Cannot(found, change) => {
            report.with_change("clock-rate", Level::Skip, found, change)
        }
    }
    // PostgreSQL's session mode: a name of its own (a name is used in one
    // mode only).
    let name = match asked.choice {
        crate::cli::BackendChoice::Pg(_, recipes_pg::PgMode::Session) => {
            format!("{prefix}session-lock")
        }
        _ => format!("{prefix}lock"),
    };
    lock(client, &name, report);
}

fn granted_ttl<C: Client>(client: &C, asked: Duration, report: &mut Report) {
    let granted = client.granted_ttl();
    match recipes_core::store::granted_ttl_hazard(client.store(), asked, granted) {
        Some(hazard) => report.with_change("granted-ttl", Level::Fail, hazard, ""),
        None => {
            report.add(
                "granted-ttl",
                Level::Ok,
                format!("asked {}, granted {}", ms(asked), ms(granted)),
            );
        }
    }
}

/// p50 and p99 of `SAMPLES` round trips.
fn round_trip<C: Client>(client: &C, ttl: Duration, report: &mut Report) {
    let mut times = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        match client.ping() {
            Ok(t) => times.push(t),
            Err(e) => {
                report.with_change(
                    "round-trip",
                    Level::Fail,
                    format!("a round trip failed: {e}"),
                    "the store must answer every request within the RPC timeout",
                );
                return;
            }
        }
    }
    times.sort();
    let p50 = times[times.len() / 2];
    let p99 = times[(times.len() * 99).div_ceil(100) - 1];
    let found = format!(
        "p50 {}, p99 {} over {SAMPLES} round trips; TTL {}",
        ms(p50),
        ms(p99),
        ms(ttl)
    );
    let want = p99 * TTL_ROUND_TRIPS;
    let change = format!(
        "raise --ttl to at least {} (10 x p99), or bring the client nearer the store",
        ms(want)
    );
    if ttl < p99 * TTL_ROUND_TRIPS_MIN {
        report.with_change("round-trip", Level::Fail, found, change);
    } else if ttl < want {
        report.with_change("round-trip", Level::Warn, found, change);
    } else {
        report.add("round-trip", Level::Ok, found);
    }
}

/// How many reads of the server's clock each end of the span takes; the
/// one with the shortest round trip counts (a loaded host's slow read
/// would widen the error).
const CLOCK_READS: usize = 5;

/// Reads of the server's clock, timed: of the read with the shortest
/// round trip, the server's time, our instant at the middle of the round
/// trip, and half the round trip (the error of pairing the two).
fn clock_sample(read: &dyn Fn() -> Result<Duration>) -> Result<(Duration, Instant, Duration)> {
    let mut best: Option<(Duration, Instant, Duration)> = None;
    for _ in 0..CLOCK_READS {
        let sent = Instant::now();
        let server = read()?;
        let rtt = sent.elapsed();
        if best.is_none_or(|(_, _, half)| rtt / 2 < half) {
            best = Some((server, sent + rtt / 2, rtt / 2));
        }
    }
    Ok(best.expect("at least one read"))
}

/// Two timed reads of the server's clock `CLOCK_SPAN` apart: the span of
/// the server's clock, the span of ours, and the error of pairing them
/// (half of each read's round trip, and the clock's resolution at each
/// end).
fn measure_clock(
    read: &dyn Fn() -> Result<Duration>,
    resolution: Duration,
) -> Result<(Duration, Duration, Duration)> {
    let (s0, l0, e0) = clock_sample(read)?;
    // A measurement span, not a wait for a condition.
    std::thread::sleep(CLOCK_SPAN);
    let (s1, l1, e1) = clock_sample(read)?;
    let server = s1.checked_sub(s0).ok_or_else(|| {
        recipes_core::Error::invalid("the server's clock stepped back during the check")
    })?;
    Ok((server, l1 - l0, e0 + e1 + resolution * 2))
}

/// The server's clock rate against ours, in ppm, with the error the
/// measurement allows: a failure only when beyond 500 ppm by more than
/// the error.
fn clock_verdict(measured: Result<(Duration, Duration, Duration)>, report: &mut Report) {
    let (server, local, error) = match measured {
        Ok(m) => m,
        Err(e) => {
            report.with_change(
                "clock-rate",
                Level::Skip,
                format!("cannot read the server's clock: {e}"),
                "grant the user what reads it (Redis: +time; PostgreSQL: none; ZooKeeper: \
                 CREATE and DELETE under --prefix; etcd: a lease grant)",
            );
            return;
        }
    };
    let span = local.as_secs_f64();
    let ppm = (server.as_secs_f64() - span) / span * 1e6;
    let error = error.as_secs_f64() / span * 1e6;
    let found = format!(
        "the server's clock ran {ppm:+.0} ppm (±{error:.0}) against ours over {}",
        ms(local)
    );
    if ppm.abs() - error > CLOCK_PPM {
        report.with_change(
            "clock-rate",
            Level::Fail,
            found,
            "the lease deadlines assume clock rates within 500 ppm: fix the time \
             service (NTP) on the server or this host",
        );
    } else {
        report.add("clock-rate", Level::Ok, found);
    }
}

/// Take a lock of the doctor's own (`<prefix>lock`: one name for every
/// run, so that what a store keeps of a released lock by design, its
/// fence counter, is one key, not one per run), fence it, release it, and
/// check that nothing was left.
fn lock<C: Client>(client: &C, name: &str, report: &mut Report) {
    let taken = (|| {
        let mutex = client.mutex(name)?;
        let deadline = Instant::now() + client.granted_ttl();
        let Some(guard) = mutex.try_lock_until(deadline)? else {
            return Ok(None);
        };
        let token = guard.token();
        guard.check()?;
        guard.release()?;
        Ok::<_, recipes_core::Error>(Some(token))
    })();
    match taken {
        Ok(Some(token)) => match client.contenders(name) {
            Ok(left) if left.is_empty() => {
                report.add(
                    "lock",
                    Level::Ok,
                    format!("took {name} (fence {token}), released it; nothing left"),
                );
            }
            Ok(left) => report.with_change(
                "lock",
                Level::Fail,
                format!("{} entries left on {name} after its release", left.len()),
                "report this: a released lock must leave nothing",
            ),
            Err(e) => report.with_change(
                "lock",
                Level::Warn,
                format!("took and released {name} (fence {token}), cannot list it: {e}"),
                "grant the user read access to the lock names",
            ),
        },
        Ok(None) => report.with_change(
            "lock",
            Level::Warn,
            format!("{name} is held by someone else (another doctor?)"),
            "run the doctor again when the other one is done",
        ),
        Err(e) => report.with_change(
            "lock",
            Level::Fail,
            format!("cannot take, fence and release {name}: {e}"),
            "grant the user what the message names",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(server_ms: u64, local_ms: u64, error_ms: u64) -> Level {
        let mut report = Report::default();
        let d = Duration::from_millis;
        clock_verdict(Ok((d(server_ms), d(local_ms), d(error_ms))), &mut report);
        report.exit_code(true);
        report.levels()[0]
    }

    #[test]
    fn a_clock_off_by_more_than_500_ppm_beyond_the_error_fails() {
        // 1% fast, measured to 1 ms over 2 s (500 ppm of error).
        assert_eq!(verdict(2_020, 2_000, 1), Level::Fail);
        assert_eq!(verdict(1_980, 2_000, 1), Level::Fail);
        // 1000 ppm, but within the error of a coarse measurement.
        assert_eq!(verdict(2_002, 2_000, 2), Level::Ok);
        assert_eq!(verdict(2_000, 2_000, 0), Level::Ok);
    }
}
