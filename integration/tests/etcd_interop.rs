//! `etcdctl lock` (the Go `concurrency` package) and our mutex on one name,
//! on Debian's etcd 3.4 and on each vendored etcd version: they exclude
//! each other, in arrival order.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use integration::{scale, wait_for, EtcdConfig, EtcdServer};

/// `etcdctl lock` (Go's concurrency.Mutex) and ours contend for one lock
/// and share one increasing fence sequence; both fences are the revision at
/// which ownership was confirmed.
#[test]
fn etcdctl_lock_contends_with_ours() {
    etcdctl_lock_contends_with_ours_on(EtcdConfig::default());
}

/// The same on each etcd of the version matrix (`etcdctl` stays Debian's
/// 3.4: the v3 API is the same).
#[test]
fn etcdctl_lock_contends_with_ours_on_each_etcd_version() {
    for version in integration::etcd_server::VENDORED_VERSIONS {
        etcdctl_lock_contends_with_ours_on(EtcdConfig::default().with_version(version));
    }
}

fn etcdctl_lock_contends_with_ours_on(config: EtcdConfig) {
    // Its own server: nothing else writes, so each fence can be compared
    // with the store's revision right after the hand-over.
    let server = EtcdServer::start_with(config);
    let facts = server.facts();
    let dir = integration::test_dir::TestDir::new("etcdctl-lock");
    let name = lock_name("etcdctl");
    let clients: Vec<_> = (0..2).map(|_| connect(&server)).collect();
    let mut fences: Vec<(String, i64)> = Vec::new();

    let mut ours = Some(clients[0].mutex(&name).unwrap().lock().unwrap());
    fences.push(("ours".into(), ours.as_ref().unwrap().token().get() as i64));
    assert_eq!(fences[0].1, store_revision(&facts));
    for round in 0..3 {
        // etcdctl waits while we hold.
        let mut ctl = Etcdctl::lock(&server, &name, dir.path(), round);
        wait_keys(&facts, &name, 2);
        assert!(
            ctl.rev(Duration::ZERO).is_none(),
            "etcdctl must wait while we hold"
        );
        ours.take().unwrap().release().unwrap();
        let rev = ctl
            .rev(scale(Duration::from_secs(10)))
            .expect("etcdctl acquires");
        assert_eq!(
            rev,
            store_revision(&facts),
            "ETCD_LOCK_REV is the confirming read's revision"
        );
        fences.push(("etcdctl".into(), rev));
        // Ours waits while etcdctl holds.
        let m = clients[round % 2].mutex(&name).unwrap();
        let waiter = std::thread::spawn(move || m.lock());
        wait_keys(&facts, &name, 2);
        assert!(!waiter.is_finished(), "we must wait while etcdctl holds");
        ctl.unlock();
        let g = waiter.join().unwrap().unwrap();
        assert_eq!(g.token().get() as i64, store_revision(&facts));
        fences.push(("ours".into(), g.token().get() as i64));
        ours = Some(g);
    }
    ours.take().unwrap().release().unwrap();
    println!("fence sequence: {fences:?}");
    assert!(
        fences.windows(2).all(|w| w[0].1 < w[1].1),
        "one strictly increasing sequence: {fences:?}"
    );
}

/// `etcdctl lock <name> sh -c …`: prints `ETCD_LOCK_REV`, then holds the
/// lock until the test writes to a fifo.
struct Etcdctl {
    ctl: EtcdctlChild,
    fifo: std::path::PathBuf,
}

impl Etcdctl {
    fn lock(server: &EtcdServer, name: &str, dir: &std::path::Path, round: usize) -> Etcdctl {
        let fifo = dir.join(format!("release-{round}"));
        let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
        assert!(made.success());
        let script = format!("echo REV=$ETCD_LOCK_REV; read x < '{}'", fifo.display());
        let ctl = EtcdctlChild::spawn(server, &["lock", name, "--", "sh", "-c", &script]);
        Etcdctl { ctl, fifo }
    }

    /// The `ETCD_LOCK_REV` its command printed, waiting up to `wait`.
    fn rev(&mut self, wait: Duration) -> Option<i64> {
        let line = self.ctl.lines.recv_timeout(wait).ok()?;
        Some(line.strip_prefix("REV=").expect(&line).parse().unwrap())
    }

    /// Let its command end: etcdctl then unlocks and exits.
    fn unlock(mut self) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&self.fifo)
            .and_then(|mut f| f.write_all(b"go\n"))
            .expect("write the fifo");
        let status = wait_for("etcdctl exits", Duration::from_secs(10), || {
            self.ctl.child.try_wait().unwrap()
        });
        assert!(status.success(), "etcdctl: {status}");
    }
}
