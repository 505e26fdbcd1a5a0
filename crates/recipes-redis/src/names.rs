//! Names and keys: what callers name (checked as on every store), and the
//! keys and script arguments of one queue (`scripts.rs` has the layout).

use recipes_core::store::quote;
use recipes_core::{Error, Result};

/// The prefix of every key of ours, one hash tag.
pub(crate) const NS: &str = "{recipes}:";

/// The counter each round of `WAIT`s increments first (`replication.rs`).
pub(crate) const REPLICATED: &str = "{recipes}:replicated";

/// Check the name of a lock, election or semaphore (`what`).
pub(crate) fn validate_name(what: &str, name: &str) -> Result<()> {
    let limit = "a name is sent in every request of the recipe";
    recipes_core::store::check_name(&format!("Redis {what} name"), name, limit, char::is_control)
}

/// Check a key that a plain read or a fenced write names, by the rules of
/// names; our own prefix is refused.
pub(crate) fn validate_key(key: &str) -> Result<()> {
    let limit = "a key is sent in every write";
    recipes_core::store::check_name("Redis key", key, limit, char::is_control)
}

/// A fresh member of a queue for the session `session`.
pub(crate) fn member(session: i64) -> String {
    format!("{session}-{}", uuid::Uuid::new_v4().simple())
}

/// Whether a hold key's `value` says `member` holds: a lock key holds
/// the member; a permit's or a read-write lock member's own key
/// `<member> <fence>`, the fence minted for it (`scripts.rs`).
pub(crate) fn holds(value: Option<&str>, member: &str) -> bool {
    value.is_some_and(|v| {
        v.strip_prefix(member)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
    })
}

/// Whether a queue's entries hold one lock key, or a key each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A mutex, an election, a semaphore's internal mutex.
    Lock,
    /// A semaphore's permits.
    Permit,
    /// A read-write lock's readers and writers: a hold key each (several
    /// readers hold at once), their roles in `{recipes}:r:<name>`.
    ReadWrite,
}

/// One queue: its name, where holding is recorded, its fence.
#[derive(Debug, Clone)]
pub(crate) struct Queue {
    /// The queue's name: the recipe's name, or `<sem>/locks`, `<sem>/leases`.
    pub(crate) name: String,
    /// The lock key, or the prefix of the permit keys.
    pub(crate) hold: String,
    pub(crate) mode: Mode,
    /// A key whose existence means the name holds another recipe.
    pub(crate) conflict: String,
    /// The size key of the semaphore whose own queue (`<sem>/locks`,
    /// `<sem>/leases`) the name would be, if it ends so: while it exists
    /// a lock or election there is refused.
    pub(crate) inside: String,
}

impl Queue {
    /// The queue of a lock or election `name`.
    pub(crate) fn lock(name: &str) -> Queue {
        Queue {
            name: name.to_owned(),
            hold: format!("{NS}lock:{name}"),
            mode: Mode::Lock,
            conflict: size_key(name),
            inside: enclosing_semaphore(name).map_or_else(String::new, size_key),
        }
    }

    /// The queue of a read-write lock `name`: the mutex's queue key (so
    /// one name is one recipe's: the scripts refuse the other), a hold key
    /// per holder.
    pub(crate) fn rw(name: &str) -> Queue {
        Queue {
            hold: format!("{NS}rw:{name}:"),
            mode: Mode::ReadWrite,
            ..Queue::lock(name)
        }
    }

    /// A semaphore's internal mutex and its permits.
    pub(crate) fn semaphore(name: &str) -> (Queue, Queue) {
        let mut lock = Queue::lock(&format!("{name}/locks"));
        lock.conflict.clear();
        lock.inside.clear();
        let leases = format!("{name}/leases");
        let permits = Queue {
            hold: format!("{NS}permit:{leases}:"),
            name: leases,
            mode: Mode::Permit,
            conflict: String::new(),
            inside: String::new(),
        };
        (lock, permits)
    }

    /// ns, queue, hold, mode, member: the arguments every queue script
    /// opens with.
    pub(crate) fn args(&self, member: &str) -> Vec<String> {
        let mode = match self.mode {
            Mode::Lock => "lock",
            Mode::Permit => "permit",
            Mode::ReadWrite => "rw",
        };
        let (name, hold) = (self.name.clone(), self.hold.clone());
        vec![NS.into(), name, hold, mode.into(), member.into()]
    }

    /// The key that holds `member` once it holds.
    pub(crate) fn hold_key(&self, member: &str) -> String {
        match self.mode {
            Mode::Lock => self.hold.clone(),
            Mode::Permit | Mode::ReadWrite => format!("{}{member}", self.hold),
        }
    }

    /// The fence counter.
    pub(crate) fn fence_key(&self) -> String {
        format!("{NS}fence:{}", self.name)
    }

    /// A read-write lock's roles: member → `read` | `write`. It exists
    /// while the name's queue holds a read-write lock's members.
    pub(crate) fn role_key(&self) -> String {
        format!("{NS}r:{}", self.name)
    }

    /// What the queue is, with its article, as refusals name it.
    pub(crate) fn recipe(&self) -> &'static str {
        match self.mode {
            Mode::Lock => "a lock or election",
            Mode::Permit => "a semaphore",
            Mode::ReadWrite => "a read-write lock",
        }
    }

    /// The member of a listed contender: a read-write lock's are listed
    /// as `<role> <member>` (members have no space).
    pub(crate) fn member_of(listed: &str) -> &str {
        listed.rsplit_once(' ').map_or(listed, |(_, member)| member)
    }

    /// How `member` of `role` is listed: as [`member_of`](Queue::member_of)
    /// reads it.
    pub(crate) fn listed(&self, member: &str, role: &[u8]) -> String {
        match self.mode {
            Mode::ReadWrite => format!("{} {member}", String::from_utf8_lossy(role)),
            _ => member.to_owned(),
        }
    }

    /// The queue's sorted set.
    pub(crate) fn queue_key(&self) -> String {
        format!("{NS}q:{}", self.name)
    }

    /// How a holder is shown: `<queue>/<member>`.
    pub(crate) fn holder(&self, member: &str) -> String {
        format!("{}/{member}", self.name)
    }

    /// Where the member waiting behind `member` listens (a lock's), or a
    /// permit waiter and observers listen (the queue's).
    pub(crate) fn channel(&self, ahead: &str) -> String {
        match self.mode {
            Mode::Lock | Mode::ReadWrite => format!("{NS}gone:{ahead}"),
            Mode::Permit => self.wake_channel(),
        }
    }

    /// Published on whenever an entry of the queue goes.
    pub(crate) fn wake_channel(&self) -> String {
        format!("{NS}wake:{}", self.name)
    }
}

/// Where a semaphore's size lives.
pub(crate) fn size_key(name: &str) -> String {
    format!("{NS}size:{name}")
}

/// The semaphore whose own queues (`<sem>/locks`: its internal mutex,
/// `<sem>/leases`: its permits) `name` would be, if it is one of them.
pub(crate) fn enclosing_semaphore(name: &str) -> Option<&str> {
    let (semaphore, last) = name.rsplit_once('/')?;
    (!semaphore.is_empty() && matches!(last, "locks" | "leases")).then_some(semaphore)
}

/// A lock or election `name` would be inside the semaphore `semaphore`'s
/// queues, which its size key shows.
pub(crate) fn inside_semaphore(name: &str) -> Error {
    let semaphore = enclosing_semaphore(name).unwrap_or(name);
    Error::invalid(format!(
        "the Redis name {} is part of the semaphore {} (its key {}): a lock or election \
         there would join the semaphore's own queue; choose a name outside it",
        quote(name),
        quote(semaphore),
        quote(&size_key(semaphore))
    ))
}

/// The name `name` holds `theirs` (with its article: "a semaphore"), so
/// `ours` cannot use it.
pub(crate) fn other_layout(name: &str, ours: &str, theirs: &str) -> Error {
    Error::invalid(format!(
        "the Redis name {} already holds {theirs}, so {ours} cannot use it; choose another \
         name for {ours}",
        quote(name)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_name_their_session_and_are_fresh() {
        let (a, b) = (member(42), member(42));
        assert!(a.starts_with("42-"));
        assert_ne!(a, b);
    }

    #[test]
    fn a_hold_value_names_its_member_alone_or_with_its_fence() {
        assert!(holds(Some("1-x"), "1-x") && holds(Some("1-x 17"), "1-x"));
        assert!(!holds(Some("1-xy"), "1-x") && !holds(Some("1-xy 17"), "1-x"));
        assert!(!holds(None, "1-x") && !holds(Some("2-x 17"), "1-x"));
    }

    #[test]
    fn a_semaphores_queues_live_below_its_name() {
        let (lock, permits) = Queue::semaphore("/s");
        assert_eq!(lock.name, "/s/locks");
        assert!(lock.conflict.is_empty());
        assert!(lock.inside.is_empty());
        assert!(REPLICATED.starts_with(NS));
        assert_eq!(Queue::lock("/s/locks").inside, "{recipes}:size:/s");
        assert_eq!(Queue::lock("/s/leases").inside, "{recipes}:size:/s");
        assert!(Queue::lock("/s/other").inside.is_empty());
        assert!(Queue::lock("/locks").inside.is_empty());
        assert_eq!(permits.hold_key("1-x"), "{recipes}:permit:/s/leases:1-x");
        assert_eq!(Queue::lock("/a").hold_key("1-x"), "{recipes}:lock:/a");
        assert_eq!(Queue::lock("/a").holder("1-x"), "/a/1-x");
    }

    #[test]
    fn a_read_write_lock_shares_the_mutex_queue_and_holds_a_key_per_holder() {
        let (rw, lock) = (Queue::rw("/s/locks"), Queue::lock("/s/locks"));
        assert_eq!(rw.queue_key(), lock.queue_key());
        assert_eq!(rw.fence_key(), lock.fence_key());
        assert_eq!(rw.role_key(), "{recipes}:r:/s/locks");
        assert_eq!(rw.hold_key("1-x"), "{recipes}:rw:/s/locks:1-x");
        assert_eq!(rw.conflict, "{recipes}:size:/s/locks");
        assert_eq!(rw.inside, "{recipes}:size:/s");
        assert_eq!(rw.channel("1-x"), "{recipes}:gone:1-x");
        let listed = rw.listed("1-x", b"read");
        assert_eq!(listed, "read 1-x");
        assert_eq!(Queue::member_of(&listed), "1-x");
        assert_eq!(Queue::member_of("1-x"), "1-x");
        assert_eq!(lock.listed("1-x", b""), "1-x");
    }

    #[test]
    fn a_name_of_another_recipe_is_refused_in_plain_words() {
        let e = other_layout("/n", "a semaphore", "a lock or election").to_string();
        assert!(e.contains("choose another name for a semaphore"), "{e}");
        assert!(!e.contains("the a "), "{e}");
    }
}
