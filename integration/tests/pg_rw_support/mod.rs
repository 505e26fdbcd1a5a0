//! What the read-write lock's tests share: a mode, a server's facts in
//! that mode, guards taken on threads of their own.

use std::thread;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, Sender};
use integration::{scale, wait_until, PgFacts, PgServer};
use recipes_core::{BootInstant, Error, FencingToken};
use recipes_pg::{PgClient, RwLock};

use crate::pg_common::TTL;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Lease,
    Session,
}

pub fn client_of(url: &str, mode: Mode, ttl: Duration) -> PgClient {
    let b = PgClient::builder(url)
        .ttl(ttl)
        .connect_timeout(Duration::from_secs(2));
    match mode {
        Mode::Lease => b.connect(),
        Mode::Session => b.session_mode().connect(),
    }
    .expect("connect")
}

/// A server, its facts, and clients of one mode.
pub struct Rig<'s> {
    pub server: &'s PgServer,
    pub facts: PgFacts,
    pub mode: Mode,
}

impl<'s> Rig<'s> {
    pub fn on(server: &'s PgServer, mode: Mode) -> Rig<'s> {
        Rig {
            facts: PgFacts::new(server.addr()),
            server,
            mode,
        }
    }

    pub fn client(&self) -> PgClient {
        client_of(&self.server.url(), self.mode, TTL)
    }

    /// How many wait for `name` (queued rows not holding, or backends
    /// waiting for its key), given that `holding` hold it.
    pub fn waiting(&self, name: &str, holding: usize) -> usize {
        match self.mode {
            Mode::Lease => self.facts.entries_under(name).len().saturating_sub(holding),
            Mode::Session => self.facts.advisory(name, false).len(),
        }
    }

    pub fn wait_for_waiters(&self, name: &str, holding: usize, n: usize) {
        wait_until(
            &format!("{n} wait for {name}"),
            scale(Duration::from_secs(10)),
            || self.waiting(name, holding) == n,
        );
    }

    /// What the store holds of `name`: its rows, or its key's holders and
    /// waiters.
    pub fn left(&self, name: &str) -> Vec<String> {
        match self.mode {
            Mode::Lease => self.facts.entries_under(name),
            Mode::Session => {
                let mut all = self.facts.advisory(name, true);
                all.extend(self.facts.advisory(name, false));
                all
            }
        }
    }
}

/// A guard taken on a thread of its own: its token once it holds; it
/// releases when told (or when the test drops the sender).
pub struct Taker {
    got: Receiver<FencingToken>,
    release: Sender<()>,
}

pub fn take(rw: RwLock, write: bool) -> Taker {
    let (tx, got) = bounded(1);
    let (release, rx) = bounded::<()>(1);
    thread::spawn(move || {
        if write {
            let g = rw.write().expect("write");
            tx.send(g.token()).ok();
            let _ = rx.recv();
            g.release().ok();
        } else {
            let g = rw.read().expect("read");
            tx.send(g.token()).ok();
            let _ = rx.recv();
            g.release().ok();
        }
    });
    Taker { got, release }
}

impl Taker {
    pub fn holds(&self, within: Duration) -> FencingToken {
        self.got.recv_timeout(scale(within)).expect("it holds")
    }

    /// It does not hold for `for_` (a property over a span, not a wait).
    pub fn does_not_hold_for(&self, for_: Duration) {
        if let Ok(t) = self.got.recv_timeout(for_) {
            panic!("it held (token {t}) while it should wait");
        }
    }

    pub fn release(self) {
        self.release.send(()).ok();
    }
}

pub fn invalid<T: std::fmt::Debug>(what: &str, r: recipes_core::Result<T>) -> String {
    match r {
        Err(Error::InvalidArgument(message)) => message,
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

/// Either side's guard, for the fault tests.
pub enum Held {
    R(recipes_pg::RwLockReadGuard),
    W(recipes_pg::RwLockWriteGuard),
}

impl Held {
    /// Take the write (`write`) or the read side of `rw`.
    pub fn take(rw: &RwLock, write: bool) -> Held {
        match write {
            true => Held::W(rw.write().unwrap()),
            false => Held::R(rw.read().unwrap()),
        }
    }

    pub fn facts(&self) -> (String, FencingToken, recipes_core::LossSignal) {
        match self {
            Held::R(g) => (g.holder().to_owned(), g.token(), g.lost().clone()),
            Held::W(g) => (g.holder().to_owned(), g.token(), g.lost().clone()),
        }
    }

    pub fn valid_until(&self) -> BootInstant {
        match self {
            Held::R(g) => g.valid_until(),
            Held::W(g) => g.valid_until(),
        }
        .expect("a deadline")
    }

    pub fn put(&self, key: &str) -> recipes_core::Result<()> {
        match self {
            Held::R(g) => g.put(key, b"late"),
            Held::W(g) => g.put(key, b"late"),
        }
    }
}

/// The holder's end as the store sees it: lease mode, its session stops
/// renewing (as a crashed process's); session mode, its backend is
/// terminated.
pub fn crash(rig: &Rig<'_>, holder_client: &PgClient, holder: &str) {
    match rig.mode {
        Mode::Lease => holder_client.orphan(),
        Mode::Session => rig.facts.terminate(holder),
    }
}
