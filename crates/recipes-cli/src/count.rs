//! `recipes count get|set|add NAME …`: the shared counter (a 32-bit one,
//! on ZooKeeper Curator's `SharedCount`), one call and the session closed.

use clap::{Args, Subcommand};
use crossbeam_channel::Receiver;
use recipes_core::{Client, Versioned};

use crate::{exit, out, signals};

/// `recipes count`.
#[derive(Debug, Args)]
pub struct CountArgs {
    /// What to do with the counter.
    #[command(subcommand)]
    pub op: CountOp,
}

/// The counter operations.
#[derive(Debug, Clone, Subcommand)]
pub enum CountOp {
    /// Print the value (with --json: `{"value":N,"version":V}`).
    Get {
        /// The counter: a path such as /counters/generation.
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Set the value, whatever it was; prints the new version.
    Set {
        /// The counter.
        name: String,
        /// The value (a negative one as written, e.g. -3).
        #[arg(allow_negative_numbers = true)]
        value: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Add DELTA (negative to subtract), retried until no other writer
    /// came between; prints the new value.
    Add {
        /// The counter.
        name: String,
        /// What to add (a negative delta as written, e.g. -3).
        #[arg(allow_negative_numbers = true)]
        delta: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

impl CountOp {
    /// The counter's name.
    pub fn name(&self) -> &str {
        match self {
            CountOp::Get { name, .. } | CountOp::Set { name, .. } | CountOp::Add { name, .. } => {
                name
            }
        }
    }
}

/// What `op` prints for `now`: JSON, or the value (the version for a set).
fn shown(now: Versioned, json: bool, text: i64) -> String {
    if json {
        format!("{{\"value\":{},\"version\":{}}}\n", now.value, now.version)
    } else {
        format!("{text}\n")
    }
}

/// Run `op` on `client`: the exit status. A forwarded signal ends it (a
/// store that does not answer keeps a call going until its timeout).
pub fn run<C: Client>(client: C, op: &CountOp, forwarded: &Receiver<libc::c_int>) -> i32 {
    let (counter, todo) = (client.clone(), op.clone());
    let done = signals::unless_signalled(forwarded, move || {
        counter.counter(todo.name()).and_then(|c| match &todo {
            CountOp::Get { json, .. } => c.get().map(|now| shown(now, *json, now.value)),
            CountOp::Set { value, json, .. } => c
                .set(*value)
                .map(|now| shown(now, *json, now.version as i64)),
            CountOp::Add { delta, json, .. } => c
                .add_counted(*delta)
                .map(|a| shown(a.now, *json, a.now.value)),
        })
    });
    let status = match done {
        Ok(Ok(text)) => out::print(&text).map_or_else(|e| out::failed(&e), |()| 0),
        Ok(Err(e)) => {
            say!("recipes: {e}");
            exit::for_error(&e)
        }
        Err(stopped) => signals::stopped(op.name(), stopped),
    };
    // Nothing is held: the session only needs to end.
    if let Err(e) = client.close_within(std::time::Duration::from_secs(2)) {
        say!("recipes: warning: the session did not close in time ({e})");
    }
    status
}
