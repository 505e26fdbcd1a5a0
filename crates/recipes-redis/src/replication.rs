//! `WAIT` for replicas ([`Replication`]), on a connection of its own and
//! one round at a time for every caller.
//!
//! `WAIT` blocks the connection it is sent on until it returns. On the
//! client's one connection it held up everything behind it — a session's
//! renewal, a release, a read — and concurrent `WAIT`s queued one behind
//! the other, so a renewal behind a few of them could miss its deadline
//! while a replica lagged (a false loss), and each acquisition's `WAIT`
//! could time out on the others' time. Here every wait goes to one task
//! that owns a second connection: it takes every caller queued, sends one
//! write of its own and one `WAIT`, and answers them all with that round's
//! count. A caller queued while a round is out may have written after
//! that round's own write, so it waits for the next round (at most two
//! rounds, never one per caller ahead of it).
//!
//! Why one round answers every caller in it: each caller asks only after
//! its own write was answered, and the round's write (`INCR` of
//! [`REPLICATED`](crate::names::REPLICATED), by a script allowed at
//! `maxmemory`) is sent after the round took its callers, so the primary
//! applied it after theirs. The primary's replication offset only grows,
//! so a replica that acknowledges the round's write has every caller's.
//! The write also keeps `WAIT` from answering at once on a connection
//! that wrote nothing (`WAIT` counts the writes of its own connection).

use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::within;
use recipes_core::{Error, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{mpsc, oneshot};

use crate::rpc::from_redis;

/// The script of a round's own write.
const MARK: &str = "#!lua flags=allow-oom\nreturn redis.call('INCR', KEYS[1])";

/// What one round found: how many replicas acknowledged its write, or
/// why it has no count.
#[derive(Debug, Clone)]
enum Round {
    Acked(u32),
    Failed(String),
}

/// The client's waits for replicas: how many, how long, and the task
/// that runs the rounds.
#[derive(Debug)]
pub(crate) struct Replication {
    replicas: u32,
    wait: Duration,
    rpc_timeout: Duration,
    asks: mpsc::UnboundedSender<oneshot::Sender<Round>>,
}

/// How the rounds' connection is opened: the client's server and
/// settings, and the connection's own.
pub(crate) struct Opening {
    pub(crate) client: redis::Client,
    pub(crate) config: ConnectionManagerConfig,
}

impl Replication {
    /// Start the rounds' task on `handle` (its connection is opened at the
    /// first round); it ends with the last clone of the returned value.
    pub(crate) fn start(
        handle: &tokio::runtime::Handle,
        opening: Opening,
        (replicas, wait): (u32, Duration),
        rpc_timeout: Duration,
    ) -> Arc<Replication> {
        let (asks, queued) = mpsc::unbounded_channel();
        handle.spawn(rounds(
            queued,
            opening,
            (replicas, wait),
            wait + rpc_timeout,
        ));
        Arc::new(Replication {
            replicas,
            wait,
            rpc_timeout,
            asks,
        })
    }

    /// Wait until the configured number of replicas acknowledged every
    /// write the primary took before this call.
    ///
    /// # Errors
    ///
    /// [`Error::Indeterminate`] when fewer acknowledged within the
    /// configured timeout, or the count could not be had: the writes are
    /// on the primary and may be lost with it.
    pub(crate) async fn replicated(&self, what: &str) -> Result<()> {
        let (answer, round) = oneshot::channel();
        if self.asks.send(answer).is_err() {
            return Err(Error::Indeterminate {
                what: format!("{what}: the client is closing; replicas were not asked"),
            });
        }
        // The round out now, then ours.
        let bound = 2 * (self.wait + self.rpc_timeout);
        let round = within(what, bound, async {
            round.await.map_err(|_| Error::ConnectionLoss)
        })
        .await
        .map_err(Error::unconfirmed)?;
        let (replicas, wait) = (self.replicas, self.wait);
        match round {
            Round::Acked(acked) if acked >= replicas => Ok(()),
            Round::Acked(acked) => Err(Error::Indeterminate {
                what: format!(
                    "{what}: {acked} of {replicas} replicas acknowledged within {wait:?}; \
                     the write is on the primary only and a failover may lose it"
                ),
            }),
            Round::Failed(why) => Err(Error::Indeterminate {
                what: format!(
                    "{what}: replicas could not be asked ({why}); the write is on the \
                     primary and a failover may lose it"
                ),
            }),
        }
    }
}

/// The rounds: every caller queued, one write and one `WAIT`, the count
/// to each, until the last [`Replication`] is gone.
async fn rounds(
    mut queued: mpsc::UnboundedReceiver<oneshot::Sender<Round>>,
    opening: Opening,
    asked: (u32, Duration),
    bound: Duration,
) {
    let mut conn: Option<ConnectionManager> = None;
    while let Some(first) = queued.recv().await {
        let mut callers = vec![first];
        while let Ok(more) = queued.try_recv() {
            callers.push(more);
        }
        // Callers that gave up (their call's timeout) need no round.
        callers.retain(|c| !c.is_closed());
        if callers.is_empty() {
            continue;
        }
        let round = match within(
            "wait for replicas",
            bound,
            round(&mut conn, &opening, asked),
        )
        .await
        {
            Ok(acked) => Round::Acked(acked),
            Err(e) => {
                // A connection that did not answer may still be blocked
                // in its `WAIT`: the next round opens another.
                conn = None;
                Round::Failed(e.to_string())
            }
        };
        for caller in callers {
            let _ = caller.send(round.clone());
        }
    }
}

/// One round on `conn` (opened first if it is not): the write, then
/// `WAIT`, in one request.
async fn round(
    conn: &mut Option<ConnectionManager>,
    opening: &Opening,
    (replicas, wait): (u32, Duration),
) -> Result<u32> {
    let what = "wait for replicas";
    let open = match conn {
        Some(c) => c,
        None => {
            let (client, config) = (opening.client.clone(), opening.config.clone());
            let opened = ConnectionManager::new_with_config(client, config)
                .await
                .map_err(|e| from_redis(what, e))?;
            conn.insert(opened)
        }
    };
    let mut pipe = redis::pipe();
    pipe.cmd("EVAL")
        .arg(MARK)
        .arg(1)
        .arg(crate::names::REPLICATED)
        .ignore();
    let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    pipe.cmd("WAIT").arg(replicas).arg(millis);
    let (acked,): (u32,) = pipe
        .query_async(open)
        .await
        .map_err(|e| from_redis(what, e))?;
    Ok(acked)
}
