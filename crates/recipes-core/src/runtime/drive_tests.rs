//! Who drives the runtime: a caller during its call, the runtime thread
//! between calls, and background work never starved by either.
use std::sync::atomic::AtomicU64;

use super::*;

/// The environment's slowness factor (`RECIPES_TEST_SLOW`), for upper
/// bounds only.
fn slow_factor() -> f64 {
    std::env::var("RECIPES_TEST_SLOW")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|f| *f >= 1.0)
        .unwrap_or(1.0)
}

/// More stack than the runtime thread has: a thread that may drive.
const BIG_STACK: usize = 16 << 20;

/// Run `f` on a new thread named `name` with [`BIG_STACK`].
pub(super) fn on_big_stack<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .stack_size(BIG_STACK)
        .spawn(f)
        .unwrap()
}

fn name_of_this_thread() -> Option<String> {
    std::thread::current().name().map(str::to_owned)
}

/// A task that ticks every millisecond and records the longest gap
/// between two ticks (in microseconds) and the threads it ran on.
struct Ticker {
    ticks: Arc<AtomicUsize>,
    longest_gap_us: Arc<AtomicU64>,
    threads: Arc<Mutex<std::collections::BTreeSet<String>>>,
}

impl Ticker {
    fn start(rt: &Runtime) -> Ticker {
        let ticker = Ticker {
            ticks: Arc::default(),
            longest_gap_us: Arc::default(),
            threads: Arc::default(),
        };
        let (ticks, gap, threads) = (
            ticker.ticks.clone(),
            ticker.longest_gap_us.clone(),
            ticker.threads.clone(),
        );
        rt.handle().spawn(async move {
            let mut last = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let now = Instant::now();
                let us = u64::try_from((now - last).as_micros()).unwrap_or(u64::MAX);
                gap.fetch_max(us, Ordering::SeqCst);
                last = now;
                ticks.fetch_add(1, Ordering::SeqCst);
                threads
                    .lock()
                    .insert(name_of_this_thread().unwrap_or_default());
            }
        });
        ticker
    }

    /// Started, five ticks in, the longest gap so far forgotten.
    fn settled(rt: &Runtime) -> Ticker {
        let ticker = Ticker::start(rt);
        ticker.wait_ticks(5);
        ticker.longest_gap_us.store(0, Ordering::SeqCst);
        ticker
    }

    fn ticks(&self) -> usize {
        self.ticks.load(Ordering::SeqCst)
    }

    /// `n` more ticks within 5 s, none more than 100 ms after the last
    /// (both scaled: the machine may be shared); `stop` ends the load.
    fn ticks_unstarved(&self, n: usize, stop: impl FnOnce()) {
        let started = Instant::now();
        self.wait_ticks(n);
        stop();
        let took = started.elapsed();
        let gap = Duration::from_micros(self.longest_gap_us.load(Ordering::SeqCst));
        let slow = slow_factor();
        assert!(
            took < Duration::from_secs(5).mul_f64(slow),
            "{n} ticks took {took:?}"
        );
        assert!(
            gap < Duration::from_millis(100).mul_f64(slow),
            "a tick waited {gap:?}"
        );
    }

    fn wait_ticks(&self, n: usize) {
        let until = self.ticks() + n;
        super::tests::wait_for("ticks", Duration::from_secs(10), || self.ticks() >= until);
    }
}

/// A call that waits until `release` is sent, on `rt` from a new thread
/// named `name`; it sends the name of the thread its future ran on.
fn parked_call(
    rt: &Runtime,
    name: &str,
) -> (
    crossbeam_channel::Sender<()>,
    std::thread::JoinHandle<Result<Option<String>>>,
) {
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (tx, rx) = crossbeam_channel::bounded::<()>(1);
    let rt = rt.clone();
    let thread = on_big_stack(name, move || {
        rt.call_until("parked", None, async move {
            let _ = released.await;
            Ok(name_of_this_thread())
        })
    });
    // Forward a crossbeam send to the oneshot, so tests stay blocking.
    std::thread::spawn(move || {
        if rx.recv().is_ok() {
            let _ = release.send(());
        }
    });
    (tx, thread)
}

#[test]
fn background_tasks_run_on_the_caller_during_a_long_call() {
    let rt = Runtime::new("recipes-test-drive").unwrap();
    let ticker = Ticker::start(&rt);
    ticker.wait_ticks(5);
    let (release, caller) = parked_call(&rt, "long-caller");
    // The caller drives: the ticker keeps ticking, on the caller's thread.
    super::tests::wait_for("a tick on the caller", Duration::from_secs(10), || {
        ticker.threads.lock().contains("long-caller")
    });
    ticker.wait_ticks(50);
    release.send(()).unwrap();
    assert_eq!(
        caller.join().unwrap().unwrap().as_deref(),
        Some("long-caller")
    );
    // After the call, the runtime thread takes the ticker back.
    ticker.threads.lock().clear();
    super::tests::wait_for(
        "a tick on the runtime thread",
        Duration::from_secs(10),
        || ticker.threads.lock().contains("recipes-test-drive"),
    );
}

#[test]
fn a_call_made_while_another_drives_is_run_by_the_driver() {
    let rt = Runtime::new("recipes-test-drive").unwrap();
    let (release, driver) = parked_call(&rt, "driver");
    super::tests::wait_for("the driver in its call", Duration::from_secs(10), || {
        rt.inner.baton.is_driven_by_a_caller()
    });
    let ran_on = rt
        .call("second", Duration::from_secs(5), async {
            Ok(name_of_this_thread())
        })
        .unwrap();
    assert_eq!(ran_on.as_deref(), Some("driver"));
    release.send(()).unwrap();
    assert_eq!(driver.join().unwrap().unwrap().as_deref(), Some("driver"));
}

#[test]
fn a_call_waiting_on_a_driver_that_leaves_is_answered_at_once() {
    let rt = Runtime::new("recipes-test-drive").unwrap();
    let (release, driver) = parked_call(&rt, "driver");
    super::tests::wait_for("the driver in its call", Duration::from_secs(10), || {
        rt.inner.baton.is_driven_by_a_caller()
    });
    // The second call waits longer than the driver stays; with less stack
    // than the runtime thread it never drives, so it waits on the channel
    // even if it starts after the driver left.
    let rt2 = rt.clone();
    let second = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            rt2.call("second", Duration::from_secs(30), async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(name_of_this_thread())
            })
        })
        .unwrap();
    release.send(()).unwrap();
    driver.join().unwrap().unwrap();
    let ran_on = second.join().unwrap().unwrap();
    assert!(
        matches!(ran_on.as_deref(), Some("driver" | "recipes-test-drive")),
        "{ran_on:?}"
    );
}

#[test]
fn background_work_never_starves_while_threads_call_in_a_tight_loop() {
    let rt = Runtime::new("recipes-test-drive").unwrap();
    let ticker = Ticker::settled(&rt);
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (rt, stop, calls) = (rt.clone(), stop.clone(), calls.clone());
            // Two threads may drive; two have less stack than the
            // runtime thread and never do.
            let stack = if i < 2 { BIG_STACK } else { 1 << 20 };
            let builder = std::thread::Builder::new().stack_size(stack);
            builder
                .spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let r = rt.call("tight", Duration::from_secs(30), async move {
                            // Some calls yield once, some wait on a timer
                            // (neither answers on its first poll: see the
                            // next test for those).
                            if i % 2 == 0 {
                                tokio::task::yield_now().await;
                            } else {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            }
                            Ok(())
                        });
                        r.unwrap();
                        calls.fetch_add(1, Ordering::SeqCst);
                    }
                })
                .unwrap()
        })
        .collect();
    // 500 one-millisecond ticks; each may be a timer tick late.
    ticker.ticks_unstarved(500, || {
        stop.store(true, Ordering::SeqCst);
        for t in threads {
            t.join().unwrap();
        }
    });
    assert!(calls.load(Ordering::SeqCst) > 100);
}

/// Calls whose futures answer on their first poll never give tokio's
/// scheduler a turn (its `block_on` polls the caller's future first and
/// returns at once): a thread calling them in a tight loop, with gaps
/// shorter than the grace, must still not starve the runtime's timers and
/// tasks (keep-alives, watches).
#[test]
fn background_work_never_starves_while_a_thread_calls_what_answers_at_once() {
    let rt = Runtime::new("recipes-test-drive").unwrap();
    let ticker = Ticker::settled(&rt);
    let stop = Arc::new(AtomicBool::new(false));
    let caller = {
        let (rt, stop) = (rt.clone(), stop.clone());
        on_big_stack("at-once", move || {
            let mut calls = 0_u64;
            while !stop.load(Ordering::SeqCst) {
                rt.call("at once", Duration::from_secs(30), async { Ok(()) })
                    .unwrap();
                calls += 1;
            }
            calls
        })
    };
    // Each tick's timer waits for the scheduler's next turn, which such
    // calls give it once a look (`LOOK`, 16 ms): 100 ticks in ~1.7 s.
    ticker.ticks_unstarved(100, || {
        stop.store(true, Ordering::SeqCst);
        assert!(caller.join().unwrap() > 100, "calls made");
    });
}

#[test]
fn shutdown_ends_a_driving_callers_call_with_closed() {
    let rt = Runtime::new("recipes-test-drive").unwrap();
    let (_release, driver) = parked_call(&rt, "driver");
    super::tests::wait_for("the driver in its call", Duration::from_secs(10), || {
        rt.inner.baton.is_driven_by_a_caller()
    });
    rt.shutdown(Duration::from_millis(10));
    assert!(matches!(driver.join().unwrap(), Err(Error::Closed)));
}

#[test]
fn a_crash_ends_both_a_driving_and_a_waiting_call_with_closed() {
    let rt = Runtime::new("recipes-test-drive").unwrap();
    let (_release, driver) = parked_call(&rt, "driver");
    super::tests::wait_for("the driver in its call", Duration::from_secs(10), || {
        rt.inner.baton.is_driven_by_a_caller()
    });
    let (_release2, waiter) = parked_call(&rt, "waiter");
    rt.crash_for_tests();
    assert!(matches!(driver.join().unwrap(), Err(Error::Closed)));
    assert!(matches!(waiter.join().unwrap(), Err(Error::Closed)));
    assert!(matches!(
        rt.call("after", Duration::from_secs(1), async { Ok(()) }),
        Err(Error::Closed)
    ));
}

#[test]
fn a_driving_call_times_out_and_its_future_is_dropped() {
    let rt = Runtime::new("recipes-test-drive").unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let flag = Flag(dropped.clone());
    let (rt2, dropped2) = (rt.clone(), dropped.clone());
    on_big_stack("caller", move || {
        let r = rt2.call("slow", Duration::from_millis(20), async move {
            let _flag = flag;
            std::future::pending::<()>().await;
            Ok(())
        });
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        // Dropped on the caller's thread before the call returned.
        assert!(dropped2.load(Ordering::SeqCst));
    })
    .join()
    .unwrap();
    // The runtime still answers.
    rt.call("after", Duration::from_secs(5), async { Ok(()) })
        .unwrap();
}

#[test]
fn a_caller_with_less_stack_than_the_runtime_thread_never_drives() {
    let rt = Runtime::new("recipes-test-drive").unwrap();
    let ran_on = name_of_thread_that_ran(&rt, "small-stack", Some(256 << 10));
    assert_eq!(ran_on.as_deref(), Some("recipes-test-drive"));
    let rt2 = rt.clone();
    let ran_on = on_big_stack("big-stack", move || {
        rt2.call("name", Duration::from_secs(5), async {
            Ok(name_of_this_thread())
        })
    })
    .join()
    .unwrap()
    .unwrap();
    assert_eq!(ran_on.as_deref(), Some("big-stack"));
}

#[test]
fn a_caller_on_a_thread_of_the_default_stack_size_drives() {
    let rt = Runtime::new("recipes-test-drive").unwrap();
    let ran_on = name_of_thread_that_ran(&rt, "default-stack", None);
    assert_eq!(ran_on.as_deref(), Some("default-stack"));
}

#[test]
fn a_default_caller_drives_a_runtime_thread_given_a_larger_stack_than_asked() {
    // glibc caches an exited thread's stack and hands it to the next new
    // thread that asks for no more (a client's runtime thread, which asks
    // for a default stack less `CALLER_FRAMES`): that thread then has more
    // stack than it asked for. Seen in `bench etcd M2`, where a third of
    // the contenders' calls took the channel path after the raw phase's
    // threads had exited.
    let larger = drive::runtime_stack_size() + (256 << 10);
    std::thread::Builder::new()
        .stack_size(larger)
        .spawn(|| ())
        .unwrap()
        .join()
        .unwrap();
    let rt = Runtime::new("recipes-test-drive").unwrap();
    let ran_on = name_of_thread_that_ran(&rt, "default-stack", None);
    assert_eq!(ran_on.as_deref(), Some("default-stack"));
}

/// From a new thread `name` (of `stack` bytes, else the default size),
/// a call of `rt` that answers the name of the thread that ran it.
fn name_of_thread_that_ran(rt: &Runtime, name: &str, stack: Option<usize>) -> Option<String> {
    let rt = rt.clone();
    let mut builder = std::thread::Builder::new().name(name.into());
    if let Some(stack) = stack {
        builder = builder.stack_size(stack);
    }
    builder
        .spawn(move || {
            rt.call("name", Duration::from_secs(5), async {
                Ok(name_of_this_thread())
            })
        })
        .unwrap()
        .join()
        .unwrap()
        .unwrap()
}

#[test]
fn a_driven_future_that_panics_ends_its_call_with_closed_as_a_spawned_one_did() {
    let rt = Runtime::new("recipes-test-drive").unwrap();
    let rt2 = rt.clone();
    let r = on_big_stack("caller", move || {
        rt2.call("panics", Duration::from_secs(5), async {
            if std::hint::black_box(true) {
                panic!("a bug in a store's future");
            }
            Ok(())
        })
    })
    .join()
    .expect("no panic in the caller");
    assert!(matches!(r, Err(Error::Closed)), "{r:?}");
    rt.call("after", Duration::from_secs(5), async { Ok(()) })
        .unwrap();
}

#[test]
fn a_frame_off_the_threads_stack_has_no_room_to_drive() {
    use super::drive::left_from;
    assert_eq!(left_from(1_500, 1_000, 2_000), Some(500));
    assert_eq!(left_from(1_000, 1_000, 2_000), Some(0));
    assert_eq!(left_from(2_000, 1_000, 2_000), Some(1_000));
    // Above the stack (another stack mapped higher) or below it.
    assert_eq!(left_from(5_000, 1_000, 2_000), None);
    assert_eq!(left_from(500, 1_000, 2_000), None);
}
