//! One interest's side of the hub: what it listens for, and what it heard
//! from every watch it is registered with.

use parking_lot::Mutex;
use tokio::sync::Notify;

/// One interest's side of the hub.
#[derive(Default)]
pub(super) struct Slot {
    pub(super) state: Mutex<Listening>,
    pub(super) notify: Notify,
}

#[derive(Default)]
pub(super) struct Listening {
    /// Our key, and the revision it was known to exist at.
    pub(super) ours: Option<(Vec<u8>, i64)>,
    pub(super) target: Target,
    /// Deletions heard while [`Target::Collect`].
    pub(super) heard: Vec<(Vec<u8>, i64)>,
    /// A wake not yet seen by a wait.
    pub(super) woken: bool,
    /// Our key's deletion was heard.
    pub(super) ours_gone: bool,
    /// One of the interest's watches changed (confirmed, cancelled, or
    /// resumed after compacted history): look whether they still vouch.
    pub(super) recheck: bool,
}

/// What an interest waits for besides our key's deletion.
#[derive(Default)]
pub(super) enum Target {
    /// Nothing yet: keep every deletion heard, for the next wait.
    #[default]
    Collect,
    /// Our key only (it is held).
    Held,
    /// `key` deleted after revision `after`; `others`, the rest of the
    /// keys followed ahead of ours at that read (when no more than
    /// [`FOLLOWED_AHEAD`](super::FOLLOWED_AHEAD)), as long as their
    /// deletion is not heard; `gone`, whether `key`'s deletion was heard;
    /// `last`, the newest revision of the deletions of `key` and of
    /// `others` heard so far.
    Key {
        key: Vec<u8>,
        after: i64,
        others: Option<Vec<Vec<u8>>>,
        gone: bool,
        last: i64,
    },
    /// Any key under the prefix deleted after this revision.
    Any(i64),
}

impl Listening {
    /// A deletion of `key` at `rev`, heard on any of the interest's
    /// watches (one deletion may be heard on two): whether it is what we
    /// wait for. Watches are heard in no common order, so what a wait
    /// concludes from several deletions takes the newest of their
    /// revisions (`last`), never the one that woke it.
    pub(super) fn hear(&mut self, key: &[u8], rev: i64) -> bool {
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
                gone,
                last,
            } => {
                if rev <= *after {
                    return false;
                }
                let mut followed = k == key;
                if let Some(others) = others {
                    let before = others.len();
                    others.retain(|other| other != key);
                    followed |= others.len() < before;
                }
                if followed {
                    *last = (*last).max(rev);
                }
                if k != key {
                    return false;
                }
                *gone = true;
                true
            }
            Target::Any(after) => rev > *after,
        }
    }

    /// Ours holds at `rev`; from now on its deletion after the mark is
    /// loss. `read`: a listing at `rev` showed our key, so `rev` is the
    /// mark. Else the hold was concluded from deletions heard, with no
    /// read: a deletion of our key at or before `rev` may still be on its
    /// way (later in the same reply, or on another watch), so the mark
    /// stays the last read that showed our key.
    ///
    /// A deletion of our key after the mark, heard before (kept while no
    /// wait ran), is loss too.
    pub(super) fn won(&mut self, key: &[u8], rev: i64, read: bool) {
        match &mut self.ours {
            Some((ours, _)) if !read && ours == key => {}
            ours => *ours = Some((key.to_vec(), rev)),
        }
        if let Some((ours, after)) = &self.ours {
            if self.heard.iter().any(|(k, r)| k == ours && r > after) {
                self.ours_gone = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait concludes from deletions heard that ours is first at 12;
    /// our own key, deleted at 12 (one transaction with the key ahead) or
    /// earlier (heard on another watch, later), is still loss once ours
    /// holds. After a read at 12 that showed our key, only later
    /// deletions are.
    #[test]
    fn a_hold_concluded_without_a_read_keeps_the_last_reads_mark() {
        for gone_at in [12, 9] {
            let mut l = waiting_for(b"a", &[]);
            assert!(l.hear(b"a", 12));
            assert_eq!(concluded(&l), Some(12));
            l.won(b"ours", 12, false);
            l.target = Target::Held;
            assert!(l.hear(b"ours", gone_at));
            assert!(l.ours_gone, "ours deleted at {gone_at}");
        }
        // Heard before ours was known (kept for the next wait): loss as
        // soon as ours holds.
        let mut l = Listening::default();
        assert!(!l.hear(b"ours", 12));
        l.won(b"ours", 10, true);
        assert!(l.ours_gone, "deleted at 12, after the read at 10");
        let mut l = waiting_for(b"a", &[]);
        l.won(b"ours", 12, true);
        l.target = Target::Held;
        l.hear(b"ours", 12);
        assert!(!l.ours_gone, "deleted at the read that showed it: not ours");
        l.hear(b"ours", 13);
        assert!(l.ours_gone);
    }

    fn waiting_for(key: &[u8], others: &[&[u8]]) -> Listening {
        Listening {
            ours: Some((b"ours".to_vec(), 5)),
            target: Target::Key {
                key: key.to_vec(),
                after: 5,
                others: Some(others.iter().map(|k| k.to_vec()).collect()),
                gone: false,
                last: 0,
            },
            ..Listening::default()
        }
    }

    fn concluded(l: &Listening) -> Option<i64> {
        match &l.target {
            Target::Key {
                others: Some(others),
                gone: true,
                last,
                ..
            } if others.is_empty() => Some(*last),
            _ => None,
        }
    }

    /// The key waited for deleted first, a key further ahead after it,
    /// both heard before the wait looks: ours is first only at the later
    /// deletion, which the conclusion names.
    #[test]
    fn a_conclusion_takes_the_newest_deletion_heard() {
        let mut l = waiting_for(b"b", &[b"a"]);
        assert!(l.hear(b"b", 10), "the key waited for wakes");
        assert_eq!(concluded(&l), None, "a is still ahead");
        assert!(!l.hear(b"a", 12));
        assert_eq!(concluded(&l), Some(12));
        // Heard again on a second watch, and in the other order: the same.
        let mut l = waiting_for(b"b", &[b"a"]);
        assert!(!l.hear(b"a", 12));
        assert!(l.hear(b"b", 10));
        assert!(l.hear(b"b", 10));
        assert_eq!(concluded(&l), Some(12));
    }

    /// Deletions at or before the read's revision, and of keys not
    /// followed, conclude nothing; ours after it is loss.
    #[test]
    fn only_deletions_after_the_read_of_followed_keys_count() {
        let mut l = waiting_for(b"b", &[b"a"]);
        assert!(!l.hear(b"a", 5));
        assert!(!l.hear(b"b", 4));
        assert!(!l.hear(b"reader", 9));
        assert_eq!(concluded(&l), None);
        assert!(!l.ours_gone);
        assert!(l.hear(b"ours", 11));
        assert!(l.ours_gone);
    }
}
