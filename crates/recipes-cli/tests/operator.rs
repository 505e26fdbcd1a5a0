//! The operator's flags. `--hold-at-least`: a cron singleton whose CMD
//! ends early keeps the lock for the rest of the hold, so a second run
//! fired a little early by a skewed scheduler finds it held; a signal ends
//! the hold and releases. `--metrics-addr`: a Prometheus text endpoint.

mod common;

use common::*;
use integration::{scale, wait_until};

fn holds_after_cmd_ends(store: Store) {
    let scene = Scene::new("hold-at-least");
    let sub = ["lock", scene.name.as_str(), "--hold-at-least", "10m"];
    let (mut holder, ready) = start_holder(with_store(store, "5s"), &sub, &scene, "exit 3");
    let cmd_pid: u32 = ready[0].parse().unwrap();
    wait_until("CMD ended", scale(RUN_BOUND), || process_gone(cmd_pid));
    let again = || {
        code(
            with_store(store, "5s")
                .args(["lock", &scene.name, "--no-wait"])
                .args(["--", "true"]),
        )
    };
    assert_eq!(
        again(),
        75,
        "CMD ended, but the lock is held for the rest of the hold"
    );
    signal(&holder, libc::SIGTERM);
    let status = wait_exit(&mut holder);
    assert_eq!(
        status.code(),
        Some(3),
        "CMD's own status: its work was done"
    );
    assert!(stderr_of(&mut holder).contains("--hold-at-least"));
    assert_eq!(again(), 0, "released after the signal");
}

#[test]
fn holds_after_cmd_ends_zk() {
    holds_after_cmd_ends(Store::Zk);
}

#[test]
fn holds_after_cmd_ends_etcd() {
    holds_after_cmd_ends(Store::Etcd);
}

/// `--metrics-addr`: a holder serves its metrics as Prometheus text.
fn serves_metrics(store: Store) {
    let scene = Scene::new("metrics-addr");
    let port = integration::ports::reserve_port();
    let addr = port.addr().to_string();
    let sub = ["lock", scene.name.as_str(), "--metrics-addr", addr.as_str()];
    let (mut holder, _) = start_holder(with_store(store, "5s"), &sub, &scene, "exec sleep 30");
    let timeout = scale(std::time::Duration::from_secs(5));
    let (status, body) =
        integration::http::http_request(port.addr(), "GET", "/metrics", "", timeout).unwrap();
    assert_eq!(status, 200, "{body}");
    for series in ["recipes_acquire_seconds", "recipes_lease_margin_seconds"] {
        assert!(body.contains(series), "{series} missing from:\n{body}");
    }
    assert!(body.contains("outcome=\"acquired\""), "{body}");
    signal(&holder, libc::SIGTERM);
    wait_exit(&mut holder);
}

#[test]
fn serves_metrics_zk() {
    serves_metrics(Store::Zk);
}

#[test]
fn serves_metrics_etcd() {
    serves_metrics(Store::Etcd);
}
