//! Group membership, as Curator's `GroupMember`: members join under an id
//! with their data and stay while their session lives; anyone reads the
//! members with a version, or watches them change. Blocking calls over
//! [`engine::group`](crate::engine::group).
//!
//! What a view can tell: who was a member at the moment of the read, and
//! (by its version) whether it is older than another view. What it cannot
//! tell: that a member listed is still alive now — a member whose process
//! died stays listed until its session expires (within its TTL), and a
//! paused member may already have been told it is lost
//! ([`Membership::lost`]) while others still list it.

use std::fmt;
use std::time::{Duration, Instant};

use crate::barrier::{blocking, remove_in_background, OnRuntime};
use crate::engine::group::{self, GroupStore, Joined};
use crate::error::{Error, Result};
use crate::group_claims::Claim;
use crate::guard::deadline_after;
use crate::limits::quote;
use crate::loss::LossSignal;

pub use crate::engine::group::{GroupView, Member};

/// The longest member id, in bytes, on every store.
pub const MAX_MEMBER_ID_BYTES: usize = 255;

/// The most data a member holds, in bytes, on every store (a view reads
/// every member's data).
pub const MAX_MEMBER_DATA_BYTES: usize = 65_536;

/// Check a member id and its data, saying what to change: the same rules
/// on every store, before anything is written.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for an empty id, one longer than
/// [`MAX_MEMBER_ID_BYTES`], one holding `/` or a control character, `.`
/// or `..`; data over [`MAX_MEMBER_DATA_BYTES`].
pub fn check_member(group: &str, id: &str, data: &[u8]) -> Result<()> {
    let refuse = |why: &str| {
        Err(Error::invalid(format!(
            "the member id {} of the group {} {why}",
            quote(id),
            quote(group)
        )))
    };
    if id.is_empty() {
        return refuse("is empty: give a member id of 1 to 255 bytes");
    }
    if id.len() > MAX_MEMBER_ID_BYTES {
        return refuse(&format!(
            "is {} bytes, over the limit of {MAX_MEMBER_ID_BYTES} bytes on every store: give \
             a shorter id",
            id.len()
        ));
    }
    if id.contains('/') || id.chars().any(char::is_control) || id == "." || id == ".." {
        return refuse(
            "holds '/' or a control character, or is '.' or '..': a member id is one path \
             part on every store; choose another",
        );
    }
    if data.len() > MAX_MEMBER_DATA_BYTES {
        return Err(Error::invalid(format!(
            "the data of the member {} of the group {} is {} bytes, over the limit of \
             {MAX_MEMBER_DATA_BYTES} bytes on every store; store a smaller value (or a \
             reference to the data)",
            quote(id),
            quote(group),
            data.len()
        )));
    }
    Ok(())
}

/// The error of a join whose id another member holds.
pub fn id_taken(group: &str, id: &str) -> Error {
    Error::invalid(format!(
        "the member id {} is already in the group {} (another member holds it; a join never \
         takes a member over): choose another id, or wait until that member leaves",
        quote(id),
        quote(group)
    ))
}

/// A group (Curator's `GroupMember`, kazoo's `Party`): see the module's
/// documentation for what a view can and cannot tell.
pub struct Group<B: GroupStore + OnRuntime> {
    backend: B,
}

impl<B: GroupStore + OnRuntime + fmt::Debug> fmt::Debug for Group<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("backend", &self.backend)
            .finish()
    }
}

impl<B: GroupStore + OnRuntime> Group<B> {
    /// A group over `backend`.
    pub fn from_backend(backend: B) -> Group<B> {
        Group { backend }
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        self.backend.name()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Join as `id` holding `data`, for as long as the returned guard and
    /// the client's session live.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an id or data [`check_member`]
    /// refuses, an id another member holds (nothing changed), a name
    /// holding another recipe's layout; [`Error::Timeout`] when the store
    /// did not answer within the request timeout; backend errors. Nothing
    /// of ours is left in the store after an error.
    pub fn join(&self, id: &str, data: &[u8]) -> Result<Membership<B>> {
        check_member(self.name(), id, data)?;
        // Before anything is sent: the store cannot tell our own
        // memberships apart (`group_claims`).
        let claim = Claim::take(self.backend.runtime(), self.name(), id)
            .ok_or_else(|| id_taken(self.name(), id))?;
        let timeout = self.backend.rpc_timeout();
        let deadline = deadline_after(timeout);
        let (b, owned_id, owned_data) = (self.backend.clone(), id.to_owned(), data.to_vec());
        let joined = blocking(&self.backend, "group join", deadline, async move {
            let deadline = deadline.map(tokio::time::Instant::from_std);
            // Boxed: unboxed, this block's layout nests the store's
            // future so deep that rustc's query depth (128) overflows in
            // a crate calling `join` on PostgreSQL's group.
            Box::pin(group::join(&b, &owned_id, &owned_data, deadline)).await
        })?;
        let joined = joined.ok_or_else(|| Error::Timeout {
            what: format!("joining the group {}", quote(self.name())),
            after: timeout,
        })?;
        claim.joined(&joined.lost);
        Ok(Membership {
            backend: self.backend.clone(),
            id: id.to_owned(),
            data: data.to_vec(),
            joined: Some(joined),
            claim: Some(claim),
        })
    }

    /// The members now, with the view's version.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name holding another recipe's
    /// layout; [`Error::Timeout`] when the store did not answer within the
    /// request timeout; backend errors.
    pub fn members(&self) -> Result<GroupView> {
        let timeout = self.backend.rpc_timeout();
        let deadline = deadline_after(timeout);
        let b = self.backend.clone();
        let view = blocking(&self.backend, "group members", deadline, async move {
            group::view(&b, deadline.map(tokio::time::Instant::from_std)).await
        })?;
        view.ok_or_else(|| Error::Timeout {
            what: format!("reading the group {}", quote(self.name())),
            after: timeout,
        })
    }

    /// A watch of the group's changes from its current view on.
    ///
    /// # Errors
    ///
    /// As for [`members`](Group::members).
    pub fn watch(&self) -> Result<GroupWatch<B>> {
        Ok(GroupWatch {
            backend: self.backend.clone(),
            last: self.members()?,
        })
    }
}

/// Our member of a group. Its [`lost`](Membership::lost) signal fires when
/// the member may be gone with its session, or its entry is gone; [`release`](Membership::release)
/// and `Drop` remove it (`Drop` in the background).
pub struct Membership<B: GroupStore + OnRuntime> {
    backend: B,
    id: String,
    data: Vec<u8>,
    joined: Option<Joined<B>>,
    /// The id held for this client until our member's removal ended
    /// (`group_claims`).
    claim: Option<Claim>,
}

impl<B: GroupStore + OnRuntime> Membership<B> {
    /// Our id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The data we joined with.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The group's name.
    pub fn group(&self) -> &str {
        self.backend.name()
    }

    /// Fires when our member may be gone with its session (its lease may
    /// have run out, the session expired, the client closed) — before
    /// the store removes it, while the clocks run within their bounds —
    /// and when the store shows our member's entry gone while the session
    /// lives (deleted by hand, lost with a restore or a flush:
    /// [`LossReason::Deleted`](crate::LossReason::Deleted)), within the
    /// store's watch or poll of it.
    pub fn lost(&self) -> &LossSignal {
        &self.joined().lost
    }

    /// Whether [`lost`](Membership::lost) fired.
    pub fn is_lost(&self) -> bool {
        self.lost().is_lost()
    }

    fn joined(&self) -> &Joined<B> {
        self.joined
            .as_ref()
            .expect("the member is present until released or dropped")
    }

    /// Leave the group, waiting until the store confirmed (or our session
    /// is gone, which removes the member too), at most the RPC timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Indeterminate`] when the store did not confirm within the
    /// RPC timeout: the removal goes on in the background, and the end of
    /// our session removes the member in any case. [`Error::Closed`] when
    /// the client is closed (its session's end removes the member).
    pub fn release(mut self) -> Result<()> {
        let joined = self
            .joined
            .take()
            .expect("the member is present until released or dropped");
        let (b, timeout) = (self.backend.clone(), self.backend.rpc_timeout());
        // Held to the end of the leave (an unconfirmed one goes on in
        // the background without it: see `group_claims`).
        let claim = self.claim.take();
        blocking(&self.backend, "group leave", None, async move {
            let _claim = claim;
            if group::leave(&b, joined, timeout).await {
                return Ok(());
            }
            Err(Error::Indeterminate {
                what: format!(
                    "leaving the group: the store did not confirm within {timeout:?}; the \
                     removal goes on in the background, and the session's end removes the \
                     member in any case"
                ),
            })
        })
    }
}

impl<B: GroupStore + OnRuntime> Drop for Membership<B> {
    fn drop(&mut self) {
        if let Some(joined) = self.joined.take() {
            // The id stays claimed until the removal ended: a join of it
            // meanwhile would find our member and could take it for its
            // own (`group_claims`).
            let claim = self.claim.take();
            let removal = B::remove(joined.ticket);
            remove_in_background(&self.backend, async move {
                removal.await;
                drop(claim);
            });
        }
    }
}

impl<B: GroupStore + OnRuntime> fmt::Debug for Membership<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Membership")
            .field("group", &self.backend.name())
            .field("id", &self.id)
            .field("joined", &self.joined)
            .finish()
    }
}

/// One change a [`GroupWatch`] saw: the new view, and what differs from
/// the one before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupChange {
    /// The group now.
    pub view: GroupView,
    /// Ids in this view and not in the previous one, in order.
    pub joined: Vec<String>,
    /// Ids in the previous view and not in this one, in order.
    pub left: Vec<String>,
    /// Joins and leaves between the two views that the difference does not
    /// show (a member that joined and left again): `Some(0)` when none was
    /// missed, `None` when the store does not count them (etcd) or the
    /// group was created again in between.
    pub missed: Option<u64>,
}

impl GroupChange {
    fn between(before: &GroupView, view: GroupView) -> GroupChange {
        let joined: Vec<String> = view
            .members
            .iter()
            .filter(|m| !before.contains(&m.id))
            .map(|m| m.id.clone())
            .collect();
        let left: Vec<String> = before
            .members
            .iter()
            .filter(|m| !view.contains(&m.id))
            .map(|m| m.id.clone())
            .collect();
        let shown = (joined.len() + left.len()) as u64;
        let missed = match (before.changes, view.changes) {
            (Some(a), Some(b)) if b >= a && b - a >= shown => Some(b - a - shown),
            _ => None,
        };
        GroupChange {
            view,
            joined,
            left,
            missed,
        }
    }
}

/// The changes of a group in order, each with its view's version and what
/// it missed; see [`Group::watch`]. Waits on the store's notification.
pub struct GroupWatch<B: GroupStore + OnRuntime> {
    backend: B,
    last: GroupView,
}

impl<B: GroupStore + OnRuntime> fmt::Debug for GroupWatch<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupWatch")
            .field("group", &self.backend.name())
            .field("last", &self.last)
            .finish()
    }
}

impl<B: GroupStore + OnRuntime> GroupWatch<B> {
    /// The view the watch saw last.
    pub fn last(&self) -> &GroupView {
        &self.last
    }

    /// The next change, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// As for [`Group::members`].
    pub fn next_change(&mut self) -> Result<GroupChange> {
        loop {
            if let Some(change) = self.next_within(None)? {
                return Ok(change);
            }
        }
    }

    /// The next change, waiting at most `timeout` (zero: a look now);
    /// `Ok(None)` on timeout.
    ///
    /// # Errors
    ///
    /// As for [`Group::members`]; a timeout above the limit.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<GroupChange>> {
        if !timeout.is_zero() {
            crate::limits::check_timeout("wait", timeout)?;
        }
        self.next_within(deadline_after(timeout))
    }

    fn next_within(&mut self, deadline: Option<Instant>) -> Result<Option<GroupChange>> {
        let (b, last) = (self.backend.clone(), self.last.clone());
        let view = blocking(&self.backend, "group watch", deadline, async move {
            group::next_view(&b, &last, deadline.map(tokio::time::Instant::from_std)).await
        })?;
        Ok(view.map(|view| {
            let change = GroupChange::between(&self.last, view);
            self.last = change.view.clone();
            change
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(ids: &[&str], changes: Option<u64>) -> GroupView {
        GroupView {
            members: ids
                .iter()
                .map(|id| Member {
                    id: (*id).to_owned(),
                    data: Vec::new(),
                })
                .collect(),
            version: 1,
            changes,
        }
    }

    #[test]
    fn a_change_names_joins_and_leaves_and_what_it_missed() {
        let c = GroupChange::between(&view(&["a", "b"], Some(2)), view(&["b", "c"], Some(6)));
        assert_eq!(c.joined, ["c"]);
        assert_eq!(c.left, ["a"]);
        assert_eq!(c.missed, Some(2));
        let c = GroupChange::between(&view(&["a"], None), view(&[], None));
        assert_eq!(c.missed, None);
        let recreated = GroupChange::between(&view(&["a"], Some(9)), view(&["b"], Some(1)));
        assert_eq!(recreated.missed, None);
    }

    #[test]
    fn member_ids_and_data_are_checked_the_same_everywhere() {
        assert!(check_member("g", "a", b"x").is_ok());
        for bad in ["", "a/b", ".", "..", "a\nb", &"x".repeat(256)] {
            let e = check_member("g", bad, b"").unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad:?}: {e}");
        }
        let big = vec![0; MAX_MEMBER_DATA_BYTES + 1];
        assert!(check_member("g", "a", &big).is_err());
        assert!(check_member("g", &"x".repeat(255), &big[1..]).is_ok());
    }
}
