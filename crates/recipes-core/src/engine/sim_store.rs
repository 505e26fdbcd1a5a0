//! An in-memory store and its driver for the engine's simulation: entries
//! ordered by creation, ephemeral to a session, with seeded faults in every
//! reply (delays, lost replies, failed reads, spurious wake-ups).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::decide::{Role, Rule};
use super::driver::{ContendDriver, Listing};
use crate::error::{Error, Result};
use crate::loss::{LossReason, LossSignal, LossTrigger};

/// splitmix64: small, seedable, good enough to pick schedules.
#[derive(Debug)]
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `percent` / 100.
    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// A number in `0..n`.
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Debug)]
struct Entry {
    session: u64,
    ticket: u64,
    role: Role,
}

#[derive(Debug)]
struct SessionState {
    trigger: LossTrigger,
}

#[derive(Debug)]
pub(super) struct StoreState {
    pub(super) rng: Rng,
    revision: i64,
    /// By create revision: the queue order.
    entries: BTreeMap<i64, Entry>,
    sessions: BTreeMap<u64, SessionState>,
    next_id: u64,
    /// How often (in percent) each kind of fault strikes.
    pub(super) fault_percent: u64,
}

/// A runtime on tokio's paused clock, for one schedule.
pub(super) fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// The shared store: its state and a notification on every deletion.
#[derive(Debug, Clone)]
pub(super) struct Store {
    pub(super) state: Arc<Mutex<StoreState>>,
    deleted: Arc<Notify>,
}

impl Store {
    pub(super) fn new(seed: u64, fault_percent: u64) -> Store {
        Store {
            state: Arc::new(Mutex::new(StoreState {
                rng: Rng::new(seed),
                revision: 0,
                entries: BTreeMap::new(),
                sessions: BTreeMap::new(),
                next_id: 1,
                fault_percent,
            })),
            deleted: Arc::new(Notify::new()),
        }
    }

    /// End a session as the server would: its entries go, its loss fires.
    pub(super) fn expire(&self, session: u64) {
        let mut st = self.state.lock();
        if let Some(s) = st.sessions.remove(&session) {
            s.trigger.fire(LossReason::SessionExpired);
            st.revision += 1;
            st.entries.retain(|_, e| e.session != session);
            drop(st);
            self.deleted.notify_waiters();
        }
    }

    /// The client's local deadline passed (a partition, a pause): its loss
    /// fires now, while the server keeps the session's entries a little
    /// longer before it expires them.
    pub(super) fn cut_off(&self, session: u64, server_lag: Duration) {
        if let Some(s) = self.state.lock().sessions.get(&session) {
            s.trigger.fire(LossReason::DeadlineExpired);
        }
        let store = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(server_lag).await;
            store.expire(session);
        });
    }

    pub(super) fn live_sessions(&self) -> Vec<u64> {
        self.state.lock().sessions.keys().copied().collect()
    }

    pub(super) fn entry_count(&self) -> usize {
        self.state.lock().entries.len()
    }

    /// Whether a writer's entry created before `created` is in the store.
    pub(super) fn writer_before(&self, created: i64) -> bool {
        let st = self.state.lock();
        st.entries
            .range(..created)
            .any(|(_, e)| e.role != Role::Reader)
    }

    /// Delete the entries `gone` picks; bump the revision.
    fn delete_where(&self, mut gone: impl FnMut(&Entry) -> bool) {
        let mut st = self.state.lock();
        let before = st.entries.len();
        st.entries.retain(|_, e| !gone(e));
        if st.entries.len() != before {
            st.revision += 1;
            drop(st);
            self.deleted.notify_waiters();
        }
    }

    /// Release a held entry.
    pub(super) fn release(&self, created: i64) {
        let mut st = self.state.lock();
        if st.entries.remove(&created).is_some() {
            st.revision += 1;
            drop(st);
            self.deleted.notify_waiters();
        }
    }

    /// A reply's latency: usually none, sometimes up to 20 ms.
    async fn latency(&self) {
        let ms = {
            let mut st = self.state.lock();
            let p = st.fault_percent;
            if st.rng.chance(p * 3) {
                st.rng.below(20)
            } else {
                0
            }
        };
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        tokio::task::yield_now().await;
    }

    fn fault(&self) -> bool {
        let mut st = self.state.lock();
        let p = st.fault_percent;
        st.rng.chance(p)
    }
}

/// A fence is either the confirming read's revision (etcd's mutex) or our
/// entry's create revision (ZooKeeper's czxid).
#[derive(Debug, Clone, Copy)]
pub(super) enum FenceBy {
    ReadRevision,
    CreateRevision,
}

/// One contender process's driver: its own session, replaced after expiry.
#[derive(Debug)]
pub(super) struct SimDriver {
    pub(super) store: Store,
    pub(super) rule: Rule,
    /// The role of the entries this contender creates next.
    pub(super) role: Mutex<Role>,
    pub(super) fence_by: FenceBy,
    /// The current session: id and loss signal.
    session: Mutex<Option<(u64, LossSignal)>>,
}

#[derive(Debug)]
pub(super) struct SimTicket {
    store: Store,
    id: u64,
}

#[derive(Debug)]
pub(super) struct SimEntry {
    id: (i64, Role),
}

/// What the simulation's holder gets.
#[derive(Debug)]
pub(super) struct SimWon {
    pub(super) created: i64,
    pub(super) role: Role,
    pub(super) fence: i64,
    pub(super) lost: LossSignal,
}

impl SimDriver {
    pub(super) fn new(store: Store, rule: Rule, fence_by: FenceBy) -> SimDriver {
        let role = match rule {
            Rule::Leases(_) => Role::Permit,
            Rule::Latch => Role::Participant,
            _ => Role::Mutex,
        };
        SimDriver {
            store,
            rule,
            role: Mutex::new(role),
            fence_by,
            session: Mutex::new(None),
        }
    }

    fn read(&self) -> Listing<(i64, Role)> {
        let st = self.store.state.lock();
        Listing {
            contenders: st.entries.iter().map(|(k, e)| (*k, e.role)).collect(),
            revision: st.revision,
        }
    }
}

impl ContendDriver for SimDriver {
    type Epoch = (u64, LossSignal);
    type Ticket = SimTicket;
    type Entry = SimEntry;
    type Id = (i64, Role);
    type Won = SimWon;

    fn rule(&self) -> Rule {
        self.rule
    }

    fn role(&self, id: &(i64, Role)) -> Role {
        id.1
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        tokio::spawn(task);
    }

    fn rpc_timeout(&self) -> Duration {
        Duration::from_millis(50)
    }

    async fn epoch(&self, _deadline: Option<Instant>) -> Result<Option<(u64, LossSignal)>> {
        self.store.latency().await;
        let mut current = self.session.lock();
        if let Some((id, signal)) = current.as_ref() {
            if !signal.is_lost() {
                return Ok(Some((*id, signal.clone())));
            }
        }
        if self.store.fault() {
            return Err(Error::ConnectionLoss); // the store is out of reach
        }
        let mut st = self.store.state.lock();
        let id = st.next_id;
        st.next_id += 1;
        let trigger = LossTrigger::root();
        let signal = trigger.signal();
        st.sessions.insert(id, SessionState { trigger });
        *current = Some((id, signal.clone()));
        Ok(Some((id, signal)))
    }

    fn epoch_signal(&self, epoch: &(u64, LossSignal)) -> LossSignal {
        epoch.1.clone()
    }

    fn ticket(&self, _epoch: &(u64, LossSignal)) -> SimTicket {
        let mut st = self.store.state.lock();
        let id = st.next_id;
        st.next_id += 1;
        SimTicket {
            store: self.store.clone(),
            id,
        }
    }

    async fn enter(
        &self,
        epoch: &(u64, LossSignal),
        ticket: &mut SimTicket,
    ) -> Result<(SimEntry, Option<Listing<(i64, Role)>>)> {
        self.store.latency().await;
        if self.store.fault() {
            return Err(Error::ConnectionLoss); // refused before it landed
        }
        let role = *self.role.lock();
        let created = {
            let mut st = self.store.state.lock();
            if !st.sessions.contains_key(&epoch.0) {
                return Err(Error::SessionExpired);
            }
            st.revision += 1;
            let rev = st.revision;
            st.entries.insert(
                rev,
                Entry {
                    session: epoch.0,
                    ticket: ticket.id,
                    role,
                },
            );
            rev
        };
        self.store.latency().await;
        if self.store.fault() {
            // Applied, but the reply was lost.
            return Err(Error::Indeterminate {
                what: "create".into(),
            });
        }
        let first = self.store.fault().then(|| self.read());
        let entry = SimEntry {
            id: (created, role),
        };
        Ok((entry, first))
    }

    fn ours<'e>(&self, entry: &'e SimEntry) -> &'e (i64, Role) {
        &entry.id
    }

    async fn list(
        &self,
        _epoch: &(u64, LossSignal),
        _entry: &mut SimEntry,
    ) -> Result<Listing<(i64, Role)>> {
        self.store.latency().await;
        if self.store.fault() {
            return Err(Error::ConnectionLoss);
        }
        let read = self.read();
        self.store.latency().await;
        Ok(read)
    }

    async fn wait(
        &self,
        _epoch: &(u64, LossSignal),
        _entry: &mut SimEntry,
        ahead: &(i64, Role),
    ) -> Result<()> {
        if self.store.fault() {
            return Err(Error::ConnectionLoss);
        }
        loop {
            let notified = self.store.deleted.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let present = self.store.state.lock().entries.contains_key(&ahead.0);
            if !present || self.store.fault() {
                self.store.latency().await;
                return Ok(());
            }
            notified.await;
        }
    }

    async fn confirm(
        &self,
        epoch: &(u64, LossSignal),
        entry: &mut SimEntry,
        listing: &Listing<(i64, Role)>,
    ) -> Result<Option<i64>> {
        // The engine must not confirm under an epoch it knows is lost.
        assert!(
            !epoch.1.is_lost(),
            "confirm called under a lost epoch (session {})",
            epoch.0
        );
        if !self.store.state.lock().entries.contains_key(&entry.id.0) {
            return Ok(None);
        }
        Ok(Some(match self.fence_by {
            FenceBy::ReadRevision => listing.revision,
            FenceBy::CreateRevision => entry.id.0,
        }))
    }

    async fn remove(ticket: SimTicket) {
        ticket.store.latency().await;
        ticket.store.delete_where(|e| e.ticket == ticket.id);
    }

    fn won(&self, epoch: (u64, LossSignal), _t: SimTicket, entry: SimEntry, fence: i64) -> SimWon {
        SimWon {
            created: entry.id.0,
            role: entry.id.1,
            fence,
            lost: epoch.1,
        }
    }
}
