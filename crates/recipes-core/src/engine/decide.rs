//! The engine's one decision, pure: given the contenders in queue order,
//! does ours hold, and if not, which one entry must go first?

/// What a contender does after a read of the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision<'a, Id> {
    /// Ours is among the first `max_leases`: it holds.
    Acquired,
    /// Wait until this entry (`max_leases` places ahead of ours) is gone,
    /// then read again. Watching only it is what keeps a release from
    /// waking every waiter.
    WaitFor(&'a Id),
    /// Ours is not in the queue: it was deleted (by hand, or with the
    /// session). Start over with a new entry.
    Gone,
}

/// Curator's `getsTheLock`: ours holds when fewer than `max_leases`
/// contenders are ahead of it.
///
/// `contenders` is the queue in the store's order, oldest first, ours
/// included. It may be a window that ends at ours, as long as it holds every
/// contender ahead of ours or at least the `max_leases` nearest to it: the
/// decision then is the same as over the whole queue.
///
/// A `max_leases` of 0 holds nothing: every contender waits.
///
/// # Examples
///
/// ```
/// use recipes_core::engine::{gets_the_lock, Decision};
/// let queue = ["a", "b", "c"];
/// assert_eq!(gets_the_lock(&queue, &"a", 1), Decision::Acquired);
/// assert_eq!(gets_the_lock(&queue, &"c", 1), Decision::WaitFor(&"b"));
/// assert_eq!(gets_the_lock(&queue, &"c", 2), Decision::WaitFor(&"a"));
/// assert_eq!(gets_the_lock(&queue, &"c", 3), Decision::Acquired);
/// assert_eq!(gets_the_lock(&queue, &"d", 1), Decision::Gone);
/// ```
pub fn gets_the_lock<'a, Id: PartialEq>(
    contenders: &'a [Id],
    ours: &Id,
    max_leases: usize,
) -> Decision<'a, Id> {
    let Some(index) = contenders.iter().position(|c| c == ours) else {
        return Decision::Gone;
    };
    if index < max_leases {
        return Decision::Acquired;
    }
    // With max_leases 0 nothing ever holds; waiting on the nearest entry
    // (ours, if first: only its deletion ends the wait) keeps the herd away.
    let ahead = index.saturating_sub(max_leases.max(1));
    Decision::WaitFor(&contenders[ahead])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mutex_holds_only_at_the_head_and_waits_on_its_predecessor() {
        let q = [1, 2, 3, 4];
        assert_eq!(gets_the_lock(&q, &1, 1), Decision::Acquired);
        for (ours, ahead) in [(2, 1), (3, 2), (4, 3)] {
            assert_eq!(gets_the_lock(&q, &ours, 1), Decision::WaitFor(&ahead));
        }
    }

    #[test]
    fn n_leases_hold_the_first_n_and_the_rest_wait_n_places_ahead() {
        let q = [1, 2, 3, 4, 5];
        for ours in [1, 2, 3] {
            assert_eq!(gets_the_lock(&q, &ours, 3), Decision::Acquired);
        }
        assert_eq!(gets_the_lock(&q, &4, 3), Decision::WaitFor(&1));
        assert_eq!(gets_the_lock(&q, &5, 3), Decision::WaitFor(&2));
    }

    #[test]
    fn a_window_ending_at_ours_decides_as_the_whole_queue_does() {
        let whole = [10, 20, 30, 40, 50];
        for max in 1..=3 {
            for (i, ours) in whole.iter().enumerate() {
                let from = i.saturating_sub(max);
                let window = &whole[from..=i];
                let a = gets_the_lock(&whole, ours, max);
                let b = gets_the_lock(window, ours, max);
                assert_eq!(a, b, "ours {ours}, max {max}");
            }
        }
    }

    #[test]
    fn a_missing_entry_is_gone_and_zero_leases_hold_nothing() {
        assert_eq!(gets_the_lock::<i32>(&[], &1, 1), Decision::Gone);
        assert_eq!(gets_the_lock(&[1, 2], &3, 5), Decision::Gone);
        assert_eq!(gets_the_lock(&[1, 2], &1, 0), Decision::WaitFor(&1));
        assert_eq!(gets_the_lock(&[1, 2], &2, 0), Decision::WaitFor(&1));
    }
}
