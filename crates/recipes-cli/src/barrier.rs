//! `recipes barrier set|remove|wait NAME`: the barrier (on ZooKeeper
//! Curator's `DistributedBarrier`, on etcd the layout of Go's
//! `experimental/recipes` `Barrier`), one call and the session closed.

use std::time::Duration;

use clap::{Args, Subcommand};
use crossbeam_channel::Receiver;
use recipes_core::Client;

use crate::duration::parse_duration;
use crate::{exit, signals};

/// `recipes barrier`.
#[derive(Debug, Args)]
pub struct BarrierArgs {
    /// What to do with the barrier.
    #[command(subcommand)]
    pub op: BarrierOp,
}

/// The barrier operations.
#[derive(Debug, Clone, Subcommand)]
pub enum BarrierOp {
    /// Raise the barrier: `wait` blocks until it is removed. It stays when
    /// this command ends.
    Set {
        /// The barrier: a path such as /deploys/step-2.
        name: String,
    },
    /// Remove the barrier: every waiter goes on.
    Remove {
        /// The barrier.
        name: String,
    },
    /// Wait until the barrier is down (exit 0; at once if it was never set,
    /// as Curator does), or exit 75 when --wait passes first.
    Wait {
        /// The barrier.
        name: String,
        /// Give up (exit 75) if the barrier is still up after DURATION.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        wait: Option<Duration>,
    },
}

impl BarrierOp {
    /// The barrier's name.
    pub fn name(&self) -> &str {
        match self {
            BarrierOp::Set { name } | BarrierOp::Remove { name } | BarrierOp::Wait { name, .. } => {
                name
            }
        }
    }
}

/// Run `op` on `client`: the exit status. A forwarded signal (Ctrl-C,
/// `systemctl stop`) ends it, a wait above all.
pub fn run<C: Client>(client: C, op: &BarrierOp, forwarded: &Receiver<libc::c_int>) -> i32 {
    let (c, todo) = (client.clone(), op.clone());
    let done = signals::unless_signalled(forwarded, move || {
        c.barrier(todo.name()).and_then(|b| match &todo {
            BarrierOp::Set { .. } => b.set().map(|()| true),
            BarrierOp::Remove { .. } => b.remove().map(|()| true),
            BarrierOp::Wait { wait: None, .. } => b.wait().map(|()| true),
            BarrierOp::Wait {
                wait: Some(limit), ..
            } => b.wait_timeout(*limit),
        })
    });
    let status = match done {
        Ok(Ok(true)) => 0,
        Ok(Ok(false)) => {
            say!("recipes: the barrier {} is still up", op.name());
            exit::CONFLICT
        }
        Ok(Err(e)) => {
            say!("recipes: {e}");
            exit::for_error(&e)
        }
        Err(stopped) => signals::stopped(op.name(), stopped),
    };
    // Nothing is held: the session only needs to end.
    if let Err(e) = client.close_within(Duration::from_secs(2)) {
        say!("recipes: warning: the session did not close in time ({e})");
    }
    status
}
