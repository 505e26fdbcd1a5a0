//! A server whose wall clock runs at another rate than ours: a small
//! library preloaded into the server's processes (`LD_PRELOAD`) that
//! answers `clock_gettime(CLOCK_REALTIME…)`, `gettimeofday` and `time`
//! with `epoch + (now − epoch) × rate`, every other clock untouched.
//!
//! libfaketime does the same in principle but aborts `redis-server` at
//! start ("recursive calls to clock_gettime()": its own set-up calls the
//! allocator, which reads the clock) and skews PostgreSQL's start. This one
//! reads the real clock by the system call, never through libc, so nothing
//! it calls can call it back. The epoch is given to every process of the
//! server, so a forked PostgreSQL backend agrees with its postmaster.
//!
//! Only dynamically linked servers can be set up this way: Redis and
//! PostgreSQL, not etcd (a static Go binary).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

const SOURCE: &str = r#"
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static double rate = 1.0;
static long long epoch_ns = -1;
static volatile int ready;

static void init(void) {
    if (ready) return;
    const char *r = getenv("RECIPES_CLOCK_RATE");
    const char *e = getenv("RECIPES_CLOCK_EPOCH_NS");
    if (r) rate = strtod(r, 0);
    if (e) epoch_ns = strtoll(e, 0, 10);
    ready = 1;
}

static long long real_ns(void) {
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long skewed_ns(void) {
    init();
    long long now = real_ns();
    if (epoch_ns < 0) return now;
    return epoch_ns + (long long)((double)(now - epoch_ns) * rate);
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE) {
        long long now = skewed_ns();
        ts->tv_sec = now / 1000000000LL;
        ts->tv_nsec = now % 1000000000LL;
        return 0;
    }
    return syscall(SYS_clock_gettime, clock, ts);
}

int gettimeofday(struct timeval *__restrict tv, void *__restrict tz) {
    (void)tz;
    long long now = skewed_ns();
    if (tv) {
        tv->tv_sec = now / 1000000000LL;
        tv->tv_usec = (now % 1000000000LL) / 1000;
    }
    return 0;
}

time_t time(time_t *t) {
    time_t s = (time_t)(skewed_ns() / 1000000000LL);
    if (t) *t = s;
    return s;
}
"#;

/// The shim, compiled once per test process into the temp folder (world
/// readable: PostgreSQL runs as another user), under a name of its
/// content's hash so that concurrent test processes share one file.
fn library() -> &'static Path {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let hash = SOURCE.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let so = std::env::temp_dir().join(format!("recipes-clock-shim-{hash:016x}.so"));
        if so.exists() {
            return so;
        }
        let unique = format!(
            "{}-{}",
            std::process::id(),
            crate::ports::reserve_port().port()
        );
        let src = std::env::temp_dir().join(format!("recipes-clock-shim-{unique}.c"));
        let tmp = std::env::temp_dir().join(format!("recipes-clock-shim-{unique}.so"));
        std::fs::write(&src, SOURCE).expect("write the clock shim's source");
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&tmp)
            .arg(&src)
            .status()
            .expect("cc runs (Debian's gcc: scripts/setup installs it)");
        let _ = std::fs::remove_file(&src);
        assert!(status.success(), "the clock shim compiles: {status}");
        // A rename is atomic: a concurrent process sees the whole file or none.
        std::fs::rename(&tmp, &so).expect("move the clock shim into place");
        so
    })
}

/// The environment that makes a dynamically linked server's wall clock run
/// `rate` times as fast as ours from now on.
pub fn clock_rate_env(rate: f64) -> Vec<(String, String)> {
    assert!(rate.is_finite() && rate > 0.0, "a clock rate is positive");
    let epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos();
    vec![
        ("LD_PRELOAD".to_owned(), library().display().to_string()),
        ("RECIPES_CLOCK_RATE".to_owned(), rate.to_string()),
        ("RECIPES_CLOCK_EPOCH_NS".to_owned(), epoch.to_string()),
    ]
}
