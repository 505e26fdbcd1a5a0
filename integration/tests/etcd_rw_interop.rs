//! Our read-write lock and keys written exactly as etcd's Go
//! `client/v3/experimental/recipes` `RWMutex` writes them (`<name>/read/`
//! or `<name>/write/` + Unix nanoseconds, value empty, on the session's
//! lease, created by a transaction that requires the key's version to be
//! 0), on one shared server. What a Go peer concludes from the store is
//! computed as its `waitOnLastRev` does: the newest key (by mod revision)
//! below its own revision under `<name>/write` for a reader, under
//! `<name>/` for a writer; none means it holds.

mod etcd_common;

use etcd_common::*;
use recipes_core::store::engine::Role;
use recipes_core::Client as _;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use integration::runtime::block_on;
use integration::{wait_until, EtcdFacts, EtcdServer};
use recipes_etcd::etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};

const BRIEFLY: Duration = Duration::from_millis(300);

/// A key of a Go `RWMutex` peer.
struct GoKey {
    key: String,
    rev: i64,
    write: bool,
}

impl GoKey {
    /// `RLock` (`write`: `Lock`) of a Go peer: its key, as
    /// `newUniqueEphemeralKey` puts it, on a lease of its own.
    fn put(facts: &EtcdFacts, name: &str, write: bool) -> GoKey {
        let side = if write { "write" } else { "read" };
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let key = format!("{name}/{side}/{}", nanos.as_nanos());
        let mut etcd = facts.client();
        let k = key.clone();
        let rev = block_on(async move {
            let lease = etcd.lease_grant(30, None).await?.id();
            let txn = Txn::new()
                .when([Compare::version(k.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    k.as_str(),
                    "",
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let resp = etcd.txn(txn).await?;
            assert!(resp.succeeded(), "a new key");
            Ok::<_, recipes_etcd::etcd_client::Error>(resp.header().unwrap().revision())
        })
        .unwrap();
        GoKey { key, rev, write }
    }

    /// The key this Go peer waits on now (`waitOnLastRev`); `None`: it
    /// holds.
    fn waits_on(&self, facts: &EtcdFacts, name: &str) -> Option<String> {
        let pfx = if self.write {
            format!("{name}/")
        } else {
            format!("{name}/write")
        };
        let last = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Mod, SortOrder::Descend)
            .with_limit(1)
            .with_max_mod_revision(self.rev - 1);
        let mut etcd = facts.client();
        let resp = block_on(async move { etcd.get(pfx, Some(last)).await }).unwrap();
        let kv = resp.kvs().first()?;
        Some(String::from_utf8_lossy(kv.key()).into_owned())
    }

    /// `RUnlock` / `Unlock`: delete the key.
    fn unlock(self, facts: &EtcdFacts) {
        facts.delete(&self.key);
    }
}

fn rw_name(test: &str) -> String {
    lock_name(&format!("rw-go-{test}"))
}

#[test]
fn a_go_writer_excludes_our_reader_and_writer() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = rw_name("writer");
    let go = GoKey::put(&facts, &name, true);
    assert_eq!(go.waits_on(&facts, &name), None, "the Go writer holds");
    let rw = a.rw_lock(&name).unwrap();
    assert!(rw.try_read_for(BRIEFLY).unwrap().is_none());
    assert!(rw.try_write().unwrap().is_none());
    assert_eq!(wait_keys(&facts, &name, 1), vec![go.key.clone()]);
    let rw_b = b.rw_lock(&name).unwrap();
    let reader = std::thread::spawn(move || rw_b.read().map(|g| g.token()));
    wait_keys(&facts, &name, 2);
    assert!(!reader.is_finished(), "our reader waits for the Go writer");
    go.unlock(&facts);
    wait_until("our reader enters", SOON, || reader.is_finished());
    reader.join().unwrap().unwrap();
    wait_keys(&facts, &name, 0);
}

#[test]
fn a_go_reader_shares_with_our_reader_and_excludes_our_writer() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = rw_name("reader");
    let go = GoKey::put(&facts, &name, false);
    assert_eq!(go.waits_on(&facts, &name), None, "the Go reader holds");
    let r = a
        .rw_lock(&name)
        .unwrap()
        .try_read()
        .unwrap()
        .expect("shares");
    let rw_b = b.rw_lock(&name).unwrap();
    assert!(rw_b.try_write_for(BRIEFLY).unwrap().is_none());
    let writer = std::thread::spawn(move || rw_b.write().map(|g| g.token()));
    wait_keys(&facts, &name, 3);
    let roles: Vec<_> = a
        .contenders(&name)
        .unwrap()
        .into_iter()
        .map(|c| (c.holder, c.role))
        .collect();
    let expected = [
        (go.key.clone(), Some(Role::Reader)),
        (r.holder().to_owned(), Some(Role::Reader)),
    ];
    assert_eq!(roles[..2], expected, "{roles:?}");
    assert_eq!(roles[2].1, Some(Role::Writer), "{roles:?}");
    r.release().unwrap();
    wait_keys(&facts, &name, 2);
    assert!(!writer.is_finished(), "our writer waits for the Go reader");
    go.unlock(&facts);
    wait_until("our writer enters", SOON, || writer.is_finished());
    writer.join().unwrap().unwrap();
    wait_keys(&facts, &name, 0);
}

/// A Go reader or writer arriving while ours hold waits on our keys, as
/// its `waitOnLastRev` reads them; a Go reader shares with our reader.
#[test]
fn our_holders_keep_go_peers_out_as_their_rule_says() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = rw_name("ours");
    let rw = a.rw_lock(&name).unwrap();
    let w = rw.write().unwrap();
    let (go_r, go_w) = (
        GoKey::put(&facts, &name, false),
        GoKey::put(&facts, &name, true),
    );
    assert_eq!(go_r.waits_on(&facts, &name).as_deref(), Some(w.holder()));
    assert_eq!(go_w.waits_on(&facts, &name), Some(go_r.key.clone()));
    w.release().unwrap();
    assert_eq!(go_r.waits_on(&facts, &name), None, "the Go reader holds");
    go_r.unlock(&facts);
    go_w.unlock(&facts);

    let r = rw.read().unwrap();
    let go_w = GoKey::put(&facts, &name, true);
    assert_eq!(go_w.waits_on(&facts, &name).as_deref(), Some(r.holder()));
    go_w.unlock(&facts);
    let go_r = GoKey::put(&facts, &name, false);
    assert_eq!(go_r.waits_on(&facts, &name), None, "readers share");
    go_r.unlock(&facts);
    r.release().unwrap();
    wait_keys(&facts, &name, 0);
}

/// A downgrade leaves our write key as it was: a Go writer queued behind
/// it still waits on it until the read guard is released; a Go reader
/// arriving after the downgrade waits on it too (conservative).
#[test]
fn a_downgrade_keeps_a_go_writer_behind_out() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = rw_name("downgrade");
    let rw = a.rw_lock(&name).unwrap();
    let w = rw.write().unwrap();
    let (write_key, write_token) = (w.holder().to_owned(), w.token());
    let before = read_key(&facts, &write_key).unwrap();
    let go_w = GoKey::put(&facts, &name, true);
    let g = w.downgrade().unwrap();
    assert_eq!(g.token(), write_token);
    let after = read_key(&facts, &write_key);
    assert_eq!(after, Some(before), "the write key is untouched");
    assert_eq!(go_w.waits_on(&facts, &name), Some(write_key.clone()));
    g.release().unwrap();
    assert_eq!(go_w.waits_on(&facts, &name), None, "the Go writer holds");
    go_w.unlock(&facts);

    let g = rw.write().unwrap().downgrade().unwrap();
    let go_r = GoKey::put(&facts, &name, false);
    assert_eq!(go_r.waits_on(&facts, &name).as_deref(), Some(g.holder()));
    g.release().unwrap();
    assert_eq!(go_r.waits_on(&facts, &name), None, "the Go reader holds");
    go_r.unlock(&facts);
    wait_keys(&facts, &name, 0);
}
