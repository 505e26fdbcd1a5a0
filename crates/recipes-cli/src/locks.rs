//! Several locks held while CMD runs: a multi-lock of mutexes and
//! read-write locks' sides, as one [`Held`].

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
        let (lost, lost_name) = (g.lost().clone(), g.lost_name_reader());
        let mut together = Held::new(fence, holder.unwrap_or_default(), lost, move || g.release());
        together.parts = held;
        together.lost_name = Some(Box::new(lost_name));
        together
    }))
}

/// `parts` as core's multi-lock takes them.
pub fn borrowed(parts: &[(String, LockKind)]) -> Vec<(&str, LockKind)> {
    parts.iter().map(|(n, k)| (n.as_str(), *k)).collect()
}
