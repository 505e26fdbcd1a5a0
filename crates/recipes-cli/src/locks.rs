//! Several locks held while CMD runs: a multi-lock of mutexes and
//! read-write locks' sides, as one [`Held`].

use std::sync::{Arc, Mutex, MutexGuard};

use recipes_core::{Client, LockKind, Result};

use crate::backend::{Held, HeldPart, Wait};

/// Take `parts` (each name with what to take, in command-line order) all
/// or nothing; the first name gives the fence and holder, every name its
/// own [`HeldPart`].
///
/// # Errors
///
/// As for [`Client::multi_lock_of`] and the multi-lock's
/// acquisition.
pub fn multi<C: Client>(
    client: &C,
    parts: &[(String, LockKind)],
    wait: Wait,
) -> Result<Option<Held>> {
    let multi = client.multi_lock_of(&borrowed(parts))?;
    let guard = match wait {
        Wait::Forever => Some(multi.lock()?),
        Wait::AtOnce => multi.try_lock()?,
        Wait::Until(t) => multi.try_lock_until(t)?,
    };
    Ok(guard.map(|g| {
        let held: Vec<HeldPart> = parts
            .iter()
            .filter_map(|(name, _)| {
                Some(HeldPart {
                    name: name.clone(),
                    fence: g.token(name)?,
                    holder: g.holder(name)?.to_owned(),
                })
            })
            .collect();
        let first = held.first().map(|p| (p.fence, p.holder.clone()));
        let (fence, holder) = (first.as_ref().map(|f| f.0), first.map(|f| f.1));
        let lost = g.lost().clone();
        // One guard, read for the lost part's name until it is released.
        let guard = Arc::new(Mutex::new(Some(g)));
        let read = guard.clone();
        let release = move || lock(&guard).take().map_or(Ok(()), |g| g.release());
        let mut together = Held::new(fence, holder.unwrap_or_default(), lost, release);
        together.parts = held;
        together.lost_name = Some(Box::new(move || {
            lock(&read).as_ref().and_then(|g| g.lost_name())
        }));
        together
    }))
}

/// `m` locked, whether or not a holder panicked (the guard inside stays
/// usable: nothing is left half-changed under it).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `parts` as core's multi-lock takes them.
pub fn borrowed(parts: &[(String, LockKind)]) -> Vec<(&str, LockKind)> {
    parts.iter().map(|(n, k)| (n.as_str(), *k)).collect()
}
