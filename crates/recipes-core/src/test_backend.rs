//! An in-memory backend for unit tests of the front end. The only fake
//! backend in the project: everything else runs against real servers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex as PlMutex};

use crate::backend::{FencedLease, HeldLease, MutexBackend};
use crate::clock::{system_clock, BootInstant};
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::lease::SessionLease;
use crate::loss::{LossReason, LossSignal, LossTrigger};
use crate::runtime::Runtime;

#[derive(Debug, Default)]
struct State {
    holder: Option<u64>,
    last_token: u64,
    released: Vec<u64>,
}

#[derive(Debug)]
struct Shared {
    state: PlMutex<State>,
    freed: Condvar,
}

/// A process-local mutex with the backend contract.
#[derive(Debug, Clone)]
pub(crate) struct MemoryMutex {
    shared: Arc<Shared>,
    rt: Runtime,
    session: Arc<SessionLease>,
    /// Background releases wait for a permit here (tests hold it back to
    /// prove that `Drop` does not block).
    release_gate: Arc<tokio::sync::Semaphore>,
}

impl MemoryMutex {
    pub(crate) fn new() -> MemoryMutex {
        MemoryMutex::with_release_gate(tokio::sync::Semaphore::MAX_PERMITS)
    }

    /// Background releases wait until the test adds permits to the gate.
    pub(crate) fn with_held_back_releases() -> (MemoryMutex, Arc<tokio::sync::Semaphore>) {
        let m = MemoryMutex::with_release_gate(0);
        let gate = m.release_gate.clone();
        (m, gate)
    }

    fn with_release_gate(permits: usize) -> MemoryMutex {
        let rt = Runtime::new("memory-backend").unwrap();
        let session =
            SessionLease::start("memory", rt.loss_root(), system_clock(), Duration::ZERO).unwrap();
        session.acknowledged(BootInstant::now(), Duration::from_secs(3600));
        MemoryMutex {
            shared: Arc::new(Shared {
                state: PlMutex::new(State::default()),
                freed: Condvar::new(),
            }),
            rt,
            session: Arc::new(session),
            release_gate: Arc::new(tokio::sync::Semaphore::new(permits)),
        }
    }

    pub(crate) fn released(&self) -> Vec<u64> {
        self.shared.state.lock().released.clone()
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        &self.rt
    }
}

fn free(shared: &Shared, token: u64, trigger: &LossTrigger) {
    let mut st = shared.state.lock();
    if st.holder == Some(token) {
        st.holder = None;
        st.released.push(token);
    }
    drop(st);
    trigger.fire(LossReason::Released);
    shared.freed.notify_all();
}

#[derive(Debug)]
pub(crate) struct MemoryLease {
    token: u64,
    holder: String,
    trigger: LossTrigger,
    signal: LossSignal,
    owner: MemoryMutex,
}

impl MemoryLease {
    pub(crate) fn trigger(&self) -> &LossTrigger {
        &self.trigger
    }
}

impl HeldLease for MemoryLease {
    fn loss_signal(&self) -> &LossSignal {
        &self.signal
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    fn release(self) -> Result<()> {
        free(&self.owner.shared, self.token, &self.trigger);
        Ok(())
    }

    fn release_in_background(self) {
        let gate = self.owner.release_gate.clone();
        let rt = self.owner.rt.clone();
        rt.spawn(async move {
            let _permit = gate.acquire().await;
            free(&self.owner.shared, self.token, &self.trigger);
        });
    }
}

impl FencedLease for MemoryLease {
    fn token(&self) -> FencingToken {
        FencingToken(self.token)
    }
}

impl MutexBackend for MemoryMutex {
    type Lease = MemoryLease;

    fn name(&self) -> &str {
        "/memory"
    }

    fn runtime(&self) -> &Runtime {
        &self.rt
    }

    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<MemoryLease>> {
        if self.session.is_lost() {
            return Err(Error::SessionExpired);
        }
        let mut st = self.shared.state.lock();
        loop {
            if st.holder.is_none() {
                st.last_token += 1;
                let token = st.last_token;
                st.holder = Some(token);
                let trigger = self.session.trigger().child();
                return Ok(Some(MemoryLease {
                    token,
                    holder: format!("/memory/lock-{token}"),
                    signal: trigger.signal(),
                    trigger,
                    owner: self.clone(),
                }));
            }
            match deadline {
                Some(d) => {
                    if self.shared.freed.wait_until(&mut st, d).timed_out() && st.holder.is_some() {
                        return Ok(None);
                    }
                }
                None => self.shared.freed.wait(&mut st),
            }
        }
    }
}

#[cfg(test)]
mod front_end_tests {
    use super::*;
    use crate::mutex::{Mutex, MutexGuard};

    fn assert_guard_traits<T: Send + 'static>() {}

    #[test]
    fn guards_are_send_and_static() {
        assert_guard_traits::<MutexGuard<MemoryLease>>();
    }

    #[test]
    fn try_lock_fails_while_held_and_succeeds_when_free() {
        let m = Mutex::from_backend(MemoryMutex::new());
        let g = m.try_lock().unwrap().expect("free");
        assert!(m.try_lock().unwrap().is_none());
        let t0 = Instant::now();
        assert!(m.try_lock_for(Duration::from_millis(30)).unwrap().is_none());
        // A lower bound: never scaled.
        assert!(t0.elapsed() >= Duration::from_millis(30));
        assert!(m
            .try_lock_until(Instant::now() + Duration::from_millis(5))
            .unwrap()
            .is_none());
        g.release().unwrap();
        assert!(m.try_lock().unwrap().is_some());
    }

    #[test]
    fn tokens_strictly_increase_across_holders() {
        let m = Mutex::from_backend(MemoryMutex::new());
        let mut last = FencingToken(0);
        for _ in 0..5 {
            let g = m.lock().unwrap();
            assert!(g.token() > last);
            last = g.token();
            g.release().unwrap();
        }
    }

    #[test]
    fn a_blocked_lock_proceeds_when_the_holder_releases() {
        let m = Arc::new(Mutex::from_backend(MemoryMutex::new()));
        let g = m.lock().unwrap();
        let m2 = m.clone();
        let waiter = std::thread::spawn(move || m2.lock().map(|g| g.token()));
        let first = g.token();
        g.release().unwrap();
        let second = waiter.join().unwrap().unwrap();
        assert!(second > first);
    }

    #[test]
    fn drop_hands_the_release_over_and_never_blocks() {
        let (backend, gate) = MemoryMutex::with_held_back_releases();
        let m = Arc::new(Mutex::from_backend(backend));
        let g = m.lock().unwrap();
        let signal = g.lost().clone();
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            drop(g);
            let _ = done_tx.send(());
        });
        // Drop returned although the release cannot run yet.
        done_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("drop returned while the release was held back");
        assert!(
            m.try_lock().unwrap().is_none(),
            "the release has not run yet"
        );
        assert!(!signal.is_lost());
        gate.add_permits(1);
        assert_eq!(
            signal.wait_timeout(Duration::from_secs(5)),
            Some(LossReason::Released)
        );
        let next = m.try_lock_for(Duration::from_secs(5)).unwrap();
        assert!(
            next.is_some(),
            "the lock was freed by the background release"
        );
        assert_eq!(m.backend().released().len(), 1);
    }

    #[test]
    fn check_and_valid_until_follow_the_loss_signal() {
        let m = Mutex::from_backend(MemoryMutex::new());
        let g = m.lock().unwrap();
        g.check().unwrap();
        let before = g.valid_until().expect("a deadline is known");
        assert!(before > BootInstant::now() + Duration::from_secs(3000));
        g.lease().trigger().fire(LossReason::Deleted);
        match g.check() {
            Err(Error::LeaseLost { reason }) => assert_eq!(reason, LossReason::Deleted),
            other => panic!("expected LeaseLost, got {other:?}"),
        }
        assert!(g.is_lost());
        assert!(g.valid_until().unwrap() <= BootInstant::now());
        assert!(g.holder().starts_with("/memory/lock-"));
    }

    #[test]
    fn closing_the_client_fires_every_guard() {
        let m = Mutex::from_backend(MemoryMutex::new());
        let g = m.lock().unwrap();
        m.backend().runtime().shutdown(Duration::from_secs(1));
        assert_eq!(
            g.lost().wait_timeout(Duration::from_secs(5)),
            Some(LossReason::Closed)
        );
        assert!(matches!(g.check(), Err(Error::LeaseLost { .. })));
    }
}
