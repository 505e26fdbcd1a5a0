//! The runtime bridge's tests.
use super::*;
use crate::clock::{system_clock, BootInstant};
use crate::lease::SessionLease;

pub(super) fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn one_worker_and_an_uncontended_call_runs_on_the_callers_thread() {
    let rt = Runtime::new("recipes-test-rt").unwrap();
    let rt2 = rt.clone();
    let name = super::drive_tests::on_big_stack("caller", move || {
        rt2.call("name", Duration::from_secs(5), async {
            Ok(std::thread::current().name().map(str::to_owned))
        })
    })
    .join()
    .unwrap()
    .unwrap();
    assert_eq!(name.as_deref(), Some("caller"));
    assert_eq!(rt.handle().metrics().num_workers(), 1);
    // Background work runs on the named runtime thread between calls.
    let (tx, rx) = crossbeam_channel::bounded(1);
    rt.spawn(async move {
        let _ = tx.send(std::thread::current().name().map(str::to_owned));
    });
    let on = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(on.as_deref(), Some("recipes-test-rt"));
}

#[test]
fn tasks_run_while_no_caller_blocks() {
    let rt = Runtime::new("rt").unwrap();
    let ticks = Arc::new(AtomicUsize::new(0));
    let t = ticks.clone();
    rt.handle().spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(1)).await;
            t.fetch_add(1, Ordering::SeqCst);
        }
    });
    // No call is made; the heartbeat-like task still advances.
    wait_for("ticks", Duration::from_secs(5), || {
        ticks.load(Ordering::SeqCst) >= 20
    });
}

#[test]
fn a_slow_call_times_out_and_is_cancelled() {
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let rt = Runtime::new("rt").unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = Flag(dropped.clone());
    let r = rt.call("slow", Duration::from_millis(50), async move {
        let _flag = flag;
        std::future::pending::<()>().await;
        Ok(())
    });
    match r {
        Err(Error::Timeout { what, after }) => {
            assert_eq!(what, "slow");
            assert!(after >= Duration::from_millis(50));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    wait_for("cancelled future dropped", Duration::from_secs(5), || {
        dropped.load(Ordering::SeqCst)
    });
}

#[test]
fn calls_work_from_spawn_blocking_of_another_runtime() {
    let rt = Runtime::new("rt").unwrap();
    let other = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let rt2 = rt.clone();
    let v = other
        .block_on(async move {
            tokio::task::spawn_blocking(move || {
                rt2.call("add", Duration::from_secs(5), async { Ok(40 + 2) })
            })
            .await
        })
        .unwrap()
        .unwrap();
    assert_eq!(v, 42);
}

#[test]
fn a_blocking_call_inside_an_async_task_is_an_error_saying_where_to_call_it() {
    let rt = Runtime::new("rt").unwrap();
    let refused = |r: Result<i32>| match r {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("spawn_blocking"), "{msg}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    let call = |rt: Runtime| rt.call("add", Duration::from_secs(5), async { Ok(40 + 2) });
    let current = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let rt2 = rt.clone();
    refused(current.block_on(async move { call(rt2) }));
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let rt2 = rt.clone();
    refused(
        multi
            .block_on(multi.spawn(async move { call(rt2) }))
            .unwrap(),
    );
    // The task's budget is given back: it still runs tokio's own calls.
    let rt2 = rt.clone();
    let (r, yielded) = multi.block_on(async move {
        let r = call(rt2);
        tokio::task::yield_now().await;
        (r, true)
    });
    refused(r);
    assert!(yielded);
    // A plain thread that entered a runtime, and a blocking task, may block.
    let _entered = multi.enter();
    assert_eq!(call(rt.clone()).unwrap(), 42);
    assert!(!super::inside_async_task());
}

#[test]
fn a_blocking_call_on_the_runtime_thread_is_an_error_not_a_deadlock() {
    let rt = Runtime::new("rt").unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let rt2 = rt.clone();
    rt.spawn(async move {
        let r = rt2.call("nested", Duration::from_secs(60), async { Ok(()) });
        let _ = tx.send(r);
    });
    let r = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("answered, no deadlock");
    match r {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("nested"), "{msg}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn dropping_the_last_handle_joins_the_thread() {
    let rt = Runtime::new("rt").unwrap();
    let alive = rt.inner.alive.clone();
    let root = rt.loss_root().signal();
    drop(rt);
    // The join has happened when drop returned.
    assert!(!alive.load(Ordering::SeqCst));
    assert_eq!(root.reason(), Some(LossReason::Closed));
}

#[test]
fn shutdown_finishes_background_work_within_the_grace() {
    let rt = Runtime::new("rt").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    assert!(rt.spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        d.store(true, Ordering::SeqCst);
    }));
    rt.shutdown(Duration::from_secs(5));
    assert!(
        done.load(Ordering::SeqCst),
        "background release ran before the join"
    );
    assert!(matches!(
        rt.call("late", Duration::from_secs(1), async { Ok(()) }),
        Err(Error::Closed)
    ));
    assert!(!rt.spawn(async {}));
}

#[test]
fn a_dead_thread_closes_calls_and_fires_every_loss_signal() {
    let rt = Runtime::new("rt").unwrap();
    let lease = SessionLease::start("s", rt.loss_root(), system_clock(), Duration::ZERO).unwrap();
    lease.acknowledged(BootInstant::now(), Duration::from_secs(60));
    let guard = lease.trigger().child().signal();
    // A caller blocked in a call when the thread dies gets `Closed`.
    let rt2 = rt.clone();
    let blocked = std::thread::spawn(move || {
        rt2.call_until("forever", None, async {
            std::future::pending::<()>().await;
            Ok(())
        })
    });
    // Whether the call starts before or after the crash, it must end
    // with `Closed`.
    rt.crash_for_tests();
    assert_eq!(
        guard.wait_timeout(Duration::from_secs(5)),
        Some(LossReason::Closed)
    );
    assert!(matches!(blocked.join().unwrap(), Err(Error::Closed)));
    assert!(!rt.is_alive());
    assert!(matches!(
        rt.call("after", Duration::from_secs(1), async { Ok(()) }),
        Err(Error::Closed)
    ));
}

#[test]
fn a_name_with_nul_is_rejected() {
    assert!(matches!(
        Runtime::new("a\0b"),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_call_from_a_thread_local_destructor_is_answered() {
    type Answer = Arc<parking_lot::Mutex<Option<Result<i32>>>>;
    struct CallOnDrop(Runtime, Answer);
    impl Drop for CallOnDrop {
        fn drop(&mut self) {
            let r = self
                .0
                .call("add", Duration::from_secs(5), async { Ok(40 + 2) });
            *self.1.lock() = Some(r);
        }
    }
    thread_local! {
        static LAST: std::cell::RefCell<Option<CallOnDrop>> = const { std::cell::RefCell::new(None) };
    }
    let rt = Runtime::new("rt").unwrap();
    let answer: Answer = Arc::default();
    let (rt2, answer2) = (rt.clone(), answer.clone());
    std::thread::spawn(move || {
        LAST.with(|l| *l.borrow_mut() = Some(CallOnDrop(rt2.clone(), answer2)));
        // A call that drives sets tokio's context up on this thread after
        // ours: at the thread's end it is destroyed first.
        rt2.call("first", Duration::from_secs(5), async { Ok(()) })
            .unwrap();
    })
    .join()
    .unwrap();
    let got = answer.lock().take();
    assert!(matches!(got, Some(Ok(42))), "{got:?}");
}
