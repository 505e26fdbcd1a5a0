//! The in-memory store of the wait shape's simulation (`wait_sim.rs`):
//! a barrier flag, a double barrier's members and flag, sessions, and
//! seeded faults (failed reads, lost replies, spurious wake-ups).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::gather::{BarrierStore, DoubleBarrierStore, Flag, Gathering, Member};
use super::sim_store::Rng;
use super::wait::WaitStore;
use crate::error::{Error, Result};
use crate::loss::{LossReason, LossSignal, LossTrigger};

#[derive(Debug)]
pub(super) struct State {
    pub(super) rng: Rng,
    pub(super) fault_percent: u64,
    pub(super) revision: i64,
    pub(super) barrier: bool,
    pub(super) flag: Option<Flag>,
    /// Member name → (session, created).
    pub(super) members: BTreeMap<String, (u64, i64)>,
    pub(super) sessions: BTreeMap<u64, LossTrigger>,
    pub(super) next: u64,
    /// Every flag set: (revision, members the setter's read saw).
    pub(super) marks: Vec<(i64, usize)>,
    pub(super) reads: u64,
    /// Steady processes whose member was created.
    pub(super) steady_joined: usize,
}

#[derive(Debug, Clone)]
pub(super) struct Sim {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) revision: Arc<tokio::sync::watch::Sender<i64>>,
}

impl Sim {
    pub(super) fn new(seed: u64, fault_percent: u64) -> Sim {
        Sim {
            state: Arc::new(Mutex::new(State {
                rng: Rng::new(seed),
                fault_percent,
                revision: 1,
                barrier: false,
                flag: None,
                members: BTreeMap::new(),
                sessions: BTreeMap::new(),
                next: 1,
                marks: Vec::new(),
                reads: 0,
                steady_joined: 0,
            })),
            revision: Arc::new(tokio::sync::watch::channel(1).0),
        }
    }

    /// A change: a new revision, every armed notification fires.
    pub(super) fn bump(&self, st: &mut State) -> i64 {
        st.revision += 1;
        self.revision.send_replace(st.revision);
        st.revision
    }

    pub(super) fn fault(&self) -> bool {
        let mut st = self.state.lock();
        let p = st.fault_percent;
        st.rng.chance(p)
    }

    pub(super) fn expire(&self, session: u64) {
        let mut st = self.state.lock();
        if let Some(t) = st.sessions.remove(&session) {
            t.fire(LossReason::SessionExpired);
            st.members.retain(|_, (s, _)| *s != session);
            self.bump(&mut st);
        }
    }
}

/// One process's client: a session, renewed after expiry.
#[derive(Debug, Clone)]
pub(super) struct Proc {
    pub(super) sim: Sim,
    pub(super) session: Arc<Mutex<Option<u64>>>,
    pub(super) count: u32,
    /// Members present at this process's last read.
    pub(super) last_seen: Arc<Mutex<usize>>,
    /// A steady process (counted once its member exists).
    pub(super) steady: bool,
}

impl Proc {
    pub(super) fn new(sim: &Sim, count: u32) -> Proc {
        Proc {
            sim: sim.clone(),
            session: Arc::new(Mutex::new(None)),
            count,
            last_seen: Arc::default(),
            steady: false,
        }
    }

    pub(super) fn kill(&self) {
        let session = *self.session.lock();
        if let Some(s) = session {
            self.sim.expire(s);
        }
    }
}

impl WaitStore for Proc {
    type Epoch = (u64, LossSignal);
    type Watch = i64;

    fn name(&self) -> &str {
        "/sim"
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        tokio::spawn(task);
    }

    fn rpc_timeout(&self) -> Duration {
        Duration::from_millis(50)
    }

    async fn epoch(&self) -> Result<(u64, LossSignal)> {
        let mut st = self.sim.state.lock();
        let mut ours = self.session.lock();
        if let Some(s) = *ours {
            if let Some(t) = st.sessions.get(&s) {
                return Ok((s, t.signal()));
            }
        }
        let s = st.next;
        st.next += 1;
        let t = LossTrigger::root();
        let signal = t.signal();
        st.sessions.insert(s, t);
        *ours = Some(s);
        Ok((s, signal))
    }

    fn epoch_signal(&self, epoch: &(u64, LossSignal)) -> LossSignal {
        epoch.1.clone()
    }

    async fn changed(&self, _: &(u64, LossSignal), seen: i64) -> Result<()> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        if self.sim.fault() {
            return Ok(()); // spurious
        }
        let mut rx = self.sim.revision.subscribe();
        rx.wait_for(|r| *r > seen)
            .await
            .map_err(|_| Error::Closed)?;
        Ok(())
    }
}

impl BarrierStore for Proc {
    async fn is_set(&self, _: &(u64, LossSignal)) -> Result<(bool, i64)> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        if self.sim.fault() {
            return Err(Error::ConnectionLoss);
        }
        let mut st = self.sim.state.lock();
        st.reads += 1;
        Ok((st.barrier, st.revision))
    }

    async fn set(&self, _: &(u64, LossSignal), _tied: bool) -> Result<()> {
        let mut st = self.sim.state.lock();
        st.barrier = true;
        self.sim.bump(&mut st);
        Ok(())
    }

    async fn remove(&self, _: &(u64, LossSignal)) -> Result<()> {
        let mut st = self.sim.state.lock();
        st.barrier = false;
        self.sim.bump(&mut st);
        Ok(())
    }
}

/// (the sim, the session, the member's name)
type Ticket = (Sim, u64, String);

impl DoubleBarrierStore for Proc {
    type Ticket = Ticket;

    fn count(&self) -> u32 {
        self.count
    }

    fn ticket(&self, epoch: &(u64, LossSignal)) -> Ticket {
        let mut st = self.sim.state.lock();
        st.next += 1;
        (self.sim.clone(), epoch.0, format!("m{}", st.next))
    }

    async fn join(&self, _: &(u64, LossSignal), t: &mut Ticket) -> Result<i64> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let lost_reply = self.sim.fault();
        let mut st = self.sim.state.lock();
        if !st.sessions.contains_key(&t.1) {
            return Err(Error::SessionExpired);
        }
        if let Some(&(_, created)) = st.members.get(&t.2) {
            // Ours, from a lost reply.
            if self.steady {
                st.steady_joined += 1;
            }
            return Ok(created);
        }
        let rev = self.sim.bump(&mut st);
        st.members.insert(t.2.clone(), (t.1, rev));
        if lost_reply {
            return Err(Error::Indeterminate {
                what: "join".into(),
            });
        }
        if self.steady {
            st.steady_joined += 1;
        }
        Ok(rev)
    }

    fn is_ours(t: &Ticket, member: &str) -> bool {
        t.2 == member
    }

    async fn read(&self, _: &(u64, LossSignal)) -> Result<(Gathering, i64)> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        if self.sim.fault() {
            return Err(Error::ConnectionLoss);
        }
        let st = self.sim.state.lock();
        let members: Vec<Member> = (st.members.iter())
            .map(|(name, &(_, created))| Member {
                name: name.clone(),
                created: Some(created),
            })
            .collect();
        *self.last_seen.lock() = members.len();
        Ok((
            Gathering {
                flag: st.flag,
                members,
            },
            st.revision,
        ))
    }

    async fn mark(&self, _: &(u64, LossSignal), stale: Option<Flag>) -> Result<()> {
        let mut st = self.sim.state.lock();
        if st.flag.is_some() && st.flag != stale {
            return Ok(()); // someone else set it since
        }
        let rev = self.sim.bump(&mut st);
        let seen = *self.last_seen.lock();
        st.marks.push((rev, seen));
        st.flag = Some(Flag {
            set_at: rev,
            version: rev,
        });
        Ok(())
    }

    async fn unmark(&self, _: &(u64, LossSignal), flag: Flag) -> Result<()> {
        let mut st = self.sim.state.lock();
        if st.flag == Some(flag) {
            st.flag = None;
            self.sim.bump(&mut st);
        }
        Ok(())
    }

    async fn remove(t: Ticket) {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let mut st = t.0.state.lock();
        if st.members.remove(&t.2).is_some() {
            t.0.bump(&mut st);
        }
    }
}
