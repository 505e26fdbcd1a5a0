//! Hearing of queue changes: `LISTEN recipes_<md5(name)>` on a connection
//! of its own, which must stay on one backend — a direct connection or a
//! session-mode pool, never a transaction-mode pooler, which hands the
//! backend that listens to other clients between statements. The queue's
//! trigger names the changed entry's `seq` in the payload, so every
//! listener hears every change of a name but only the one waiting for that
//! entry reads again: no herd. Each channel's notifications go to its own
//! waiters and to its name's held entries only (a holder is woken by its
//! own entry's changes), and channels nobody waits on or holds are
//! unlistened once they pile up, so a client that held or waited on many
//! names over its life does not keep them all.
//!
//! A notification is a hint that saves a poll, never a fact the recipes
//! rely on: waits also poll (and are bounded by the entry's remaining
//! life), so a listener that broke or never heard costs latency, not
//! safety.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use recipes_core::store::within;
use recipes_core::Result;
use tokio::sync::{broadcast, Notify};
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, Client};

use crate::db::Db;
use crate::sql::{from_pg, unexpected};

/// How many notifications of its name a slow waiter may fall behind
/// before it reads again (each channel keeps its own, so small).
const BACKLOG: usize = 16;

/// How many channels a client listens to before it unlistens those that
/// nobody waits on or holds any more (kept until then for names used
/// again soon); the mark doubles with the channels in use, so the look is
/// rare.
const FIRST_MARK: usize = 128;

/// A channel's name (`recipes_<md5>`), shared by the maps that name it.
type Channel = Arc<str>;

/// Where each listened channel's notifications go: to that channel's
/// waiters (a broadcast of the payloads, made by the first waiter) and to
/// the held entries of its name (each woken only by a change of its own
/// entry), not to every one of the client (10,000 held locks made each
/// release wake 10,000 tasks). A holder has no channel of its own: a
/// waker and its `seq` (10,000 held names each with a 16-slot channel
/// were a kibibyte a held lock).
#[derive(Default)]
struct Routes {
    waiters: HashMap<Channel, broadcast::Sender<String>>,
    holders: HashMap<Channel, Vec<(i64, Arc<Notify>)>>,
}

type Ears = Arc<parking_lot::Mutex<Routes>>;

/// The listening connection of one client and the channels it listens on.
pub(crate) struct Listener {
    db: Db,
    ears: Ears,
    state: tokio::sync::Mutex<Listening>,
    /// Each name's channel, while the channel is listened to.
    channels: parking_lot::Mutex<HashMap<String, Channel>>,
}

struct Listening {
    client: Option<Arc<Client>>,
    listened: HashSet<Channel>,
    /// Past this many channels, unlisten the idle ones.
    mark: usize,
}

/// What a subscription heard.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Heard {
    /// The entry with this `seq` changed.
    Entry(i64),
    /// Notifications may have been missed: read again.
    Missed,
}

/// One waiter's ear on one name's channel.
pub(crate) struct Subscription {
    rx: broadcast::Receiver<String>,
}

impl Subscription {
    /// The next change of the name.
    pub(crate) async fn next(&mut self) -> Heard {
        match self.rx.recv().await {
            Ok(payload) => payload.parse().map_or(Heard::Missed, Heard::Entry),
            Err(broadcast::error::RecvError::Lagged(_)) => Heard::Missed,
            // The channel was unlistened, which it is only once nobody
            // subscribes to it: not for a live subscription.
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

/// The next change heard by `sub`, or never without one.
pub(crate) async fn next(sub: &mut Option<Subscription>) -> Heard {
    match sub {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

/// A held entry's ear on its name's channel: woken by a change of its
/// own entry (or a payload that names none), a wake kept until heard.
/// Dropped, the entry is no longer routed to.
pub(crate) struct HeldEar {
    ears: Ears,
    channel: Channel,
    wake: Arc<Notify>,
}

impl HeldEar {
    /// The next change of the entry, or never without an ear.
    pub(crate) async fn changed(ear: &Option<HeldEar>) {
        match ear {
            Some(e) => e.wake.notified().await,
            None => std::future::pending().await,
        }
    }
}

impl Drop for HeldEar {
    fn drop(&mut self) {
        let mut routes = self.ears.lock();
        if let Some(held) = routes.holders.get_mut(&self.channel) {
            held.retain(|(_, w)| !Arc::ptr_eq(w, &self.wake));
            if held.is_empty() {
                routes.holders.remove(&self.channel);
            }
        }
    }
}

impl Listener {
    pub(crate) fn new(db: Db) -> Listener {
        Listener {
            db,
            ears: Ears::default(),
            state: tokio::sync::Mutex::new(Listening {
                client: None,
                listened: HashSet::new(),
                mark: FIRST_MARK,
            }),
            channels: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// Listen on `name`'s channel (again, if the connection was replaced)
    /// and hear what comes after this call returns.
    pub(crate) async fn subscribe(&self, name: &str) -> Result<Subscription> {
        self.listen_on(name, |routes, channel| Subscription {
            rx: routes
                .waiters
                .entry(channel.clone())
                .or_insert_with(|| broadcast::channel(BACKLOG).0)
                .subscribe(),
        })
        .await
    }

    /// Listen on `name`'s channel for the held entry `seq` of it: its ear
    /// wakes at each change of that entry heard after this call returns.
    pub(crate) async fn hear_held(&self, name: &str, seq: i64) -> Result<HeldEar> {
        self.listen_on(name, |routes, channel| {
            let wake = Arc::new(Notify::new());
            let held = routes.holders.entry(channel.clone()).or_default();
            held.push((seq, wake.clone()));
            HeldEar {
                ears: self.ears.clone(),
                channel: channel.clone(),
                wake,
            }
        })
        .await
    }

    /// Register an ear on `name`'s channel (`ear`), then listen on the
    /// channel unless it is listened to.
    async fn listen_on<T>(
        &self,
        name: &str,
        ear: impl FnOnce(&mut Routes, &Channel) -> T,
    ) -> Result<T> {
        let mut state = self.state.lock().await;
        let client = match state.client.as_ref().filter(|c| !c.is_closed()) {
            Some(c) => c.clone(),
            None => {
                let ears = self.ears.clone();
                let client = Arc::new(self.db.open(move |m| forward(&ears, m)).await?);
                state.client = Some(client.clone());
                state.listened.clear();
                client
            }
        };
        let channel = self.channel(&client, name).await?;
        // Registered before the LISTEN: nothing after this call is missed.
        let heard = ear(&mut self.ears.lock(), &channel);
        if !state.listened.contains(&channel) {
            let what = format!("listen for changes of {name}");
            // The channel is md5 hex behind a fixed prefix: nothing to quote.
            if let Err(e) = self.run(&client, &what, format!("LISTEN {channel}")).await {
                state.client = None;
                return Err(e);
            }
            state.listened.insert(channel);
        }
        self.unlisten_idle(&mut state, &client).await;
        Ok(heard)
    }

    /// Past the mark, unlisten the channels nobody subscribes to or
    /// holds an entry of. The caller holds the state, so no ear on them
    /// can start meanwhile.
    async fn unlisten_idle(&self, state: &mut Listening, client: &Client) {
        let idle: HashSet<Channel> = {
            let mut routes = self.ears.lock();
            let Routes { waiters, holders } = &mut *routes;
            if state.listened.len().max(waiters.len()) <= state.mark {
                return;
            }
            waiters.retain(|_, tx| tx.receiver_count() > 0);
            let idle: HashSet<Channel> = state
                .listened
                .iter()
                .filter(|c| !waiters.contains_key(*c) && !holders.contains_key(*c))
                .cloned()
                .collect();
            state.listened.retain(|c| !idle.contains(c));
            state.mark = FIRST_MARK.max(2 * state.listened.len().max(waiters.len()));
            idle
        };
        // Names are kept while their channel is listened to.
        self.channels
            .lock()
            .retain(|_, c| state.listened.contains(c));
        if idle.is_empty() {
            return;
        }
        let unlisten: String = idle.iter().map(|c| format!("UNLISTEN {c};")).collect();
        let what = format!("unlisten {} idle channels", idle.len());
        if let Err(e) = self.run(client, &what, unlisten).await {
            // Listening on more than needed costs only notifications that
            // nobody hears; a broken connection is replaced at the next
            // subscription.
            log::debug!("{what}: {e}");
        }
    }

    async fn run(&self, client: &Client, what: &str, sql: String) -> Result<()> {
        within(what, self.db.rpc_timeout(), async {
            client
                .batch_execute(&sql)
                .await
                .map_err(|e| from_pg(what, e))
        })
        .await
    }

    /// The channel of `name`, as the trigger computes it.
    async fn channel(&self, client: &Client, name: &str) -> Result<Channel> {
        if let Some(c) = self.channels.lock().get(name) {
            return Ok(c.clone());
        }
        let what = format!("name the channel of {name}");
        let sql = "SELECT 'recipes_' || md5($1)";
        let row = within(&what, self.db.rpc_timeout(), async {
            client
                .query_typed(sql, &[(&name, Type::TEXT)])
                .await
                .map_err(|e| from_pg(&what, e))
        })
        .await?;
        let channel: Channel = row
            .first()
            .ok_or_else(|| unexpected("a select returned no row"))?
            .get::<_, &str>(0)
            .into();
        self.channels
            .lock()
            .insert(name.to_owned(), channel.clone());
        Ok(channel)
    }
}

fn forward(ears: &Ears, m: AsyncMessage) {
    if let AsyncMessage::Notification(n) = m {
        let routes = ears.lock();
        if let Some(tx) = routes.waiters.get(n.channel()) {
            let _ = tx.send(n.payload().to_owned());
        }
        if let Some(held) = routes.holders.get(n.channel()) {
            // A payload that names no entry may be about any of them.
            let changed = n.payload().parse::<i64>().ok();
            for (seq, wake) in held {
                if changed.is_none_or(|c| c == *seq) {
                    wake.notify_one();
                }
            }
        }
    }
}
