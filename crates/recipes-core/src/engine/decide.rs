//! The engine's one decision, pure: given the contenders in queue order,
//! each with its role, does ours hold, and if not, which one entry must go
//! first? The rule belongs to the recipe, as Curator's
//! `LockInternalsDriver.getsTheLock` does: a mutex, a semaphore, a latch
//! and a read-write lock are each one [`Rule`].

/// What a contender's entry is, as its layout names it in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A mutex's (or a leader selector's) entry.
    Mutex,
    /// A semaphore's permit entry.
    Permit,
    /// A leader latch's or an election's candidate.
    Participant,
    /// A read-write lock's reader.
    Reader,
    /// A read-write lock's writer.
    Writer,
}

/// A recipe's queue rule: who among the listed contenders holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The first contender holds; each waits on the one just ahead.
    Mutex,
    /// The first candidate leads; each waits on the one just ahead.
    Latch,
    /// The first `n` hold; each waits on the one `n` places ahead (Curator's
    /// `InterProcessSemaphoreV2` permits). `0` holds nothing. Permits go in
    /// any order, so that entry may be the last of the `n` to go: with
    /// `n > 1` a driver's [`wait`](super::ContendDriver::wait) also
    /// resolves when any entry ahead of ours goes.
    Leases(usize),
    /// Many readers or one writer, fair: a reader holds when no writer is
    /// ahead of it and waits on the nearest writer ahead; a writer holds
    /// when it is first and waits on the entry just ahead. A stream of
    /// readers cannot pass a queued writer, and a release wakes only those
    /// it lets in. Entries of any other role count as writers.
    ReadWrite,
}

/// What a contender does after a read of the queue, by place in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Ours holds.
    Holds,
    /// Wait until the entry at this place is gone, then read again.
    /// Watching only it is what keeps a release from waking every waiter.
    WaitFor(usize),
}

impl Rule {
    /// How many at the head of the queue hold whatever their roles: 1 for
    /// a mutex or a latch, `n` for [`Leases(n)`](Rule::Leases); `None` for
    /// a read-write lock, where it depends on the roles. For a store that
    /// decides inside its confirming write (a script, a statement).
    pub fn holders(self) -> Option<usize> {
        match self {
            Rule::Mutex | Rule::Latch => Some(1),
            Rule::Leases(n) => Some(n),
            Rule::ReadWrite => None,
        }
    }

    /// The rule's verdict on the contender at place `ours` of `queue` (the
    /// roles in the store's order, oldest first, ours included).
    ///
    /// `queue` may be a window that ends at ours, as long as it holds every
    /// entry the rule looks at: the `n` nearest ahead for
    /// [`Leases(n)`](Rule::Leases), the one just ahead for a mutex or a
    /// latch, and for [`ReadWrite`](Rule::ReadWrite) a writer's one just
    /// ahead, a reader's nearest writer ahead (and every reader between:
    /// they may be listed or not) — so a reader that knows no writer is
    /// ahead may list ours alone, and holds. The verdict is then the same
    /// as over the whole queue.
    ///
    /// # Examples
    ///
    /// ```
    /// use recipes_core::store::engine::{Role::*, Rule, Verdict};
    /// let queue = [Reader, Writer, Reader, Reader];
    /// assert_eq!(Rule::ReadWrite.decide(&queue, 0), Verdict::Holds);
    /// assert_eq!(Rule::ReadWrite.decide(&queue, 1), Verdict::WaitFor(0));
    /// assert_eq!(Rule::ReadWrite.decide(&queue, 3), Verdict::WaitFor(1));
    /// assert_eq!(Rule::Leases(2).decide(&queue, 1), Verdict::Holds);
    /// assert_eq!(Rule::Mutex.decide(&queue, 2), Verdict::WaitFor(1));
    /// ```
    ///
    /// # Panics
    ///
    /// Never for `ours` within `queue`; `ours` past its end is a bug of
    /// the caller (the engine checks it first).
    pub fn decide(self, queue: &[Role], ours: usize) -> Verdict {
        assert!(ours < queue.len(), "ours ({ours}) outside the queue");
        let leases = match self {
            Rule::Mutex | Rule::Latch => 1,
            Rule::Leases(n) => n,
            Rule::ReadWrite => return read_write(queue, ours),
        };
        if ours < leases {
            return Verdict::Holds;
        }
        // With no leases nothing ever holds; waiting on the nearest entry
        // (ours, if first: only its deletion ends the wait) keeps the herd
        // away.
        Verdict::WaitFor(ours.saturating_sub(leases.max(1)))
    }
}

fn read_write(queue: &[Role], ours: usize) -> Verdict {
    if queue[ours] != Role::Reader {
        return match ours {
            0 => Verdict::Holds,
            _ => Verdict::WaitFor(ours - 1),
        };
    }
    match queue[..ours].iter().rposition(|r| *r != Role::Reader) {
        None => Verdict::Holds,
        Some(writer) => Verdict::WaitFor(writer),
    }
}

/// The engine's decision over a listing: [`Rule::decide`] by entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision<'a, Id> {
    /// Ours holds.
    Acquired,
    /// Wait until this entry is gone, then read again.
    WaitFor(&'a Id),
    /// Ours is not in the queue: it was deleted (by hand, or with the
    /// session). Start over with a new entry.
    Gone,
}

/// `rule`'s decision for `ours` among `contenders` (the queue in the
/// store's order, oldest first), each contender's role given by `role`.
///
/// # Examples
///
/// ```
/// use recipes_core::store::engine::{decide, Decision, Role, Rule};
/// let queue = ["a", "b", "c"];
/// let mutex = |_: &&str| Role::Mutex;
/// assert_eq!(decide(Rule::Mutex, &queue, mutex, &"a"), Decision::Acquired);
/// assert_eq!(decide(Rule::Mutex, &queue, mutex, &"c"), Decision::WaitFor(&"b"));
/// assert_eq!(decide(Rule::Leases(2), &queue, mutex, &"c"), Decision::WaitFor(&"a"));
/// assert_eq!(decide(Rule::Mutex, &queue, mutex, &"d"), Decision::Gone);
/// ```
pub fn decide<'a, Id: PartialEq>(
    rule: Rule,
    contenders: &'a [Id],
    role: impl Fn(&Id) -> Role,
    ours: &Id,
) -> Decision<'a, Id> {
    let Some(index) = contenders.iter().position(|c| c == ours) else {
        return Decision::Gone;
    };
    let roles: Vec<Role> = contenders[..=index].iter().map(role).collect();
    match rule.decide(&roles, index) {
        Verdict::Holds => Decision::Acquired,
        Verdict::WaitFor(i) => Decision::WaitFor(&contenders[i]),
    }
}

#[cfg(test)]
mod tests {
    use super::Role::{Mutex as M, Reader as R, Writer as W};
    use super::*;

    #[test]
    fn a_mutex_holds_only_at_the_head_and_waits_on_its_predecessor() {
        let q = [M, M, M, M];
        assert_eq!(Rule::Mutex.decide(&q, 0), Verdict::Holds);
        for ours in 1..4 {
            assert_eq!(Rule::Mutex.decide(&q, ours), Verdict::WaitFor(ours - 1));
        }
    }

    #[test]
    fn n_leases_hold_the_first_n_and_the_rest_wait_n_places_ahead() {
        let q = [M; 5];
        for ours in 0..3 {
            assert_eq!(Rule::Leases(3).decide(&q, ours), Verdict::Holds);
        }
        assert_eq!(Rule::Leases(3).decide(&q, 3), Verdict::WaitFor(0));
        assert_eq!(Rule::Leases(3).decide(&q, 4), Verdict::WaitFor(1));
        assert_eq!(Rule::Leases(0).decide(&q, 0), Verdict::WaitFor(0));
        assert_eq!(Rule::Leases(0).decide(&q, 1), Verdict::WaitFor(0));
    }

    #[test]
    fn readers_share_until_a_writer_and_wait_on_the_nearest_writer_ahead() {
        let q = [R, R, W, R, W, R];
        assert_eq!(Rule::ReadWrite.decide(&q, 0), Verdict::Holds);
        assert_eq!(Rule::ReadWrite.decide(&q, 1), Verdict::Holds);
        // The writer waits on the entry just ahead, a reader included.
        assert_eq!(Rule::ReadWrite.decide(&q, 2), Verdict::WaitFor(1));
        // A reader behind a writer waits for it: readers cannot starve it.
        assert_eq!(Rule::ReadWrite.decide(&q, 3), Verdict::WaitFor(2));
        assert_eq!(Rule::ReadWrite.decide(&q, 5), Verdict::WaitFor(4));
    }

    #[test]
    fn a_writer_holds_only_alone_at_the_head() {
        assert_eq!(Rule::ReadWrite.decide(&[W, R], 0), Verdict::Holds);
        assert_eq!(Rule::ReadWrite.decide(&[R, W], 1), Verdict::WaitFor(0));
        // Another recipe's entry in the queue counts as a writer.
        assert_eq!(Rule::ReadWrite.decide(&[M, R], 1), Verdict::WaitFor(0));
    }

    #[test]
    fn a_window_ending_at_ours_decides_as_the_whole_queue_does() {
        let whole = [M, M, M, M, M];
        for n in 1..=3 {
            for ours in 0..whole.len() {
                let from = ours.saturating_sub(n);
                let a = Rule::Leases(n).decide(&whole, ours);
                let b = match Rule::Leases(n).decide(&whole[from..=ours], ours - from) {
                    Verdict::WaitFor(i) => Verdict::WaitFor(i + from),
                    held => held,
                };
                assert_eq!(a, b, "ours {ours}, n {n}");
            }
        }
    }

    #[test]
    fn a_missing_entry_is_gone() {
        let role = |_: &i32| Role::Mutex;
        assert_eq!(decide::<i32>(Rule::Mutex, &[], role, &1), Decision::Gone);
        assert_eq!(decide(Rule::Leases(5), &[1, 2], role, &3), Decision::Gone);
    }

    #[test]
    fn decide_names_the_entry_the_rule_waits_on() {
        let q = [("a", R), ("b", W), ("c", R)];
        let role = |c: &(&str, Role)| c.1;
        assert_eq!(
            decide(Rule::ReadWrite, &q, role, &q[2]),
            Decision::WaitFor(&q[1])
        );
        assert_eq!(decide(Rule::ReadWrite, &q, role, &q[0]), Decision::Acquired);
    }
}
