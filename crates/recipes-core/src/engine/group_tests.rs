//! The join loop over an in-memory store: a resent create after a lost
//! reply is ours; a second membership of one session is refused and the
//! first is left alone; another session's id is refused and untouched; a
//! member gone from the store while its session lives is lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::engine::sim_store::paused_runtime;
use crate::error::Error;
use crate::loss::LossReason;
use crate::loss::LossTrigger;

const US: u32 = 1;
const THEM: u32 = 2;

#[derive(Default)]
struct State {
    /// id → (owner session, data).
    members: HashMap<String, (u32, Vec<u8>)>,
    /// Creates that land but whose reply is lost, still to come.
    lost_replies: u32,
    removals: Vec<String>,
}

struct Fake {
    state: Arc<Mutex<State>>,
    session: u32,
    loss: LossTrigger,
}

impl WaitStore for Fake {
    type Epoch = ();
    type Watch = ();

    fn name(&self) -> &str {
        "/g"
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        tokio::spawn(task);
    }

    fn rpc_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn epoch(&self) -> Result<()> {
        Ok(())
    }

    fn epoch_signal(&self, (): &()) -> LossSignal {
        self.loss.signal()
    }

    async fn changed(&self, (): &(), (): ()) -> Result<()> {
        std::future::pending().await
    }
}

impl GroupStore for Fake {
    type Ticket = (Arc<Mutex<State>>, u32, String);

    fn ticket(&self, (): &(), id: &str) -> Self::Ticket {
        (self.state.clone(), self.session, id.to_owned())
    }

    async fn join(&self, (): &(), ticket: &Self::Ticket, data: &[u8]) -> Result<bool> {
        let mut state = self.state.lock().unwrap();
        let id = &ticket.2;
        match state.members.get(id) {
            Some((owner, _)) if *owner == self.session => return Ok(false),
            Some(_) => return Err(crate::group::id_taken("/g", id)),
            None => {}
        }
        state
            .members
            .insert(id.clone(), (self.session, data.to_vec()));
        if state.lost_replies > 0 {
            state.lost_replies -= 1;
            return Err(Error::Indeterminate {
                what: format!("create /g/{id}"),
            });
        }
        Ok(true)
    }

    async fn read(&self, (): &(), _arm: bool) -> Result<(GroupView, Option<()>)> {
        unreachable!("the join loop never reads")
    }

    type Member = Self::Ticket;

    fn member(&self, ticket: &Self::Ticket) -> Self::Ticket {
        ticket.clone()
    }

    async fn remove((state, session, id): Self::Ticket) {
        let mut state = state.lock().unwrap();
        state.removals.push(id.clone());
        if state
            .members
            .get(&id)
            .is_some_and(|(owner, _)| *owner == session)
        {
            state.members.remove(&id);
        }
    }
}

/// Our member, polled every 10 ms of the paused clock.
impl EntryWatcher for (Arc<Mutex<State>>, u32, String) {
    type Watch = Self;

    async fn watch(&self) -> Result<Option<Self>> {
        let (state, session, id) = self;
        let ours = |(owner, _): &(u32, Vec<u8>)| owner == session;
        let there = state.lock().unwrap().members.get(id).is_some_and(ours);
        Ok(there.then(|| self.clone()))
    }

    async fn deleted(watch: &mut Self) -> Result<()> {
        while watch.watch().await?.is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
}

fn joined(fake: &Fake, id: &str) -> Result<Option<Joined<Fake>>> {
    paused_runtime().block_on(async {
        let deadline = Instant::now() + Duration::from_secs(5);
        let out = join(fake, id, b"data", Some(deadline)).await;
        // Let a spawned undo finish.
        tokio::time::sleep(Duration::from_millis(10)).await;
        out
    })
}

fn fake(session: u32, state: &Arc<Mutex<State>>) -> Fake {
    Fake {
        state: state.clone(),
        session,
        loss: LossTrigger::root(),
    }
}

#[test]
fn a_create_resent_after_a_lost_reply_is_ours() {
    let state = Arc::new(Mutex::new(State {
        lost_replies: 1,
        ..State::default()
    }));
    let got = joined(&fake(US, &state), "a").unwrap();
    assert!(got.is_some(), "joined");
    let state = state.lock().unwrap();
    assert_eq!(state.members["a"], (US, b"data".to_vec()));
    assert!(state.removals.is_empty(), "nothing undone");
}

#[test]
fn a_second_membership_of_one_session_is_refused_and_the_first_stays() {
    let state = Arc::new(Mutex::new(State::default()));
    state
        .lock()
        .unwrap()
        .members
        .insert("a".into(), (US, b"first".to_vec()));
    let refused = joined(&fake(US, &state), "a").unwrap_err();
    assert!(matches!(refused, Error::InvalidArgument(_)), "{refused}");
    let state = state.lock().unwrap();
    assert_eq!(
        state.members["a"],
        (US, b"first".to_vec()),
        "not taken over"
    );
    assert!(state.removals.is_empty(), "the first is not removed");
}

#[test]
fn another_sessions_id_is_refused_and_untouched() {
    let state = Arc::new(Mutex::new(State::default()));
    state
        .lock()
        .unwrap()
        .members
        .insert("a".into(), (THEM, b"theirs".to_vec()));
    let refused = joined(&fake(US, &state), "a").unwrap_err();
    assert!(matches!(refused, Error::InvalidArgument(_)), "{refused}");
    let state = state.lock().unwrap();
    assert_eq!(state.members["a"], (THEM, b"theirs".to_vec()));
}

#[test]
fn a_member_gone_from_the_store_is_lost_with_its_session_alive() {
    let state = Arc::new(Mutex::new(State::default()));
    paused_runtime().block_on(async {
        let store = fake(US, &state);
        let deadline = Instant::now() + Duration::from_secs(5);
        let ours = join(&store, "a", b"data", Some(deadline)).await.unwrap();
        let ours = ours.expect("joined");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!ours.lost.is_lost(), "there: not lost");
        state.lock().unwrap().members.remove("a");
        let told = tokio::time::timeout(Duration::from_secs(1), ours.lost.fired()).await;
        assert!(told.is_ok(), "the member gone from the store is told");
        assert_eq!(ours.lost.reason(), Some(LossReason::Deleted));
        assert!(!store.loss.is_fired(), "the session lives");
    });
}
