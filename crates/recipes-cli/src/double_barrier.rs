//! `recipes double-barrier NAME --count N -- CMD`: enter the double
//! barrier (wait until N members entered), run CMD as a member (killed
//! when the membership is lost, as under `recipes lock`), then leave
//! (wait until every member left). `--wait` bounds the enter and the
//! leave each; either passing exits 75 (`--conflict-exit-code`), unless
//! CMD itself failed, whose status wins. A forwarded signal ends either
//! wait (128 + n; the run's release goes through `unless_signalled`).

use std::time::{Duration, Instant};

use clap::Args;
use recipes_core::store::{DoubleBarrierStore, OnRuntime};
use recipes_core::{DoubleBarrier, Error, Result};

use crate::backend::{Held, Wait};
use crate::cli::RunOptions;

/// `recipes double-barrier`.
#[derive(Debug, Args)]
pub struct DoubleBarrierArgs {
    /// The double barrier: a path such as /batches/nightly.
    pub name: String,
    /// How many members it gathers (the same for every member).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub count: u32,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub run: RunOptions,
}

/// What a leave that did not see every member go in time says; the run
/// turns it into the conflict exit status.
pub const LEAVE_TIMED_OUT: &str = "double barrier leave";

/// Enter `barrier`, waiting as `wait` says: the member as a [`Held`]
/// whose release leaves, waiting at most `leave` for the others.
///
/// # Errors
///
/// As for [`DoubleBarrier::enter`].
pub fn enter<B: DoubleBarrierStore + OnRuntime>(
    barrier: &DoubleBarrier<B>,
    wait: Wait,
    leave: Option<Duration>,
) -> Result<Option<Held>> {
    let member = match wait {
        Wait::Forever => Some(barrier.enter()?),
        Wait::AtOnce => barrier.enter_timeout(Duration::ZERO)?,
        Wait::Until(t) => barrier.enter_timeout(t.saturating_duration_since(Instant::now()))?,
    };
    let name = barrier.name().to_owned();
    Ok(member.map(|m| {
        let lost = m.lost().clone();
        Held::new(None, name, lost, move || match leave {
            None => m.leave(),
            Some(limit) if m.leave_timeout(limit)? => Ok(()),
            Some(limit) => Err(Error::Timeout {
                what: LEAVE_TIMED_OUT.to_owned(),
                after: limit,
            }),
        })
    }))
}

/// Whether `e` is a leave that timed out.
pub fn leave_timed_out(e: &Error) -> bool {
    matches!(e, Error::Timeout { what, .. } if what == LEAVE_TIMED_OUT)
}
