//! An acquisition's (or a held key's) interest in deletions, on one or
//! more of the client's watches; see the hub's notes.

use std::sync::Arc;
use std::time::Duration;

use recipes_core::{Error, Result};

use super::slot::{Slot, Target};
use super::WatchHub;

/// An acquisition's (or a held key's) interest in deletions under its
/// names (prefixes); see the hub's notes.
pub(crate) struct Interest {
    hub: WatchHub,
    /// The prefixes whose watches this interest hears, the one that hears
    /// our key first; a wait relies on all of them.
    names: Vec<String>,
    id: u64,
    slot: Arc<Slot>,
}

impl Interest {
    pub(super) fn new(hub: WatchHub, names: Vec<String>, id: u64, slot: Arc<Slot>) -> Interest {
        Interest {
            hub,
            names,
            id,
            slot,
        }
    }

    /// The prefix whose watch hears our key.
    fn ours_on(&self) -> &str {
        &self.names[0]
    }

    /// Our key `key` existed at revision `rev`: its deletion after that is
    /// heard. Each of the interest's watches not asked for yet is asked
    /// for from `rev + 1`: the revision a reply just showed, so the watch
    /// is most likely synced at once (a watch from an older revision waits
    /// for etcd's 100 ms unsynced loop), and it vouches for `rev` and later
    /// without waiting for the server.
    pub(crate) fn ours(&self, key: &str, rev: i64) {
        self.won(key, rev, true);
    }

    /// Ours holds at `rev`: `read` when a listing at `rev` showed our key,
    /// else concluded from deletions heard (see [`Listening::won`]); the
    /// watches as [`ours`](Self::ours) asks for them.
    ///
    /// [`Listening::won`]: super::slot::Listening::won
    pub(crate) fn won(&self, key: &str, rev: i64, read: bool) {
        self.slot.state.lock().won(key.as_bytes(), rev, read);
        let mut st = self.hub.shared.state.lock();
        let mut asked = false;
        for prefix in &self.names {
            asked |= st.ask(prefix, rev);
        }
        drop(st);
        if asked {
            self.hub.shared.wake.notify_one();
        }
    }

    /// Also hear `prefix`'s deletions for waits from now on (its watch
    /// asked for from `rev + 1`, `rev` being the revision of the caller's
    /// last read, unless it exists). `true` when the interest was not
    /// hearing it: a deletion after `rev` may have been heard before it
    /// joined, so the caller reads again before it waits.
    pub(crate) fn widen(&mut self, prefix: &str, rev: i64) -> bool {
        if self.names.iter().any(|n| n == prefix) {
            return false;
        }
        let mut st = self.hub.shared.state.lock();
        st.register(prefix, self.id, &self.slot);
        st.ask(prefix, rev);
        drop(st);
        self.names.push(prefix.to_owned());
        self.hub.shared.wake.notify_one();
        true
    }

    /// Whether every watch of the interest vouches for `rev`, waiting (at
    /// most `timeout`) for the server to confirm them. Clears
    /// [`recheck`](super::slot::Listening::recheck): a change of a watch
    /// after this look sets it again. (Lock order: the hub's state, then a
    /// slot's; never both here.)
    async fn covers(&self, rev: i64, timeout: Duration) -> Result<bool> {
        let confirmed = async {
            'look: loop {
                let notified = self.slot.notify.notified();
                self.slot.state.lock().recheck = false;
                for prefix in &self.names {
                    match self.hub.shared.look(prefix, rev)? {
                        Some(true) => {}
                        Some(false) => return Ok(false),
                        None => {
                            notified.await;
                            continue 'look;
                        }
                    }
                }
                return Ok(true);
            }
        };
        recipes_core::store::within("start a watch", timeout, confirmed).await
    }

    /// Resolves when our key, or `ahead` (`None`: any key heard), is
    /// deleted after revision `rev` — the revision of the read that showed
    /// them both — or as soon as a watch of the interest cannot vouch for
    /// `rev`: the caller then reads again. `Some(r)` instead when `ahead`
    /// was deleted and so was every key of `others` (the rest of the keys
    /// ahead of ours at `rev` that can keep ours out: a reader's are its
    /// writers), `r` being the newest of those deletions, all heard on
    /// watches that vouch for every deletion after `rev`: no key can be
    /// created ahead of ours, so at `r` none of them is left ahead of ours,
    /// and no read is needed to know it. Cancel-safe: a wake is never lost
    /// (a later wait returns at once).
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
                            gone: false,
                            last: 0,
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
                            gone: true,
                            last,
                            ..
                        } if others.is_empty() && !recheck && !st.ours_gone => Some(last),
                        _ => None,
                    });
                }
            }
            notified.await;
        }
    }

    /// Our key is held: from now on only its deletion counts, heard on the
    /// watch of our key's prefix alone.
    pub(crate) fn hold(&mut self) {
        {
            let mut st = self.slot.state.lock();
            st.target = Target::Held;
            st.heard = Vec::new();
        }
        if self.names.len() == 1 {
            return;
        }
        let waits = self.names.split_off(1);
        let mut st = self.hub.shared.state.lock();
        for prefix in &waits {
            st.drop_interest(prefix, self.id);
        }
        let cancel = !st.to_cancel.is_empty();
        drop(st);
        if cancel {
            self.hub.shared.wake.notify_one();
        }
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
            if self.hub.shared.look(self.ours_on(), after)? == Some(false) {
                return Err(Error::Backend {
                    message: format!("the watch on {} missed some history", self.ours_on()),
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
        for prefix in &self.names {
            st.drop_interest(prefix, self.id);
        }
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
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}
