//! One watch stream per client, shared by every acquisition: persistent
//! watches of deletions under the prefixes the client's acquisitions
//! listen to, kept open across acquisitions. A lock name's contenders
//! (`<name>/`) are one such prefix; a read-write lock's reader listens to
//! two narrower ones instead (`contend.rs`): its writers (`<name>/write/`),
//! and its lease's own reader keys (`<name>/read/<lease hex>-`), so that
//! a reader's release reaches no other client's reader.
//!
//! A new watch per acquisition costs a stream (~30 KiB each while a lock
//! is held) and, in etcd 3.4, risks an unsynced watcher: a watch with no
//! start revision is registered at "current revision + 1", and a write
//! landing in between leaves it to a loop that runs every 100 ms. Here a
//! prefix's watch is created once, from the revision after the first reply
//! that showed our key; after that, an acquisition only registers an
//! [`Interest`] with the client — no request — and the loss watch on our
//! own key costs no round trip. A new lease is a new reader prefix, asked
//! for the same way.
//!
//! **No deletion falls between a read and a wait.** An interest is
//! registered with each of its watches (its *names*) before the request
//! whose reply it is checked against (the enter transaction, a listing, a
//! read of our key), and hears every deletion the client learns of on any
//! of them from then on; a wait then names the key and the revision `R` of
//! that reply, and counts only deletions after `R`, those heard meanwhile
//! included. Each watch vouches for every deletion under its prefix after
//! the revision it started from ([`Name::covered_after`]); a wait goes on
//! only while every one of the interest's watches vouches for `R` — a wait
//! on an older `R` (another acquisition of the client asked for a watch
//! first) returns at once, so the caller reads again. A watch the
//! interest joins after its read ([`Interest::widen`]: a reader waiting
//! on a writer's key outside `write/`) may have heard deletions after `R`
//! before the interest joined: the caller reads again before waiting. A
//! broken stream is re-opened with each watch resumed at the first
//! revision not yet heard; history compacted away moves `covered_after`
//! on and wakes every interest of the watch to read again.
//!
//! What a wait concludes without a read (every key it follows ahead of
//! ours deleted, [`Interest::wait`]) needs each of those deletions heard,
//! whichever watch brought it: watches are not heard in one order, so the
//! revision it concludes at is the newest of theirs.

mod interest;
mod slot;
mod stream;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use recipes_core::store::Runtime;
use recipes_core::{Error, Result};
use tokio::sync::Notify;

pub(crate) use interest::Interest;
use slot::Slot;

use crate::session::Etcd;

/// Names whose watch is kept while no interest uses them, for the next
/// acquisition; beyond that the least recently used is cancelled.
const IDLE_NAMES: usize = 64;

/// A wait follows up to this many keys ahead of ours besides the one it
/// waits for, so that the wake that finds them all deleted knows ours is
/// first without a read; a longer queue reads again after the wake.
pub(crate) const FOLLOWED_AHEAD: usize = 32;

/// The client's watch stream and the watches on it.
#[derive(Clone)]
pub(crate) struct WatchHub {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the stream's task: something to send.
    wake: Notify,
}

#[derive(Default)]
struct State {
    names: HashMap<String, Name>,
    /// Watch id → its name.
    ids: HashMap<i64, String>,
    next_id: i64,
    next_interest: u64,
    /// Names to create (or re-create) on the current stream.
    to_create: Vec<String>,
    /// Watch ids to cancel on the current stream.
    to_cancel: Vec<i64>,
    /// Names no interest uses, the least recently used first.
    idle: VecDeque<String>,
}

/// One prefix's watch: every deletion under it.
struct Name {
    id: i64,
    /// Every deletion after this revision is heard; `i64::MAX` until an
    /// interest asked for the watch ([`Interest::ours`],
    /// [`Interest::widen`]).
    covered_after: i64,
    /// The first revision not yet heard: where a re-opened stream resumes.
    next_rev: i64,
    /// The stream generation the watch was created on.
    sent_on: Option<u64>,
    /// Why the server cancelled the watch, until it is created again.
    cancelled: Option<String>,
    interests: HashMap<u64, Arc<Slot>>,
}

impl WatchHub {
    /// The hub of `etcd`'s client; its stream runs on `rt` from the first
    /// interest on.
    pub(crate) fn start(etcd: Etcd, rt: &Runtime, timeout: Duration) -> WatchHub {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                next_id: 1,
                ..State::default()
            }),
            wake: Notify::new(),
        });
        let hub = WatchHub { shared };
        // Not a background task of the runtime's: it runs as long as the
        // client, and `close` does not wait for it.
        rt.handle()
            .spawn(stream::run(etcd, hub.shared.clone(), timeout));
        hub
    }

    /// Hear every deletion under `prefix` from now on, for waits and for
    /// our key (see the module's notes); the name's watch is created if
    /// the client has none.
    pub(crate) fn interest(&self, prefix: &str) -> Interest {
        self.interest_in(prefix, &[])
    }

    /// Hear our key's deletions under `ours` and, for waits, every
    /// deletion under `ours` and each of `waits` from now on (a reader:
    /// its lease's reader keys, and the writers').
    pub(crate) fn interest_in(&self, ours: &str, waits: &[&str]) -> Interest {
        let slot = Arc::new(Slot::default());
        let mut names = vec![ours.to_owned()];
        for prefix in waits {
            if !names.iter().any(|n| n == prefix) {
                names.push((*prefix).to_owned());
            }
        }
        let id = {
            let mut st = self.shared.state.lock();
            let id = st.next_interest;
            st.next_interest += 1;
            for prefix in &names {
                st.register(prefix, id, &slot);
            }
            id
        };
        self.shared.wake.notify_one();
        Interest::new(self.clone(), names, id, slot)
    }
}

impl State {
    /// The name's entry, made if there is none; its watch is asked for by
    /// the first [`Interest::ours`].
    fn name(&mut self, prefix: &str) -> &mut Name {
        if !self.names.contains_key(prefix) {
            let id = self.next_id;
            self.next_id += 1;
            self.ids.insert(id, prefix.to_owned());
            let name = Name {
                id,
                covered_after: i64::MAX,
                next_rev: 0,
                sent_on: None,
                cancelled: None,
                interests: HashMap::new(),
            };
            self.names.insert(prefix.to_owned(), name);
        }
        let name = self.names.get_mut(prefix).expect("just made");
        if name.cancelled.is_some() && name.sent_on.is_some() {
            // Cancelled by the server: ask again (it says why until then).
            name.sent_on = None;
            self.to_create.push(prefix.to_owned());
        }
        name
    }

    /// `slot` (interest `id`) hears `prefix`'s watch from now on.
    fn register(&mut self, prefix: &str, id: u64, slot: &Arc<Slot>) {
        self.name(prefix).interests.insert(id, slot.clone());
        if let Some(at) = self.idle.iter().position(|p| p == prefix) {
            self.idle.remove(at);
        }
    }

    /// Ask for `prefix`'s watch from `rev + 1` unless asked for already:
    /// it vouches for every deletion after `rev`. Whether it was asked.
    fn ask(&mut self, prefix: &str, rev: i64) -> bool {
        let Some(name) = self.names.get_mut(prefix) else {
            return false;
        };
        if name.covered_after != i64::MAX {
            return false;
        }
        (name.covered_after, name.next_rev) = (rev, rev + 1);
        self.to_create.push(prefix.to_owned());
        true
    }

    /// An interest of `prefix` is gone; its watch stays while others use
    /// it, then among the idle ones.
    fn drop_interest(&mut self, prefix: &str, id: u64) {
        let Some(name) = self.names.get_mut(prefix) else {
            return;
        };
        name.interests.remove(&id);
        if !name.interests.is_empty() {
            return;
        }
        self.idle.push_back(prefix.to_owned());
        while self.idle.len() > IDLE_NAMES {
            let Some(oldest) = self.idle.pop_front() else {
                break;
            };
            if let Some(name) = self.names.remove(&oldest) {
                self.ids.remove(&name.id);
                if name.sent_on.is_some() {
                    self.to_cancel.push(name.id);
                }
            }
        }
    }
}

impl Shared {
    /// Whether `prefix`'s watch vouches for `rev` (see [`vouches`]); a
    /// watch the server cancelled is asked for again.
    fn look(&self, prefix: &str, rev: i64) -> Result<Option<bool>> {
        let mut st = self.state.lock();
        let looked = vouches(st.names.get(prefix), prefix, rev);
        if looked.is_err() && st.names[prefix].sent_on.is_some() {
            st.name(prefix);
            drop(st);
            self.wake.notify_one();
        }
        looked
    }
}

/// Whether the name's watch vouches for every deletion after `rev`:
/// `Some(false)` if it starts later (read again), `None` until the server
/// confirmed it, an error when the server cancelled it.
fn vouches(name: Option<&Name>, prefix: &str, rev: i64) -> Result<Option<bool>> {
    let Some(name) = name else {
        return Ok(Some(false));
    };
    if let Some(why) = &name.cancelled {
        return Err(Error::Backend {
            message: format!("etcd cancelled the watch on {prefix}: {why}"),
            retryable: true,
            source: None,
        });
    }
    if name.covered_after == i64::MAX {
        return Ok(None);
    }
    Ok(Some(rev >= name.covered_after))
}
