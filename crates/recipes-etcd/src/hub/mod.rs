//! One watch stream per client, shared by every acquisition: a persistent
//! watch of deletions per lock name (the contenders' prefix) that the
//! client uses, kept open across acquisitions.
//!
//! A new watch per acquisition costs a stream (~30 KiB each while a lock
//! is held) and, in etcd 3.4, risks an unsynced watcher: a watch with no
//! start revision is registered at "current revision + 1", and a write
//! landing in between leaves it to a loop that runs every 100 ms. Here a
//! name's watch is created once, from the revision after the first reply
//! that showed our key; after that, an acquisition only registers an
//! [`Interest`] with the client — no request — and the loss watch on our
//! own key costs no round trip.
//!
//! **No deletion falls between a read and a wait.** An interest exists
//! before the request whose reply it is checked against (the enter
//! transaction, a listing, a read of our key), and hears every deletion
//! the client learns of from then on; a wait then names the key and the
//! revision `R` of that reply, and counts only deletions after `R`, those
//! heard meanwhile included. The name's watch vouches for every deletion
//! after the revision it started from ([`Name::covered_after`]): a wait on
//! an older `R` (another acquisition of the client asked for the watch
//! first) returns at once, so the caller reads again. A
//! broken stream is re-opened with each watch resumed at the first
//! revision not yet heard; history compacted away moves `covered_after`
//! on and wakes every interest of the name to read again.

mod stream;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use recipes_core::store::Runtime;
use recipes_core::{Error, Result};
use tokio::sync::Notify;

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

/// One name's watch: every deletion under its prefix.
struct Name {
    id: i64,
    /// Every deletion after this revision is heard; `i64::MAX` until an
    /// interest asked for the watch ([`Interest::ours`]).
    covered_after: i64,
    /// The first revision not yet heard: where a re-opened stream resumes.
    next_rev: i64,
    /// The stream generation the watch was created on.
    sent_on: Option<u64>,
    /// Why the server cancelled the watch, until it is created again.
    cancelled: Option<String>,
    interests: HashMap<u64, Arc<Slot>>,
}

/// One interest's side of the hub.
#[derive(Default)]
struct Slot {
    state: Mutex<Listening>,
    notify: Notify,
}

#[derive(Default)]
struct Listening {
    /// Our key, and the revision it was known to exist at.
    ours: Option<(Vec<u8>, i64)>,
    target: Target,
    /// Deletions heard while [`Target::Collect`].
    heard: Vec<(Vec<u8>, i64)>,
    /// A wake not yet seen by a wait.
    woken: bool,
    /// Our key's deletion was heard.
    ours_gone: bool,
    /// The name's watch changed (confirmed, cancelled, or resumed after
    /// compacted history): look whether it still vouches.
    recheck: bool,
}

/// What an interest waits for besides our key's deletion.
#[derive(Default)]
enum Target {
    /// Nothing yet: keep every deletion heard, for the next wait.
    #[default]
    Collect,
    /// Our key only (it is held).
    Held,
    /// `key` deleted after revision `after`; `others`, the rest of the
    /// keys ahead of ours at that read (when no more than
    /// [`FOLLOWED_AHEAD`]), as long as their deletion is not heard;
    /// `deleted_at`, the revision of `key`'s deletion once heard.
    Key {
        key: Vec<u8>,
        after: i64,
        others: Option<Vec<Vec<u8>>>,
        deleted_at: i64,
    },
    /// Any key under the prefix deleted after this revision.
    Any(i64),
}

impl Listening {
    /// A deletion of `key` at `rev`: whether it is what we wait for.
    fn hear(&mut self, key: &[u8], rev: i64) -> bool {
        if let Some((ours, after)) = &self.ours {
            if ours == key && rev > *after {
                self.ours_gone = true;
                return true;
            }
        }
        match &mut self.target {
            Target::Collect => {
                self.heard.push((key.to_vec(), rev));
                false
            }
            Target::Held => false,
            Target::Key {
                key: k,
                after,
                others,
                deleted_at,
            } => {
                if rev <= *after {
                    return false;
                }
                if let Some(others) = others {
                    others.retain(|other| other != key);
                }
                if k != key {
                    return false;
                }
                *deleted_at = rev;
                true
            }
            Target::Any(after) => rev > *after,
        }
    }
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

    /// Hear every deletion under `prefix` from now on (see the module's
    /// notes); the name's watch is created if the client has none.
    pub(crate) fn interest(&self, prefix: &str) -> Interest {
        let slot = Arc::new(Slot::default());
        let id = {
            let mut st = self.shared.state.lock();
            let id = st.next_interest;
            st.next_interest += 1;
            st.name(prefix).interests.insert(id, slot.clone());
            if let Some(at) = st.idle.iter().position(|p| p == prefix) {
                st.idle.remove(at);
            }
            id
        };
        self.shared.wake.notify_one();
        Interest {
            hub: self.clone(),
            prefix: prefix.to_owned(),
            id,
            slot,
        }
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

/// An acquisition's (or a held key's) interest in deletions under one
/// name; see the module's notes.
pub(crate) struct Interest {
    hub: WatchHub,
    prefix: String,
    id: u64,
    slot: Arc<Slot>,
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

impl Interest {
    /// Our key `key` existed at revision `rev`: its deletion after that is
    /// heard. The name's first `ours` asks for its watch, from `rev + 1`:
    /// the revision a reply just showed, so the watch is most likely synced
    /// at once (a watch from an older revision waits for etcd's 100 ms
    /// unsynced loop), and it vouches for `rev` and later without waiting
    /// for the server.
    pub(crate) fn ours(&self, key: &str, rev: i64) {
        self.slot.state.lock().ours = Some((key.as_bytes().to_vec(), rev));
        let mut st = self.hub.shared.state.lock();
        let Some(name) = st.names.get_mut(&self.prefix) else {
            return;
        };
        if name.covered_after != i64::MAX {
            // Asked for already.
            return;
        }
        (name.covered_after, name.next_rev) = (rev, rev + 1);
        st.to_create.push(self.prefix.clone());
        drop(st);
        self.hub.shared.wake.notify_one();
    }

    /// Whether the name's watch vouches for `rev`, waiting (at most
    /// `timeout`) for the server to confirm it. Clears
    /// [`Listening::recheck`]: a change of the watch after this look sets
    /// it again. (Lock order: the hub's state, then a slot's; never both
    /// here.)
    async fn covers(&self, rev: i64, timeout: Duration) -> Result<bool> {
        let confirmed = async {
            loop {
                let notified = self.slot.notify.notified();
                self.slot.state.lock().recheck = false;
                if let Some(v) = self.hub.shared.look(&self.prefix, rev)? {
                    return Ok(v);
                }
                notified.await;
            }
        };
        recipes_core::store::within("start a watch", timeout, confirmed).await
    }

    /// Resolves when our key, or `ahead` (`None`: any key under the
    /// prefix), is deleted after revision `rev` — the revision of the
    /// read that showed them both — or as soon as the watch cannot vouch
    /// for `rev`: the caller then reads again. `Some(r)` instead when
    /// `ahead` was deleted at revision `r` and so was every key of
    /// `others` (the rest of the keys ahead of ours at `rev`), heard on a
    /// watch that vouches for every deletion after `rev`: no key can be
    /// created ahead of ours, so at `r` ours is first, and no read is
    /// needed to know it. Cancel-safe: a wake is never lost (a later wait
    /// returns at once).
    pub(crate) async fn wait(
        &self,
        ahead: Option<&[u8]>,
        others: Option<Vec<Vec<u8>>>,
        rev: i64,
        timeout: Duration,
    ) -> Result<Option<i64>> {
        {
            let mut st = self.slot.state.lock();
            if let Some((_, after)) = st.ours.as_mut() {
                *after = (*after).max(rev);
            }
            // A wait cancelled before (its target still set) may have
            // dropped deletions that did not match it: read again.
            if st.ours_gone || !matches!(st.target, Target::Collect) {
                (st.target, st.woken) = (Target::Collect, false);
                return Ok(None);
            }
        }
        if !self.covers(rev, timeout).await? {
            return Ok(None);
        }
        let mut others = others;
        loop {
            let notified = self.slot.notify.notified();
            {
                let mut st = self.slot.state.lock();
                if matches!(st.target, Target::Collect) {
                    // Deletions heard since the read count too (each one
                    // heard, not only the first that wakes).
                    let heard = std::mem::take(&mut st.heard);
                    st.target = match ahead {
                        Some(key) => Target::Key {
                            key: key.to_vec(),
                            after: rev,
                            others: others.take(),
                            deleted_at: 0,
                        },
                        None => Target::Any(rev),
                    };
                    let mut woken = false;
                    for (key, at) in &heard {
                        woken |= st.hear(key, *at);
                    }
                    st.woken |= woken;
                }
                let recheck = std::mem::take(&mut st.recheck);
                if std::mem::take(&mut st.woken) || recheck {
                    let target = std::mem::take(&mut st.target);
                    return Ok(match target {
                        Target::Key {
                            others: Some(others),
                            deleted_at,
                            ..
                        } if others.is_empty() && deleted_at > 0 && !recheck && !st.ours_gone => {
                            Some(deleted_at)
                        }
                        _ => None,
                    });
                }
            }
            notified.await;
        }
    }

    /// Our key is held: from now on only its deletion counts.
    pub(crate) fn hold(&self) {
        let mut st = self.slot.state.lock();
        st.target = Target::Held;
        st.heard = Vec::new();
    }

    /// Resolves when our key is deleted; an error when the watch can no
    /// longer vouch for it (history compacted away, or the server
    /// cancelled the watch): watch anew and read. Cancel-safe.
    pub(crate) async fn ours_deleted(&self) -> Result<()> {
        loop {
            let notified = self.slot.notify.notified();
            let after = {
                let mut st = self.slot.state.lock();
                (st.woken, st.recheck) = (false, false);
                if st.ours_gone {
                    return Ok(());
                }
                match st.ours {
                    Some((_, after)) => after,
                    None => return Err(Error::ConnectionLoss),
                }
            };
            if self.hub.shared.look(&self.prefix, after)? == Some(false) {
                return Err(Error::Backend {
                    message: format!("the watch on {} missed some history", self.prefix),
                    retryable: true,
                    source: None,
                });
            }
            notified.await;
        }
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        let mut st = self.hub.shared.state.lock();
        st.drop_interest(&self.prefix, self.id);
        let cancel = !st.to_cancel.is_empty();
        drop(st);
        if cancel {
            self.hub.shared.wake.notify_one();
        }
    }
}

impl std::fmt::Debug for Interest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interest")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}
