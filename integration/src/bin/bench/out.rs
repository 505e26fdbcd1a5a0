//! Figures: percentiles of samples, and one JSON line per measurement.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Violations seen by every measurement so far.
pub static VIOLATIONS: AtomicU64 = AtomicU64::new(0);

/// A JSON value of a figure.
pub enum V {
    /// A number, printed with at most one decimal.
    N(f64),
    /// A ratio, printed with two decimals.
    R(f64),
    /// A string.
    S(String),
    /// No figure (a measurement this store cannot take).
    Null,
}

impl V {
    fn json(&self) -> String {
        match self {
            V::N(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{x:.0}"),
            V::N(x) => format!("{x:.1}"),
            V::R(x) if x.is_finite() => format!("{x:.2}"),
            V::R(_) => "null".into(),
            V::S(s) => format!("{s:?}"),
            V::Null => "null".into(),
        }
    }
}

/// Named figures, in order.
pub type Figures = Vec<(&'static str, V)>;

fn object(figures: &Figures) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in figures.iter().enumerate() {
        let _ = write!(out, "{}\"{k}\":{}", if i > 0 { "," } else { "" }, v.json());
    }
    out.push('}');
    out
}

/// Print one measurement: its figures, the raw minimum's beside them
/// (`None`: there is none for it), and how many violations it saw.
pub fn line(metric: &str, backend: &str, figures: Figures, raw: Option<Figures>, violations: u64) {
    let mut all: Figures = vec![
        ("metric", V::S(metric.into())),
        ("backend", V::S(backend.into())),
    ];
    all.extend(figures);
    VIOLATIONS.fetch_add(violations, Ordering::SeqCst);
    let raw = raw.map_or("null".into(), |r| object(&r));
    let body = object(&all);
    println!(
        "{},\"raw\":{raw},\"violations\":{violations}}}",
        &body[..body.len() - 1]
    );
}

/// `a / b` to two decimals (`null` when either is missing).
pub fn ratio(a: Option<f64>, b: Option<f64>) -> V {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => V::R(a / b),
        _ => V::Null,
    }
}

/// The number named `name` among `figures`.
pub fn figure(figures: &Figures, name: &str) -> Option<f64> {
    figures.iter().find_map(|(k, v)| match v {
        V::N(x) if *k == name => Some(*x),
        _ => None,
    })
}

/// The `p`-th percentile (0..=100) of `samples` in microseconds.
pub fn percentile_us(samples: &mut [Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_unstable();
    let i = ((samples.len() - 1) as f64 * p / 100.0).round() as usize;
    samples[i].as_secs_f64() * 1e6
}

/// Rate, p50 and p99 of `samples` taken over `elapsed`.
pub fn rate_and_latency(samples: &mut [Duration], elapsed: Duration) -> Figures {
    vec![
        (
            "ops_per_sec",
            V::N(samples.len() as f64 / elapsed.as_secs_f64()),
        ),
        ("p50_us", V::N(percentile_us(samples, 50.0))),
        ("p99_us", V::N(percentile_us(samples, 99.0))),
    ]
}
