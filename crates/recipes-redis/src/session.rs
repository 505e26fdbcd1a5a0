//! Redis sessions as core's [`LeaseStore`]: a session is a key
//! `{recipes}:s:<id>` holding a random token, `PX` the TTL; a session is
//! core's [`LeaseSession`] over it (grant, a renewal every TTL/3, revoke)
//! and the client's sessions are core's
//! [`LeaseSessions`](recipes_core::store::LeaseSessions).
//!
//! The renewal is a script guarded by the token: it extends the session
//! key (and so every hold of the session, whatever their number) only
//! while the session key still holds our token, and sweeps the keys of
//! expired sessions (`scripts.rs`), so a renewal that arrives after the key expired
//! resurrects nothing — its reply says the session is gone. Entries are
//! named by a fresh uuid, never by the session, so one session serves any
//! number of acquisitions of one name.
//!
//! About once a TTL (core's [`LeaseStore::audit`]), the client compares its session's
//! index of entries (`h:<id>`) with the entries its tickets own
//! ([`OwnedEntries`]: each registered before its enter is sent, so an
//! enter in flight is never taken for a stray) and removes the strays:
//! entries a lost write brought back (a restart that replayed an older AOF,
//! an older backup restored), which would otherwise hold their lock for no
//! one until the session ends.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::{
    LeaseSession, LeaseStore, Opened, Owned, OwnedEntries, Renewal, RenewalStream,
};
use recipes_core::{Error, Result};
use tokio::task::JoinHandle;

use crate::names::NS;
use crate::policy::check_eviction;
use crate::rpc::{unexpected, Redis};
use crate::scripts;

/// A session: one Redis session key, renewed.
pub(crate) type Session = LeaseSession<Sessions>;

/// A granted session's token and TTL.
type Granted = (Arc<str>, Duration);

/// The queue entries (members) the client's tickets own, in any session.
type Known = OwnedEntries<String>;

/// A member registered as owned while this lives.
pub(crate) type Registered = Owned<String>;

/// The connection as core's lease store, and what it granted: each
/// session's token and TTL.
#[derive(Clone)]
pub(crate) struct Sessions {
    pub(crate) redis: Redis,
    /// The server's URL without its password, for messages.
    shown: Arc<str>,
    granted: Arc<parking_lot::Mutex<HashMap<i64, Granted>>>,
    /// The entries the client's tickets own.
    known: Arc<Known>,
}

impl Sessions {
    pub(crate) fn new(redis: Redis, shown: Arc<str>) -> Sessions {
        Sessions {
            redis,
            shown,
            granted: Arc::default(),
            known: Arc::default(),
        }
    }

    /// Register `member` as owned until the handle drops: before its enter
    /// is sent, kept until its removal is done or given up.
    pub(crate) fn register(&self, member: &str) -> Registered {
        self.known.register(member.to_owned())
    }

    /// The token of the session `id` (the enter and confirm scripts check
    /// it); empty once revoked, which no session key holds.
    pub(crate) fn token(&self, id: i64) -> String {
        let granted = self.granted.lock();
        granted
            .get(&id)
            .map(|(t, _)| t.to_string())
            .unwrap_or_default()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl LeaseStore for Sessions {
    type Renewals = Renewals;

    fn label(&self, id: i64) -> String {
        format!("session={id}")
    }

    /// Redis keeps milliseconds: the TTL granted is the one asked, in
    /// whole milliseconds. The server's `maxmemory-policy` is checked
    /// first, every time: a session is granted at connect, and again after
    /// one was lost — as when a restarted server lost every key, and may
    /// run with another configuration.
    async fn grant(&self, ttl: Duration, timeout: Duration) -> Result<(i64, Duration)> {
        check_eviction(&self.redis, &self.shown, timeout).await?;
        let token: Arc<str> = uuid::Uuid::new_v4().simple().to_string().into();
        let ttl = Duration::from_millis(millis(ttl));
        let args = [NS.to_owned(), token.to_string(), millis(ttl).to_string()];
        // Not resent: a grant applied twice leaves a session without
        // entries, which expires.
        let id: i64 = self
            .redis
            .once("grant a session", timeout, &scripts::GRANT, &args)
            .await?;
        self.granted.lock().insert(id, (token, ttl));
        Ok((id, ttl))
    }

    async fn renewals(&self, id: i64, timeout: Duration) -> Result<Opened<Renewals>> {
        let Some((token, ttl)) = self.granted.lock().get(&id).cloned() else {
            return Ok(Opened::Gone);
        };
        let args = vec![
            NS.to_owned(),
            id.to_string(),
            token.to_string(),
            millis(ttl).to_string(),
        ];
        Ok(Opened::Ready(Renewals {
            redis: self.redis.clone(),
            args: args.into(),
            ttl,
            timeout,
            pending: VecDeque::new(),
        }))
    }

    async fn revoke(&self, id: i64, timeout: Duration) -> Result<()> {
        let args = [NS.to_owned(), id.to_string()];
        let what = format!("revoke session {id}");
        let _: i64 = self
            .redis
            .idempotent(&what, timeout, &scripts::REVOKE, &args)
            .await?;
        self.granted.lock().remove(&id);
        Ok(())
    }

    const AUDITS: bool = true;

    fn audit(&self, id: i64, timeout: Duration) -> impl Future<Output = ()> + Send + 'static {
        forget_unknown(self.redis.clone(), id, self.known.clone(), timeout)
    }
}

/// Renewals in flight, answered in the order sent (one connection; with
/// `WAIT`, each answered once replicas acknowledged it, or as an error
/// that ends the stream and counts nothing).
pub(crate) struct Renewals {
    redis: Redis,
    args: Arc<[String]>,
    ttl: Duration,
    timeout: Duration,
    pending: VecDeque<JoinHandle<Result<Renewal>>>,
}

impl Drop for Renewals {
    fn drop(&mut self) {
        self.pending.iter().for_each(JoinHandle::abort);
    }
}

impl RenewalStream for Renewals {
    /// Hands the renewal to a task; its reply is read in order by `reply`.
    async fn send(&mut self) -> Result<()> {
        let (redis, args, ttl, timeout) = (
            self.redis.clone(),
            self.args.clone(),
            self.ttl,
            self.timeout,
        );
        self.pending.push_back(tokio::spawn(async move {
            let renewed: i64 = redis.once("renew", timeout, &scripts::RENEW, &args).await?;
            match renewed {
                // With `WAIT`, a renewal counts once replicas have it: a
                // replica promoted with an older expiry would free the
                // session's holds before the deadline this renewal moves.
                1 => redis
                    .replicated("renew the session")
                    .await
                    .map(|()| Renewal::Granted(ttl)),
                0 => Ok(Renewal::Gone),
                other => Err(unexpected("renew", other)),
            }
        }));
        Ok(())
    }

    async fn reply(&mut self) -> Result<Renewal> {
        match self.pending.front_mut() {
            None => std::future::pending().await,
            Some(task) => {
                let done = task.await;
                self.pending.pop_front();
                done.map_err(|_| Error::ConnectionLoss)?
            }
        }
    }
}

/// Remove the entries of our live session `id` that no ticket of the
/// client owns (see the module's documentation). A listed entry whose
/// ticket is dropped meanwhile (its removal done) is sent too: the script
/// finds it gone and leaves it.
async fn forget_unknown(redis: Redis, id: i64, known: Arc<Known>, timeout: Duration) {
    let index = format!("{NS}h:{id}");
    let mut hkeys = redis::cmd("HKEYS");
    hkeys.arg(&index);
    let listed: Vec<String> = match redis
        .read("list the session's entries", timeout, hkeys)
        .await
    {
        Ok(listed) => listed,
        Err(e) => return log::debug!("[session={id}] list the session's entries: {e}"),
    };
    let ours = format!("{id}-");
    let strays = known.strays(listed.into_iter().filter(|m| m.starts_with(&ours)));
    if strays.is_empty() {
        return;
    }
    let what = "remove entries of the session that no guard owns";
    let mut args = vec![NS.to_owned(), id.to_string()];
    args.extend(strays);
    match redis
        .idempotent(what, timeout, &scripts::FORGET, &args)
        .await
    {
        Ok(0) => {}
        Ok(n) => log::warn!(
            "[session={id}] removed {n} entries of this session that no guard owns \
             (a release the server lost: a restart that replayed an older AOF, a backup restored)"
        ),
        Err(e) => log::debug!("[session={id}] {what}: {e}"),
    }
}
