//! The subscription of a barrier's, double barrier's, group's or
//! counter's waits to its name's wake channel: one connection, opened by
//! the first wait that arms it and kept while waits arm it again, so that
//! an idle waiter's re-reads (every 500 ms, or at a session's expiry)
//! open no connection. A wait's every check arms an [`Ear`] before its
//! read: once the subscription is confirmed, a message published after
//! that read wakes it (no lost wake).
//!
//! A task reads the connection's messages and counts them for every
//! ear. When the connection drops, its ears wake (their waits read again
//! and arm anew, which opens another); when no ear has been held for a
//! [`LINGER`], the connection is closed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use recipes_core::Result;
use tokio::sync::{watch, Mutex};

use crate::client::RedisClient;
use crate::contend::subscribe;

/// How long the connection stays without an ear before it is closed: a
/// wait between two checks holds none for a read's time.
const LINGER: Duration = Duration::from_secs(2);

/// The subscription of one name's waits (shared by the clones of its
/// recipe object).
#[derive(Debug, Clone)]
pub(crate) struct Ears {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    channel: String,
    line: Mutex<Option<Line>>,
}

/// The open connection: the count of its messages (the sender is its
/// reading task's; dropped when the connection drops), and the token
/// every ear holds, counting the ears armed.
#[derive(Debug)]
struct Line {
    heard: watch::Receiver<u64>,
    held: Arc<AtomicU64>,
}

impl Line {
    fn ear(&self) -> Ear {
        let mut heard = self.heard.clone();
        heard.borrow_and_update();
        self.held.fetch_add(1, Ordering::Relaxed);
        Ear {
            heard,
            _held: self.held.clone(),
        }
    }
}

/// One check's notification: the next message after it was armed, or
/// the connection's drop.
#[derive(Debug)]
pub struct Ear {
    heard: watch::Receiver<u64>,
    _held: Arc<AtomicU64>,
}

impl Ear {
    /// Resolve on the next message, or when the connection dropped.
    pub(crate) async fn heard(mut self) {
        // An error: the connection dropped, which is news too.
        let _ = self.heard.changed().await;
    }
}

impl Ears {
    pub(crate) fn new(channel: String) -> Ears {
        Ears {
            inner: Arc::new(Inner {
                channel,
                line: Mutex::new(None),
            }),
        }
    }

    /// An ear on the channel, subscribed on the open connection, or on a
    /// new one when none is open (or it dropped).
    pub(crate) async fn arm(&self, client: &RedisClient) -> Result<Ear> {
        let mut line = self.inner.line.lock().await;
        if let Some(open) = line.as_ref().filter(|l| l.heard.has_changed().is_ok()) {
            return Ok(open.ear());
        }
        *line = None;
        let redis = client.redis()?;
        let stream = subscribe(&redis, &self.inner.channel, client.rpc_timeout()).await?;
        let (count, heard) = watch::channel(0);
        let open = Line {
            heard,
            held: Arc::default(),
        };
        let listen = listen(
            stream,
            count,
            Arc::downgrade(&open.held),
            Arc::downgrade(&self.inner),
        );
        // Not the runtime's tracked spawn: a lingering connection must not
        // hold the client's shutdown up.
        client.runtime().handle().spawn(listen);
        let ear = open.ear();
        *line = Some(open);
        Ok(ear)
    }
}

/// Count the messages of `stream` until it ends (the connection dropped)
/// or no ear was armed nor held for a whole [`LINGER`] (from one tick to
/// the next): then close it.
async fn listen(
    mut stream: redis::aio::PubSubStream,
    count: watch::Sender<u64>,
    held: Weak<AtomicU64>,
    ears: Weak<Inner>,
) {
    let mut tick = tokio::time::interval(LINGER);
    tick.reset();
    // The ears armed when a tick last found none held.
    let mut idle_at = None;
    loop {
        tokio::select! {
            message = stream.next() => match message {
                Some(_) => count.send_modify(|n| *n = n.wrapping_add(1)),
                None => return,
            },
            _ = tick.tick() => {
                let Some(token) = held.upgrade() else { return };
                // Ours, the line's, and every ear's.
                let armed = token.load(Ordering::Relaxed);
                let unheld = Arc::strong_count(&token) <= 2;
                drop(token);
                if unheld && idle_at == Some(armed) && close(&ears, &held, armed).await {
                    return;
                }
                idle_at = unheld.then_some(armed);
            }
        }
    }
}

/// Drop the line whose token is `held` if it is still the open one, no
/// ear holds it and none was armed since `armed` counted them: whether
/// the connection is to close.
async fn close(ears: &Weak<Inner>, held: &Weak<AtomicU64>, armed: u64) -> bool {
    let Some(ears) = ears.upgrade() else {
        return true;
    };
    let mut line = ears.line.lock().await;
    let Some(ours) = held.upgrade() else {
        return true;
    };
    let is_open = line.as_ref().is_some_and(|l| Arc::ptr_eq(&l.held, &ours));
    if !is_open {
        return true;
    }
    if Arc::strong_count(&ours) > 2 || ours.load(Ordering::Relaxed) != armed {
        return false;
    }
    log::debug!("[{}] no wait for {LINGER:?}: unsubscribed", ears.channel);
    *line = None;
    true
}
