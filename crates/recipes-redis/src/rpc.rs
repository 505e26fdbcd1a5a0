//! The connection to Redis ([`Redis`]): one multiplexed connection that
//! reconnects by itself, script calls on it, and the one mapping of the
//! `redis` crate's errors to ours.

use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::{resend_within, within, Backoff};
use recipes_core::{Error, Result};
use redis::aio::ConnectionManager;
use redis::{FromRedisValue, RedisError, Script};
use tokio::sync::Notify;

use crate::names::{holds, Queue};
use crate::queue_scripts::{self, Func, LIBRARY};
use crate::replication::Replication;

/// The connection, cheap to clone: every request of the client goes on it
/// (pub/sub opens connections of its own from `client`).
#[derive(Clone)]
pub(crate) struct Redis {
    pub(crate) conn: ConnectionManager,
    pub(crate) client: redis::Client,
    /// `WAIT numreplicas timeout` after every acquisition, fenced write
    /// and renewal, on a connection of its own.
    pub(crate) replication: Option<Arc<Replication>>,
    /// Notified when a request finds the connection lost (or the server
    /// silent past the request's timeout): what
    /// [`LossPolicy::OnDisconnect`](recipes_core::LossPolicy) listens to.
    pub(crate) dropped: Arc<Notify>,
}

impl Redis {
    /// Which of the `held` hold keys still hold their members, in order:
    /// one `MGET`.
    pub(crate) async fn holding(
        &self,
        held: Vec<(String, String)>,
        timeout: Duration,
    ) -> Result<Vec<bool>> {
        let mut mget = redis::cmd("MGET");
        for (hold_key, _) in &held {
            mget.arg(hold_key);
        }
        let values: Vec<Option<String>> = self.read("poll the held entries", timeout, mget).await?;
        Ok(held
            .iter()
            .zip(values)
            .map(|((_, member), value)| holds(value.as_deref(), member))
            .collect())
    }

    /// Run `lua` with `args` once; no resend (the caller's reply may be
    /// lost: see [`Error::unconfirmed`]).
    pub(crate) async fn once<'a, T: FromRedisValue>(
        &self,
        what: &str,
        timeout: Duration,
        lua: impl Into<Lua<'a>>,
        args: &[impl redis::ToRedisArgs],
    ) -> Result<T> {
        let mut conn = self.conn.clone();
        let lua = lua.into();
        let sent = async move {
            match lua {
                Lua::Script(script) => {
                    let mut invocation = script.prepare_invoke();
                    args.iter().for_each(|a| {
                        invocation.arg(a);
                    });
                    invocation.invoke_async(&mut conn).await
                }
                Lua::Function(f) => {
                    let mut fcall = redis::cmd("FCALL");
                    fcall.arg(LIBRARY.function(f)).arg(0);
                    args.iter().for_each(|a| {
                        fcall.arg(a);
                    });
                    call_loaded(&mut conn, &fcall).await
                }
            }
        };
        let reply = within(what, timeout, async {
            sent.await.map_err(|e| from_redis(what, e))
        })
        .await;
        self.noted(reply)
    }

    /// `result`, after notifying [`dropped`](Redis::dropped) when it says
    /// the connection is lost or the server did not answer in time.
    fn noted<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(Error::ConnectionLoss | Error::Timeout { .. }) = &result {
            self.dropped.notify_one();
        }
        result
    }

    /// Run the idempotent `script` with `args`, resent after a retryable
    /// failure within `timeout`.
    pub(crate) async fn idempotent<'a, T: FromRedisValue>(
        &self,
        what: &str,
        timeout: Duration,
        lua: impl Into<Lua<'a>>,
        args: &[impl redis::ToRedisArgs + Sync],
    ) -> Result<T> {
        let lua = lua.into();
        let map = |e: Error| e;
        resend_within(what, timeout, Backoff::RETRY, map, || async {
            self.once(what, timeout, lua, args).await
        })
        .await
    }

    /// One plain command, resent after a retryable failure (reads only).
    pub(crate) async fn read<T: FromRedisValue>(
        &self,
        what: &str,
        timeout: Duration,
        cmd: redis::Cmd,
    ) -> Result<T> {
        let map = |e: RedisError| self.noted::<()>(Err(from_redis(what, e))).unwrap_err();
        let read = resend_within(what, timeout, Backoff::RETRY, map, || {
            let (cmd, mut conn) = (cmd.clone(), self.conn.clone());
            async move { cmd.query_async(&mut conn).await }
        });
        self.noted(read.await)
    }

    /// The live members of `queue` up to `member` (all of them when
    /// `member` is not queued), oldest first; dead ones are swept.
    pub(crate) async fn list(
        &self,
        queue: &Queue,
        member: &str,
        timeout: Duration,
    ) -> Result<Vec<String>> {
        let what = format!("list {}", queue.name);
        let args = queue.args(member);
        self.idempotent(&what, timeout, &queue_scripts::LIST, &args)
            .await
    }

    /// Wait until the configured number of replicas acknowledged every
    /// write the primary took so far, if a number is configured: on a
    /// connection of its own, one round for every caller queued
    /// ([`Replication`]).
    ///
    /// # Errors
    ///
    /// [`Error::Indeterminate`] when fewer acknowledged within the
    /// configured timeout: the writes are on the primary and may be lost
    /// with it.
    pub(crate) async fn replicated(&self, what: &str) -> Result<()> {
        match &self.replication {
            Some(r) => r.replicated(what).await,
            None => Ok(()),
        }
    }
}

/// What the client runs on the server: a script (`EVALSHA`, loaded again
/// on `NOSCRIPT` by the `redis` crate) or a function of the queue library
/// (`FCALL`, the library loaded again on `Function not found`).
#[derive(Clone, Copy)]
pub(crate) enum Lua<'a> {
    Script(&'a Script),
    Function(&'a Func),
}

impl<'a> From<&'a Script> for Lua<'a> {
    fn from(script: &'a Script) -> Lua<'a> {
        Lua::Script(script)
    }
}

impl<'a> From<&'a std::sync::LazyLock<Script>> for Lua<'a> {
    fn from(script: &'a std::sync::LazyLock<Script>) -> Lua<'a> {
        Lua::Script(script)
    }
}

impl<'a> From<&'a Func> for Lua<'a> {
    fn from(f: &'a Func) -> Lua<'a> {
        Lua::Function(f)
    }
}

/// `fcall`, after loading the queue library if the server lacks it (a
/// library of that name already there is the same code: its name is the
/// code's hash).
async fn call_loaded<T: FromRedisValue>(
    conn: &mut ConnectionManager,
    fcall: &redis::Cmd,
) -> redis::RedisResult<T> {
    match fcall.query_async(conn).await {
        Err(e) if e.detail().is_some_and(|d| d.contains("Function not found")) => {
            let mut load = redis::cmd("FUNCTION");
            load.arg("LOAD").arg(&LIBRARY.code);
            if let Err(e) = load.query_async::<String>(conn).await {
                if !e.detail().is_some_and(|d| d.contains("already exists")) {
                    return Err(e);
                }
            }
            fcall.query_async(conn).await
        }
        reply => reply,
    }
}

/// What an ACL user needs: our keys and channels, and the commands the
/// client and its scripts run (`TIME` mints fences, `INFO` shows the
/// `maxmemory-policy`).
const ACL_HINT: &str = "grant the user the keys and channels {recipes}:* and the commands the \
     client runs: ACL SETUSER <user> ~{recipes}:* &{recipes}:* +@read +@write +@scripting \
     +@pubsub +@connection -@dangerous +time +info (and ~<key> for the keys its fenced writes \
     name)";

/// A reply the scripts never give.
pub(crate) fn unexpected(what: &str, reply: impl std::fmt::Debug) -> Error {
    Error::Backend {
        message: format!("{what}: unexpected reply {reply:?} from Redis"),
        retryable: false,
        source: None,
    }
}

/// The one mapping of the `redis` crate's errors: connection trouble is
/// [`Error::ConnectionLoss`], credentials [`Error::Unauthenticated`], an
/// ACL's refusal [`Error::PermissionDenied`], `maxmemory` a backend error
/// that says what to change.
pub(crate) fn from_redis(what: &str, e: RedisError) -> Error {
    let detail = e.detail().unwrap_or_default().to_owned();
    let code = e.code().unwrap_or_default().to_owned();
    if e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(code.as_str(), "NOAUTH" | "WRONGPASS")
    {
        return Error::Unauthenticated {
            what: format!(
                "{what}: Redis refused the credentials ({code} {detail}); give them in the \
                 URL, redis://:PASSWORD@host:port or redis://USER:PASSWORD@host:port"
            ),
        };
    }
    let switch_db = e.to_string().contains("refused to switch database");
    if switch_db && detail.contains("out of range") {
        return Error::invalid(format!(
            "{what}: the server has no database of the index the URL names after the host \
             ({detail}): name one below its `databases` setting (16 by default: \
             redis://host:port/0 to /15)"
        ));
    }
    // An ACL's refusal: `NOPERM` for a command, and an `ERR` naming the
    // user for a key or channel a script touches.
    if code == "NOPERM" || detail.contains("user executing the script can't") || switch_db {
        return Error::PermissionDenied {
            what: format!("{what}: Redis refused the ACL user ({detail}); {ACL_HINT}"),
        };
    }
    if code == "OOM" {
        return Error::Backend {
            message: format!(
                "{what}: Redis is out of memory (maxmemory reached) and wrote nothing; \
                 raise maxmemory or free memory, and keep maxmemory-policy noeviction \
                 (an eviction policy could evict lock keys)"
            ),
            retryable: false,
            source: Some(std::sync::Arc::new(e)),
        };
    }
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        return Error::ConnectionLoss;
    }
    let retryable = matches!(
        code.as_str(),
        "LOADING" | "BUSY" | "MASTERDOWN" | "TRYAGAIN" | "READONLY"
    ) || e.is_unrecoverable_error();
    Error::backend(format!("{what}: {e}"), retryable, e)
}
