//! The etcd read-write lock's reader entry: among readers only, its put
//! holds in the one transaction that makes it, with nothing read; any
//! other key under the name — a writer of ours or Go's (downgraded or
//! not), a key Go counts as a writer, another recipe's — sends it to the
//! whole read of the queue, which decides as before.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use integration::EtcdServer;
use recipes_core::Error;

/// Beside readers (ours, Go's) and keys outside the name, a reader holds
/// at once, and its fence is its put's revision.
#[test]
fn a_reader_among_readers_holds_at_its_put() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = lock_name("rw-enter-readers");
    let first = a.rw_lock(&name).unwrap().read().unwrap();
    let go_reader = format!("{name}/read/1700000000000000000");
    for outside in [go_reader.clone(), format!("{name}0"), format!("{name}-x")] {
        put_key(&facts, &outside, "");
    }
    let r = b.rw_lock(&name).unwrap().try_read().unwrap();
    let r = r.expect("a reader among readers holds");
    let (created, _, _) = read_key(&facts, r.holder()).expect("its key");
    assert_eq!(r.token().get(), created as u64, "the put's revision");
    for g in [first, r] {
        g.release().unwrap();
    }
    for outside in [go_reader, format!("{name}0"), format!("{name}-x")] {
        delete_key(&facts, &outside);
    }
    wait_keys(&facts, &name, 0);
}

/// Every key under the name outside `read/` counts as a writer, at every
/// edge of the ranges the entry checks: a reader waits behind it, and
/// holds once it is gone. A key of a lock's layout is refused.
#[test]
fn any_key_but_a_readers_keeps_a_reader_out() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = lock_name("rw-enter-writers");
    let rw = a.rw_lock(&name).unwrap();
    let edges = [
        "", "other", "read", "read0", "readx", "write", "write/", "write/1", "write0", "writex",
        "zzz",
    ];
    for edge in edges {
        let key = format!("{name}/{edge}");
        put_key(&facts, &key, "");
        assert!(rw.try_read().unwrap().is_none(), "behind {key:?}");
        assert_eq!(keys(&facts, &name), vec![key.clone()], "nothing left");
        delete_key(&facts, &key);
        rw.try_read().unwrap().expect("alone").release().unwrap();
    }
    let lock_key = format!("{name}/abc");
    put_key(&facts, &lock_key, "");
    let e = rw.try_read().unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert!(e.to_string().contains("a lock or election"), "{e}");
    assert_eq!(keys(&facts, &name), vec![lock_key.clone()]);
    delete_key(&facts, &lock_key);
    wait_keys(&facts, &name, 0);
}

/// A reader arriving while a writer holds waits; once that writer has
/// downgraded, a new reader enters beside it (its marker read with the
/// queue), and a new writer still waits.
#[test]
fn a_new_reader_enters_beside_a_downgraded_writer_only() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let clients: Vec<_> = (0..3).map(|_| connect(server)).collect();
    let name = lock_name("rw-enter-downgraded");
    let w = clients[0].rw_lock(&name).unwrap().write().unwrap();
    let write_token = w.token();
    let rw_r = clients[1].rw_lock(&name).unwrap();
    assert!(rw_r.try_read().unwrap().is_none(), "a live writer holds");
    let g = w.downgrade().unwrap();
    let r = rw_r
        .try_read()
        .unwrap()
        .expect("beside a downgraded writer");
    assert!(r.token() > write_token);
    let rw_w = clients[2].rw_lock(&name).unwrap();
    assert!(rw_w.try_write().unwrap().is_none(), "readers hold");
    g.release().unwrap();
    assert!(rw_w.try_write().unwrap().is_none(), "a reader holds");
    r.release().unwrap();
    rw_w.try_write().unwrap().expect("alone").release().unwrap();
    wait_keys(&facts, &name, 0);
}
