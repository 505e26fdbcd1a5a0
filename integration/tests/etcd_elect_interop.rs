//! `etcdctl elect` (the Go `concurrency` package) and our election on one
//! name, on Debian's etcd 3.4 and on each vendored etcd version: they never
//! lead together.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use integration::{scale, wait_for, EtcdServer};

/// `etcdctl elect` (Go's concurrency.Election) and ours campaign for one
/// election: never both lead; `etcdctl elect -l` observes our proclaims.
#[test]
fn etcdctl_elect_and_ours_never_lead_together() {
    etcdctl_elect_and_ours_never_lead_together_on(EtcdServer::shared());
}

/// The same on each etcd of the version matrix.
#[test]
fn etcdctl_elect_and_ours_never_lead_together_on_each_etcd_version() {
    for version in integration::etcd_server::VENDORED_VERSIONS {
        etcdctl_elect_and_ours_never_lead_together_on(EtcdServer::shared_version(version));
    }
}

fn etcdctl_elect_and_ours_never_lead_together_on(server: &'static EtcdServer) {
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = election_name("etcdctl");
    let ea = a.election(&name).unwrap();
    let la = ea.campaign(b"ours-1").unwrap();
    let mut observer = Etcdctl::spawn(server, &["elect", "-l", &name]);
    assert_eq!(observer.kv(), (la.holder().to_owned(), "ours-1".to_owned()));

    // etcdctl waits while we lead.
    let mut ctl = Etcdctl::spawn(server, &["elect", &name, "ctl-1"]);
    let both = wait_keys(&facts, &name, 2);
    let ctl_key = both.into_iter().find(|k| k != la.holder()).unwrap();
    la.proclaim(b"ours-2").unwrap();
    assert_eq!(observer.kv(), (la.holder().to_owned(), "ours-2".to_owned()));
    assert!(
        ctl.0.lines.is_empty(),
        "etcdctl must not lead while we do: {:?}",
        ctl.0.lines.try_recv()
    );
    assert!(!la.is_lost());
    la.resign().unwrap();
    // Only now may it lead.
    assert_eq!(ctl.kv(), (ctl_key.clone(), "ctl-1".to_owned()));
    assert_eq!(observer.kv(), (ctl_key.clone(), "ctl-1".to_owned()));
    assert_eq!(ea.leader().unwrap(), Some(info(&ctl_key, b"ctl-1")));

    // We wait while etcdctl leads.
    let eb = b.election(&name).unwrap();
    assert!(eb.try_campaign(b"ours-3").unwrap().is_none());
    let waiter = std::thread::spawn(move || eb.campaign(b"ours-3"));
    wait_keys(&facts, &name, 2);
    assert!(!waiter.is_finished(), "we must not lead while etcdctl does");
    ctl.interrupt_and_wait(); // etcdctl resigns on SIGINT
    let lb = waiter.join().unwrap().unwrap();
    assert_eq!(observer.kv(), (lb.holder().to_owned(), "ours-3".to_owned()));
    assert_eq!(keys(&facts, &name), vec![lb.holder().to_owned()]);
    lb.resign().unwrap();
    observer.interrupt_and_wait();
}

/// `etcdctl elect`, running: its output lines on a channel.
struct Etcdctl(EtcdctlChild);

impl Etcdctl {
    fn spawn(server: &EtcdServer, args: &[&str]) -> Etcdctl {
        Etcdctl(EtcdctlChild::spawn(server, args))
    }

    fn line(&mut self) -> String {
        self.0
            .lines
            .recv_timeout(scale(SOON))
            .expect("etcdctl printed a line")
    }

    /// The next key and value it printed.
    fn kv(&mut self) -> (String, String) {
        (self.line(), self.line())
    }

    /// SIGINT (it resigns or stops observing), then wait until it exits.
    fn interrupt_and_wait(&mut self) {
        let pid = self.0.child.id() as libc::pid_t;
        // SAFETY: kill(2) with the pid of our own unreaped child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
        let status = wait_for("etcdctl exits", SOON, || self.0.child.try_wait().unwrap());
        assert!(status.success(), "etcdctl: {status}");
    }
}
