//! A lock, a read-write lock or a permit on the name of another recipe
//! whose members or key stand there (a barrier, a double barrier, a shared
//! counter) is refused naming it, and writes nothing.

use std::time::Duration;

use integration::scale;
use recipes_core::Client as _;
use recipes_redis::RedisClient;

use crate::{connect, refused, Lab, NS};

/// A writer, a reader and a mutex on `name`, which holds `theirs`: each
/// refused naming it, with nothing written.
fn refuses_locks(lab: &Lab, client: &RedisClient, name: &str, theirs: &str) {
    let before = lab.keys_of(name);
    let rw = client.rw_lock(name).unwrap();
    refused("a writer", theirs, rw.try_write().map(|g| g.is_some()));
    refused("a reader", theirs, rw.try_read().map(|g| g.is_some()));
    let m = client.mutex(name).unwrap();
    refused("a mutex", theirs, m.try_lock().map(|g| g.is_some()));
    assert_eq!(lab.keys_of(name), before, "the refusals wrote nothing");
}

/// A read-write lock or a mutex on the name of a tied barrier that is set
/// (a live member of role `barrier` in the name's queue) is refused naming
/// the barrier, and writes nothing; the barrier, removed, frees the name.
#[test]
fn a_lock_on_a_set_barriers_name_is_refused_naming_the_barrier() {
    let lab = Lab::new();
    let client = connect(lab.server);
    let name = "/qf/barrier";
    let barrier = client.barrier(name).unwrap().tied_to_session();
    barrier.set().unwrap();
    refuses_locks(&lab, &client, name, "a barrier");
    barrier.remove().unwrap();
    let g = client.rw_lock(name).unwrap().try_write().unwrap();
    g.expect("the name is free again").release().unwrap();
    client.close().unwrap();
}

/// A permit of a semaphore whose permits' queue holds a set barrier (one
/// named `<sem>/leases`) is refused naming it: counted as a permit, the
/// barrier's member would hold the permit, and the waiting permit would
/// keep the barrier from being removed.
#[test]
fn a_permit_beside_a_barrier_in_its_queue_is_refused_naming_it() {
    let lab = Lab::new();
    let client = connect(lab.server);
    let sem = client.semaphore("/qf/sem", 1).unwrap();
    sem.acquire().unwrap().release().unwrap();
    let barrier = client.barrier("/qf/sem/leases").unwrap().tied_to_session();
    barrier.set().unwrap();
    refused(
        "a permit",
        "a barrier",
        sem.try_acquire().map(|g| g.is_some()),
    );
    barrier.remove().unwrap();
    sem.try_acquire()
        .unwrap()
        .expect("free again")
        .release()
        .unwrap();
    client.close().unwrap();
}

/// A lock, a read-write lock or an election on the name of a plain
/// barrier that is set, or of a shared counter, is refused naming it, and
/// writes nothing: their names hold no queue, only their one key.
#[test]
fn a_lock_on_a_plain_barriers_or_a_counters_name_is_refused_naming_it() {
    let lab = Lab::new();
    let client = connect(lab.server);
    let (plain, counted) = ("/qf/plain", "/qf/counted");
    let barrier = client.barrier(plain).unwrap();
    barrier.set().unwrap();
    client.counter(counted).unwrap().add(1).unwrap();
    refuses_locks(&lab, &client, plain, "a barrier");
    refuses_locks(&lab, &client, counted, "a shared counter");
    barrier.remove().unwrap();
    let g = client.mutex(plain).unwrap().try_lock().unwrap();
    g.expect("the name is free again").release().unwrap();
    client.close().unwrap();
}

/// A read-write lock or a mutex on the name of a double barrier with a
/// member inside is refused naming the double barrier, and writes
/// nothing; once the members leave, the name is free.
#[test]
fn a_lock_on_a_double_barriers_name_is_refused_naming_it() {
    let lab = Lab::new();
    let (first, second) = (connect(lab.server), connect(lab.server));
    let name = "/qf/double";
    let queue = format!("{NS}q:{name}");
    let inside = || lab.server.cmd::<i64>(&["ZCARD", &queue]);
    let within = scale(Duration::from_secs(30));
    std::thread::scope(|s| {
        let entering = s.spawn(|| {
            let barrier = first.double_barrier(name, 2).unwrap();
            barrier
                .enter_timeout(within)
                .unwrap()
                .expect("the second member comes")
        });
        let bound = scale(Duration::from_secs(10));
        integration::wait_until("the first member inside", bound, || inside() == 1);
        refuses_locks(&lab, &second, name, "a double barrier");
        let barrier = second.double_barrier(name, 2).unwrap();
        let other = barrier.enter_timeout(within).unwrap().expect("both inside");
        let member = entering.join().unwrap();
        s.spawn(|| member.leave().unwrap());
        other.leave().unwrap();
    });
    let bound = scale(Duration::from_secs(10));
    integration::wait_until("the double barrier gone", bound, || inside() == 0);
    let g = second.rw_lock(name).unwrap().try_write().unwrap();
    g.expect("the name is free again").release().unwrap();
    first.close().unwrap();
    second.close().unwrap();
}
