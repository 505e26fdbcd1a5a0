//! The contend driver of etcd's `concurrency` layout, shared by the mutex,
//! the election (and so the latch and the selector) and a semaphore's
//! internal mutex: the engine's verbs over one key `<prefix><lease hex>`;
//! and of the permit and read-write layouts (`permit.rs`, `rw_queue.rs`),
//! which differ in how their key is named, created and listed. The loop
//! is the engine's ([`recipes_core::store::engine::contend`]).
//!
//! - **enter**: an interest in the name's deletions on the client's one
//!   watch stream (`hub`: no request; a read-write lock's reader: in its
//!   writers' and its lease's reader keys' deletions, see
//!   [`KeyContender::interest`]), then one transaction — if our key does
//!   not exist, put it with our lease; either way read the contenders
//!   (`listing.rs`). Our key's deletion after it is loss, while we wait
//!   and after we hold.
//! - **list**: one read of the contenders created up to ours — or none,
//!   when the wait before heard every key ahead of ours deleted (no key
//!   is ever created ahead of ours): the listing is then ours alone, at
//!   the revision of the last of those deletions.
//! - **wait**: for the contender ahead (a permit: any key) or our key to
//!   be deleted after the revision of the read that showed them, noting
//!   which of the other keys ahead were deleted meanwhile.
//! - **confirm**: the fence is the listing's revision — for a campaign
//!   too: no earlier than the previous holder's key's deletion, so after
//!   every write of the previous term, and no request of ours lies between
//!   the wake and the win.
//! - **remove**: delete our key, guarded by its `create_revision` once
//!   known, retrying until done or the session is lost.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use recipes_core::store::engine::{ContendDriver, Entered, Listing, Role, Rule};
use recipes_core::store::LeaseEpoch;
use recipes_core::{LossSignal, Result};
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::hub::{Interest, FOLLOWED_AHEAD};
use crate::key::{guarded, Acquired, Ticket};
use crate::listing::{list, listing, oldest_first};
use crate::names::{
    contender_key, enclosing_semaphore, inside_semaphore, lease_readers, other_layout, permit_key,
    read_prefix, rw_key, size_key, write_prefix, Key,
};
use crate::rpc::{header_revision, read_at, retrying_txn, unexpected};
use crate::rw_queue::{downgrade_of, none_under, one_under, RwQueue};
use crate::semaphore::SemaphoreKeys;
use crate::session::{lease_gone, Etcd, Session};

/// How an acquisition keeps clear of this process's other acquisitions of
/// the name (see the `session` module).
#[derive(Clone, Copy)]
pub(crate) enum Via {
    /// A handle's (after the handle's turn): a session whose turn at the
    /// name is free — the client's, or a single-use one.
    Handle,
    /// Wait for the turn at the name on the client's own session (a
    /// semaphore's internal mutex).
    ClientSession,
}

/// What a contender's key holds, and so what confirms that it won (see
/// **confirm** above).
#[derive(Clone, Copy)]
pub(crate) enum Claim<'a> {
    /// A mutex's key, with no value.
    Lock,
    /// An election candidate's key, with this value.
    Campaign(&'a [u8]),
}

impl<'a> Claim<'a> {
    fn value(self) -> &'a [u8] {
        match self {
            Claim::Lock => &[],
            Claim::Campaign(value) => value,
        }
    }
}

/// One acquisition's driver of the contend engine, in one of the two
/// layouts.
pub(crate) struct KeyContender<'a> {
    pub(crate) client: &'a EtcdClient,
    /// Where the contenders' keys live.
    pub(crate) prefix: &'a str,
    pub(crate) layout: Layout<'a>,
}

/// Which keys contend, and how they are created, read and waited for.
#[derive(Clone, Copy)]
pub(crate) enum Layout<'a> {
    /// The key `<prefix><lease hex>` of a lock or campaign named `name`.
    Key {
        name: &'a str,
        via: Via,
        claim: Claim<'a>,
    },
    /// A semaphore's permit keys (`permit.rs`).
    Permits(&'a SemaphoreKeys),
    /// A read-write lock's reader or writer (`rw_queue.rs`).
    ReadWrite(&'a RwQueue),
}

/// A session and this process's turn at the name on it, until the ticket
/// takes the turn.
pub(crate) type KeyEpoch = LeaseEpoch<Etcd>;

/// Our key while it contends.
pub(crate) struct KeyEntry {
    pub(crate) key: String,
    id: Key,
    pub(crate) create_revision: i64,
    /// The deletions the waits and our key's loss listen to, since before
    /// the create.
    interest: Interest,
    /// The prefix of the watch that hears our key.
    heard_on: String,
    /// The revision of the last read of the contenders.
    read_at: i64,
    /// The contenders ahead of ours at that read.
    ahead: Vec<Vec<u8>>,
    /// The revision at which a wait heard every key ahead deleted: ours is
    /// first there (the next listing is that, with no read).
    first_at: Option<i64>,
    /// The last listing was that one, not a read.
    concluded: bool,
}

impl KeyEntry {
    /// Keep what a listing showed ahead of ours.
    fn listed(&mut self, listing: &Listing<Key>) {
        self.read_at = listing.revision;
        self.ahead.clear();
        let ahead = listing.contenders.iter().take_while(|k| **k != self.id);
        self.ahead.extend(ahead.map(|k| k.0.clone()));
    }
}

impl KeyContender<'_> {
    fn put(&self, key: &str, lease: i64, claim: Claim<'_>) -> TxnOp {
        let options = PutOptions::new().with_lease(lease);
        TxnOp::put(key, claim.value().to_vec(), Some(options))
    }

    /// Create our key (`claim`'s) and read the contenders in the same
    /// transaction: its `create_revision`, and the first listing. A
    /// semaphore's size key under the prefix is
    /// [`Error::InvalidArgument`](recipes_core::Error), with nothing
    /// created: the name holds a semaphore, whose permits no lock sees.
    async fn create_key(
        &self,
        session: &Session,
        ticket: &mut Ticket,
        claim: Claim<'_>,
    ) -> Result<(i64, Option<Listing<Key>>)> {
        let (etcd, timeout) = (session.store_ref()?, session.rpc_timeout());
        let key = ticket.key.clone();
        let oldest = oldest_first();
        let size = size_key(self.prefix);
        let keys_only = || Some(GetOptions::new().with_keys_only());
        // A read-write lock's keys below the prefix: Go's mutex counts
        // them, ours would not.
        let (readers, writers) = (read_prefix(self.prefix), write_prefix(self.prefix));
        let mut when = vec![
            Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
            Compare::create_revision(size.as_str(), CompareOp::Equal, 0),
            none_under(&readers),
            none_under(&writers),
        ];
        let mut otherwise = vec![
            TxnOp::get(key.as_str(), None),
            TxnOp::get(self.prefix, Some(oldest.clone())),
            TxnOp::get(size.as_str(), keys_only()),
            one_under(&readers),
            one_under(&writers),
        ];
        // A lock or election of the user's named like a semaphore's own
        // (`<sem>/locks`, `<sem>/leases`) would join that semaphore's queue.
        let enclosing = match self.layout {
            Layout::Key {
                name,
                via: Via::Handle,
                ..
            } => enclosing_semaphore(name),
            _ => None,
        };
        if let Some((_, outer_size)) = &enclosing {
            when.push(Compare::create_revision(
                outer_size.as_str(),
                CompareOp::Equal,
                0,
            ));
            otherwise.push(TxnOp::get(outer_size.as_str(), keys_only()));
        }
        let txn = Txn::new()
            .when(when)
            .and_then([
                self.put(&key, session.id(), claim),
                TxnOp::get(self.prefix, Some(oldest)),
            ])
            .or_else(otherwise);
        let what = format!("enter {}", self.prefix);
        // Safe to send twice: a second run finds our key and reads it.
        let resp = retrying_txn(etcd, &what, timeout, &txn)
            .await
            .map_err(|e| lease_gone(session, e))?;
        let header = header_revision(&resp)?;
        let first = |rev| {
            Ok(listing(
                read_at(&resp, 1)?.kvs(),
                self.prefix,
                &key,
                rev,
                header,
            ))
        };
        if resp.succeeded() {
            return Ok((header, Some(first(header)?)));
        }
        let ours = "a lock or election";
        if let Some(kv) = read_at(&resp, 2)?.kvs().first() {
            return Err(other_layout(self.prefix, ours, "a semaphore", kv.key()));
        }
        for at in [3, 4] {
            if let Some(kv) = read_at(&resp, at)?.kvs().first() {
                let theirs = "a read-write lock";
                return Err(other_layout(self.prefix, ours, theirs, kv.key()));
            }
        }
        if let Some((semaphore, _)) = &enclosing {
            if let Some(kv) = read_at(&resp, 5)?.kvs().first() {
                return Err(inside_semaphore(self.prefix, semaphore, kv.key()));
            }
        }
        // Our key existed (a leftover of this lease, held by no guard of
        // ours: this process's turns see to that). Go on with it as Go
        // does, with our value — and on our lease: a key of our name put
        // by someone else without it would outlive our session, the lock
        // stuck for everyone.
        let existing = read_at(&resp, 0)?;
        let Some(kv) = existing.kvs().first() else {
            return Err(unexpected("our key vanished inside a transaction"));
        };
        let rev = kv.create_revision();
        ticket.create_revision = Some(rev);
        let put = self.put(&key, session.id(), claim);
        let stray = kv.value() != claim.value() || kv.lease() != session.id();
        if stray && guarded(etcd, timeout, &key, rev, put).await?.is_none() {
            // Gone since: a listing without ours starts over.
            return Ok((rev, Some(first(0)?)));
        }
        Ok((rev, Some(first(rev)?)))
    }
}

impl KeyContender<'_> {
    /// A read-write lock's reader's acquisition.
    fn reads(&self) -> bool {
        matches!(self.layout, Layout::ReadWrite(RwQueue { write: false, .. }))
    }

    /// The interest an acquisition on `lease` registers before its create,
    /// and the prefix whose watch hears its key. A reader waits only for
    /// writers (core's `Rule::ReadWrite`): it hears the writers' keys, and
    /// its own on its lease's reader keys, so that no reader's release is
    /// sent to another reader's client; a writer, a lock, a permit hear
    /// the whole name.
    fn interest(&self, lease: i64) -> (Interest, String) {
        let watches = self.client.watches();
        if !self.reads() {
            return (watches.interest(self.prefix), self.prefix.to_owned());
        }
        let (ours, writers) = (lease_readers(self.prefix, lease), write_prefix(self.prefix));
        (watches.interest_in(&ours, &[&writers]), ours)
    }
}

impl ContendDriver for KeyContender<'_> {
    type Epoch = KeyEpoch;
    type Ticket = Ticket;
    type Entry = KeyEntry;
    type Id = Key;
    type Won = Acquired;

    fn rule(&self) -> Rule {
        match self.layout {
            Layout::Key { .. } => Rule::Mutex,
            Layout::Permits(sem) => Rule::Leases(sem.permits as usize),
            Layout::ReadWrite(_) => Rule::ReadWrite,
        }
    }

    fn role(&self, id: &Key) -> Role {
        match self.layout {
            Layout::ReadWrite(queue) => queue.role(self.prefix, id),
            _ => Role::Mutex,
        }
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        if !self.client.runtime().spawn(task) {
            log::debug!("[{}] client closed: the lease removes the key", self.prefix);
        }
    }

    fn rpc_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }

    async fn epoch(&self, deadline: Option<Instant>) -> Result<Option<KeyEpoch>> {
        let leases = self.client.leases();
        match self.layout {
            Layout::Key {
                name,
                via: Via::Handle,
                ..
            } => leases.epoch_for(name).await.map(Some),
            Layout::Key { name, .. } => leases.epoch_waiting(name, deadline).await,
            // Every permit or read-write key is distinct: no turn at a
            // name to wait for.
            Layout::Permits(_) | Layout::ReadWrite(_) => leases.epoch().await.map(Some),
        }
    }

    fn epoch_signal(&self, epoch: &KeyEpoch) -> LossSignal {
        epoch.session.epoch().signal()
    }

    fn ticket(&self, epoch: &KeyEpoch) -> Ticket {
        let lease = epoch.session.id();
        let key = match self.layout {
            Layout::Key { .. } => contender_key(self.prefix, lease),
            Layout::Permits(_) => permit_key(self.prefix, lease),
            Layout::ReadWrite(queue) => rw_key(self.prefix, queue.write, lease),
        };
        Ticket {
            session: epoch.session.clone(),
            key,
            create_revision: None,
            turn: epoch.take_turn(),
        }
    }

    async fn enter(&self, epoch: &KeyEpoch, ticket: &mut Ticket) -> Result<Entered<Self>> {
        let session = &epoch.session;
        let key = ticket.key.clone();
        // Before the create: every deletion after its reply is heard.
        let (interest, heard_on) = self.interest(session.id());
        let (create_revision, first) = match self.layout {
            Layout::Key { claim, .. } => self.create_key(session, ticket, claim).await?,
            Layout::Permits(sem) => sem.create_permit(session, &key).await?,
            Layout::ReadWrite(queue) => {
                let (rev, first) = queue.create(session, self.prefix, &key).await?;
                (rev, Some(first))
            }
        };
        ticket.create_revision = Some(create_revision);
        let read_at = first.as_ref().map_or(create_revision, |l| l.revision);
        interest.ours(&key, read_at);
        log::debug!(
            "[{}] {key} created at revision {create_revision}",
            session.label()
        );
        let mut entry = KeyEntry {
            id: Key(key.clone().into_bytes()),
            key,
            create_revision,
            interest,
            heard_on,
            read_at,
            ahead: Vec::new(),
            first_at: None,
            concluded: false,
        };
        if let Some(first) = &first {
            entry.listed(first);
        }
        Ok((entry, first))
    }

    fn ours<'e>(&self, entry: &'e KeyEntry) -> &'e Key {
        &entry.id
    }

    /// A read of the contenders — or none, when the last wait heard every
    /// key ahead of ours deleted: the listing at that deletion's revision
    /// is ours alone.
    async fn list(&self, epoch: &KeyEpoch, entry: &mut KeyEntry) -> Result<Listing<Key>> {
        entry.concluded = entry.first_at.is_some();
        let read = match entry.first_at.take() {
            Some(revision) => Listing {
                contenders: vec![entry.id.clone()],
                revision,
            },
            None => {
                let (key, rev) = (&entry.key, entry.create_revision);
                let (etcd, timeout) = (epoch.session.store_ref()?, epoch.session.rpc_timeout());
                match self.layout {
                    Layout::ReadWrite(queue) => {
                        let ours = (self.prefix, key.as_str(), rev);
                        queue.list(etcd, timeout, ours).await?
                    }
                    _ => list(etcd, timeout, self.prefix, key, rev).await?,
                }
            }
        };
        entry.listed(&read);
        Ok(read)
    }

    async fn wait(&self, epoch: &KeyEpoch, entry: &mut KeyEntry, ahead: &Key) -> Result<()> {
        let timeout = epoch.session.rpc_timeout();
        let writers = write_prefix(self.prefix);
        if self.reads()
            && !ahead.0.starts_with(writers.as_bytes())
            && entry.interest.widen(self.prefix, entry.read_at)
        {
            // A writer's key outside `write/` (any key under the name
            // that is no reader's): the name's watch hears it, and a read
            // after joining it shows what it may have heard before.
            entry.first_at = None;
            return Ok(());
        }
        let (ahead, others) = match self.layout {
            // Any permit key's deletion: we are the one waiter the
            // internal mutex lets in.
            Layout::Permits(_) => (None, None),
            Layout::Key { .. } | Layout::ReadWrite(_) => {
                // A reader follows the keys ahead that can keep it out:
                // not the readers' (it does not hear them).
                let readers = read_prefix(self.prefix);
                let ahead_of_us = entry
                    .ahead
                    .iter()
                    .filter(|k| !(self.reads() && k.starts_with(readers.as_bytes())));
                let followed: Vec<_> = ahead_of_us.collect();
                let others = followed.iter().filter(|k| ***k != ahead.0);
                let others = (followed.len() <= FOLLOWED_AHEAD + 1)
                    .then(|| others.map(|k| (*k).clone()).collect());
                (Some(ahead.0.as_slice()), others)
            }
        };
        let deleted = entry.interest.wait(ahead, others, entry.read_at, timeout);
        let Layout::ReadWrite(RwQueue { write: false, .. }) = self.layout else {
            entry.first_at = deleted.await?;
            return Ok(());
        };
        // A reader waits on a writer: its downgrade lets us in too.
        let (writer, rev) = (ahead.unwrap_or_default(), entry.read_at);
        let etcd = epoch.session.store_ref()?;
        let downgraded = downgrade_of(etcd, self.prefix, writer, rev, timeout);
        entry.first_at = tokio::select! {
            first_at = deleted => first_at?,
            () = downgraded => None,
        };
        Ok(())
    }

    async fn confirm(
        &self,
        _epoch: &KeyEpoch,
        _entry: &mut KeyEntry,
        listing: &Listing<Key>,
    ) -> Result<Option<i64>> {
        Ok(Some(listing.revision))
    }

    fn remove(ticket: Ticket) -> impl std::future::Future<Output = ()> + Send + 'static {
        ticket.remove()
    }

    fn won(&self, _epoch: KeyEpoch, ticket: Ticket, entry: KeyEntry, fence: i64) -> Acquired {
        let mut interest = entry.interest;
        interest.won(&entry.key, fence, !entry.concluded);
        interest.hold();
        let watches = self.client.watches().clone();
        let (rev, heard) = (
            entry.create_revision,
            (self.prefix, entry.heard_on, watches),
        );
        Acquired::new(ticket, heard, rev, fence, interest)
    }
}
