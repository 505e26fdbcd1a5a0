//! A PostgreSQL name passing between recipes: a released lock's name taken
//! over by a semaphore, raced by a mutex entering it; the names inside a
//! semaphore's layout; session mode's names of one advisory key.

mod pg_common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use integration::pg_facts::advisory_holder;
use integration::{PgFacts, PgServer};
use pg_common::*;
use recipes_core::{Client, Error};

/// A released lock's name becomes a semaphore's with its fence kept, so a
/// fence minted on the name later (none is, while it is a semaphore's)
/// could never repeat an earlier one.
#[test]
fn a_semaphore_on_a_released_locks_name_keeps_its_fence() {
    let server = PgServer::shared();
    let c = connect(&server.url(), Duration::from_secs(10)).unwrap();
    let n = name("taken-over");
    for _ in 0..3 {
        c.mutex(&n).unwrap().lock().unwrap().release().unwrap();
    }
    let row = |n: &str| {
        server.sql(&format!(
            "SELECT kind || ' ' || fence || ' ' || coalesce(permits::text, '-') \
             FROM recipes.names WHERE name = '{n}'"
        ))
    };
    let before = row(&n);
    let fence = before.split_whitespace().nth(1).unwrap().to_owned();
    assert_eq!(before.trim(), format!("lock {fence} -"));
    let s = c.semaphore(&n, 2).unwrap();
    assert_eq!(row(&n).trim(), format!("semaphore {fence} 2"));
    s.acquire().unwrap().release().unwrap();
    match c.mutex(&n).and_then(|m| m.try_lock()) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("semaphore"), "{m}"),
        other => panic!("a mutex on the semaphore's name: {other:?}"),
    }
    c.close().unwrap();
    assert!(PgFacts::new(server.addr()).entries_under(&n).is_empty());
}

/// A mutex entering a released lock's name while a semaphore takes it over:
/// the row lock on the name orders them, so exactly one wins: the mutex
/// holds (it is held until the semaphore's answer is in) and the semaphore
/// is refused, or the semaphore has the name and the mutex is refused.
#[test]
fn a_mutex_and_a_semaphore_racing_for_a_released_name_never_both_win() {
    let server = PgServer::shared();
    let (a, b) = (
        connect(&server.url(), Duration::from_secs(10)).unwrap(),
        connect(&server.url(), Duration::from_secs(10)).unwrap(),
    );
    let (mut locks, mut semaphores) = (0, 0);
    let facts = PgFacts::new(server.addr());
    for _ in 0..40 {
        let n = name("race");
        a.mutex(&n)
            .unwrap()
            .try_lock()
            .unwrap()
            .unwrap()
            .release()
            .unwrap();
        let start = Arc::new(Barrier::new(2));
        let answered = Arc::new(Barrier::new(2));
        let mutex = {
            let (a, n, start, answered) = (a.clone(), n.clone(), start.clone(), answered.clone());
            std::thread::spawn(move || {
                start.wait();
                let got = match a.mutex(&n).and_then(|m| m.try_lock()) {
                    Ok(Some(g)) => Some(g),
                    Err(Error::InvalidArgument(m)) if m.contains("semaphore") => None,
                    other => panic!("the mutex: {other:?}"),
                };
                answered.wait();
                got.map(|g| g.release().unwrap()).is_some()
            })
        };
        start.wait();
        let sem_won = match b.semaphore(&n, 2) {
            Ok(_) => true,
            Err(Error::InvalidArgument(m)) if m.contains("lock") => false,
            Err(e) => panic!("the semaphore: {e:?}"),
        };
        answered.wait();
        let lock_won = mutex.join().unwrap();
        assert!(
            lock_won != sem_won,
            "{n}: lock {lock_won}, semaphore {sem_won}"
        );
        assert!(facts.entries_under(&n).is_empty(), "{n}: entries left");
        locks += usize::from(lock_won);
        semaphores += usize::from(sem_won);
    }
    eprintln!("the mutex won {locks} times, the semaphore {semaphores}");
    a.close().unwrap();
    b.close().unwrap();
}

/// A lock or election named `<sem>/locks` or `<sem>/leases` is refused
/// while `<sem>` is a semaphore, saying so, and writes nothing; the
/// semaphore's own mutex and permits, on those names, still work.
#[test]
fn a_lock_or_election_inside_a_semaphores_layout_is_refused_and_writes_nothing() {
    let server = PgServer::shared();
    let c = connect(&server.url(), Duration::from_secs(10)).unwrap();
    let sem = name("layout");
    let s = c.semaphore(&sem, 2).unwrap();
    let rows = || {
        server.sql(&format!(
            "SELECT count(*) FROM recipes.names WHERE name LIKE '{sem}/%'"
        ))
    };
    for part in ["locks", "leases"] {
        let inside = format!("{sem}/{part}");
        let refused = [
            c.mutex(&inside).and_then(|m| m.try_lock()).map(drop),
            c.election(&inside)
                .and_then(|e| e.try_campaign(b"v"))
                .map(drop),
        ];
        refused_inside(&inside, refused);
        assert_eq!(rows().trim(), "0", "{inside}: the refusal wrote a row");
    }
    let p = s.acquire().unwrap();
    let q = s.try_acquire().unwrap().expect("the second permit");
    p.release().unwrap();
    q.release().unwrap();
    c.close().unwrap();
    assert!(PgFacts::new(server.addr()).entries_under(&sem).is_empty());
}

/// In session mode a semaphore's permits are advisory keys of their own
/// (`<sem>/leases/<i>`): a mutex named like one, which would share its
/// key, is refused as `<sem>/locks` and `<sem>/leases` are, and so is a
/// transaction lock (the session-mode mutex's key) on any of them.
#[test]
fn session_mode_names_of_a_semaphores_keys_are_refused() {
    let server = PgServer::shared();
    let c = session(&server.url(), Duration::from_secs(30)).unwrap();
    let sem = name("session-layout");
    let permit = c.semaphore(&sem, 2).unwrap().acquire().unwrap();
    for inside in ["locks", "leases", "leases/0", "leases/1"] {
        let inside = format!("{sem}/{inside}");
        let refused = [
            c.mutex(&inside).and_then(|m| m.try_lock()).map(drop),
            c.with_xact_lock(&inside, Some(Duration::ZERO), |_, _| Ok(()))
                .map(drop),
        ];
        refused_inside(&inside, refused);
    }
    // A name that only looks like a permit's, under no semaphore, is free.
    let free = format!("{}/leases/0", name("no-semaphore"));
    c.mutex(&free).unwrap().lock().unwrap().release().unwrap();
    let second = c.semaphore(&sem, 2).unwrap().try_acquire().unwrap();
    second.expect("both permits still admit").release().unwrap();
    permit.release().unwrap();
    c.close().unwrap();
}

/// Session mode locks a name's `hashtext`, so two names of one hash are
/// one lock: a multi-lock over both would wait for itself, a `lock()` that
/// never returns. It is refused as it is made, with nothing written, and a
/// multi-lock with only one of them takes it.
#[test]
fn a_session_mode_multi_lock_over_two_names_of_one_key_is_refused() {
    let server = PgServer::shared();
    // Found by a search of the server's `hashtext` over `/multi/<i>`.
    let (a, b) = ("/multi/18441", "/multi/38511");
    let same = format!("SELECT hashtext('{a}') = hashtext('{b}')");
    assert_eq!(server.sql(&same).trim(), "t", "the two names' keys collide");
    let rows = format!("SELECT count(*) FROM recipes.names WHERE name IN ('{a}', '{b}')");
    let c = session(&server.url(), Duration::from_secs(30)).unwrap();
    let before = server.sql(&rows);
    let other = name("multi-keys");
    for names in [vec![a, b], vec![b, other.as_str(), a]] {
        match c.multi_lock(&names) {
            Err(Error::InvalidArgument(m)) => {
                assert!(
                    m.contains(a) && m.contains(b) && m.contains("one key"),
                    "{m}"
                )
            }
            Ok(_) => panic!("{names:?}: a multi-lock over two names of one key"),
            Err(e) => panic!("{names:?}: {e:?}"),
        }
    }
    assert_eq!(server.sql(&rows), before, "nothing written");
    let both = c.multi_lock(&[b, &other]).unwrap().lock().unwrap();
    assert!(both.token(b).is_some() && both.token(&other).is_some());
    both.release().unwrap();
    c.close().unwrap();
}

/// A session-mode permit's fenced write asks that its semaphore's
/// permits' row be still session mode's: once the rows were lost (deleted
/// here, as a truncate would) and a lease-mode client of the semaphore
/// made them again as its own, the old permit's writes are refused. (Its
/// check and its heartbeats asked only that the row exist: both modes'
/// permits wrote at once.)
#[test]
fn a_session_permits_write_is_refused_once_its_row_is_another_modes() {
    let server = PgServer::shared();
    let sem = name("permit-row-kind");
    let resource = format!("{sem}-resource");
    let session = session(&server.url(), Duration::from_secs(30)).unwrap();
    let permit = session.semaphore(&sem, 1).unwrap().acquire().unwrap();
    permit.put(&resource, b"before").expect("it holds");
    server.sql(&format!(
        "DELETE FROM recipes.names WHERE name IN ('{sem}', '{sem}/leases')"
    ));
    let lease = connect(&server.url(), Duration::from_secs(30)).unwrap();
    let other = lease.semaphore(&sem, 1).unwrap().acquire().unwrap();
    let kind = format!("SELECT kind FROM recipes.names WHERE name = '{sem}/leases'");
    assert_eq!(server.sql(&kind).trim(), "permits", "lease mode's row now");
    let refused = permit.put(&resource, b"after");
    assert!(
        matches!(refused, Err(Error::FenceRejected { .. })),
        "{refused:?}"
    );
    other.release().unwrap();
    drop(permit);
    lease.close().unwrap();
    session.close().unwrap();
}

/// A session-mode permit lost to a heartbeat (its semaphore's permits' row
/// gone) leaves its lock connection unused: the client's next acquisition
/// takes the key on another backend, where a late write of the lost permit
/// cannot pass for its own (a permit's check asks only that its backend
/// hold the key).
#[test]
fn a_lost_session_permits_connection_takes_no_other_acquisition() {
    let server = PgServer::shared();
    let sem = name("permit-spent");
    let c = session(&server.url(), Duration::from_secs(3)).unwrap();
    let permit = c.semaphore(&sem, 1).unwrap().acquire().unwrap();
    let first = advisory_holder(permit.holder()).map(|(_, pid)| pid);
    server.sql(&format!(
        "DELETE FROM recipes.names WHERE name = '{sem}/leases'"
    ));
    let bound = integration::scale(Duration::from_secs(10));
    integration::wait_until("a heartbeat finds the row gone", bound, || {
        permit.lost().is_lost()
    });
    drop(permit);
    let next = c.semaphore(&sem, 1).unwrap().acquire().unwrap();
    assert_ne!(
        advisory_holder(next.holder()).map(|(_, pid)| pid),
        first,
        "the lost permit's backend"
    );
    next.release().unwrap();
    c.close().unwrap();
}

/// Each of `results` (of a recipe on `inside`) is the refusal of a name
/// inside a semaphore's layout.
fn refused_inside<const N: usize>(inside: &str, results: [recipes_core::Result<()>; N]) {
    for r in results {
        match r {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("part of the semaphore"), "{m}"),
            other => panic!("{inside}: {other:?}"),
        }
    }
}
