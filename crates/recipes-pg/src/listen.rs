//! Hearing of queue changes: `LISTEN recipes_<md5(name)>` on a connection
//! of its own, which must stay on one backend — a direct connection or a
//! session-mode pool, never a transaction-mode pooler, which hands the
//! backend that listens to other clients between statements. The queue's
//! trigger names the changed entry's `seq` in the payload, so every
//! listener hears every change of a name but only the one waiting for that
//! entry reads again: no herd.
//!
//! A notification is a hint that saves a poll, never a fact the recipes
//! rely on: waits also poll (and are bounded by the entry's remaining
//! life), so a listener that broke or never heard costs latency, not
//! safety.

use std::collections::HashMap;
use std::sync::Arc;

use recipes_core::{within, Result};
use tokio::sync::broadcast;
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, Client};

use crate::db::Db;
use crate::sql::{from_pg, unexpected};

/// How many notifications a slow waiter may fall behind before it polls.
const BACKLOG: usize = 1024;

#[derive(Debug, Clone)]
struct Note {
    channel: String,
    payload: String,
}

/// The listening connection of one client and the channels it listens on.
pub(crate) struct Listener {
    db: Db,
    notes: broadcast::Sender<Note>,
    state: tokio::sync::Mutex<Listening>,
    channels: parking_lot::Mutex<HashMap<String, String>>,
}

#[derive(Default)]
struct Listening {
    client: Option<Arc<Client>>,
    listened: std::collections::HashSet<String>,
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
    rx: broadcast::Receiver<Note>,
    channel: String,
}

impl Subscription {
    /// The next change of the name.
    pub(crate) async fn next(&mut self) -> Heard {
        loop {
            match self.rx.recv().await {
                Ok(note) if note.channel == self.channel => {
                    return note.payload.parse().map_or(Heard::Missed, Heard::Entry)
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return Heard::Missed,
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
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

impl Listener {
    pub(crate) fn new(db: Db) -> Listener {
        Listener {
            db,
            notes: broadcast::channel(BACKLOG).0,
            state: tokio::sync::Mutex::new(Listening::default()),
            channels: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// Listen on `name`'s channel (again, if the connection was replaced)
    /// and hear what comes after this call returns.
    pub(crate) async fn subscribe(&self, name: &str) -> Result<Subscription> {
        let rx = self.notes.subscribe();
        let channel = self.listen(name).await?;
        Ok(Subscription { rx, channel })
    }

    async fn listen(&self, name: &str) -> Result<String> {
        let mut state = self.state.lock().await;
        let client = match state.client.as_ref().filter(|c| !c.is_closed()) {
            Some(c) => c.clone(),
            None => {
                let notes = self.notes.clone();
                let client = Arc::new(self.db.open(move |m| forward(&notes, m)).await?);
                *state = Listening {
                    client: Some(client.clone()),
                    listened: Default::default(),
                };
                client
            }
        };
        let channel = self.channel(&client, name).await?;
        if !state.listened.contains(&channel) {
            let what = format!("listen for changes of {name}");
            // The channel is md5 hex behind a fixed prefix: nothing to quote.
            let listen = format!("LISTEN {channel}");
            let heard = within(&what, self.db.rpc_timeout(), async {
                client
                    .batch_execute(&listen)
                    .await
                    .map_err(|e| from_pg(&what, e))
            })
            .await;
            if let Err(e) = heard {
                state.client = None;
                return Err(e);
            }
            state.listened.insert(channel.clone());
        }
        Ok(channel)
    }

    /// The channel of `name`, as the trigger computes it.
    async fn channel(&self, client: &Client, name: &str) -> Result<String> {
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
        let channel: String = row
            .first()
            .ok_or_else(|| unexpected("a select returned no row"))?
            .get(0);
        self.channels
            .lock()
            .insert(name.to_owned(), channel.clone());
        Ok(channel)
    }
}

fn forward(notes: &broadcast::Sender<Note>, m: AsyncMessage) {
    if let AsyncMessage::Notification(n) = m {
        let _ = notes.send(Note {
            channel: n.channel().to_owned(),
            payload: n.payload().to_owned(),
        });
    }
}
