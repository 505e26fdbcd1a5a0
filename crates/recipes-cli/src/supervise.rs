//! Running CMD under a held lease: start it only while the lease is valid,
//! forward our signals to it, and stop it when the lease is at risk or lost.
//!
//! Stopping: SIGTERM to CMD's process group once the lease is at risk (no
//! renewal acknowledged, and its deadline is [`warning`] away) or lost;
//! SIGKILL once it is lost — at its local deadline, which the client puts
//! ahead of the earliest moment the store may give it away by the clock
//! drift and a scheduling slack (the margin for the kill to land) — or
//! when the grace ends, whichever comes first.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select, Receiver};
use recipes_core::{BootInstant, LossSignal};

use crate::backend::Held;
use crate::child::{self, RunningCmd};
use crate::exit;
use crate::keeper_protocol::Report;
use crate::signals;

/// How often the lease is re-checked against the clock, besides the loss
/// signal itself (after a process pause this thread may run first).
const RECHECK: Duration = Duration::from_millis(200);

/// What CMD needs to run.
#[derive(Debug)]
pub struct Job<'a> {
    /// The lock, semaphore or election name.
    pub name: &'a str,
    /// CMD and its arguments.
    pub argv: &'a [OsString],
    /// Whether CMD gets `RECIPES_PERMIT` (a semaphore) instead of
    /// `RECIPES_FENCE`.
    pub permit: bool,
    /// How long CMD may take to stop after SIGTERM.
    pub grace: Duration,
    /// How long before the lease's deadline an unrenewed lease counts as
    /// at risk, and CMD gets SIGTERM (see [`warning`]).
    pub warning: Duration,
    /// Our exit status on loss.
    pub lost_exit_code: i32,
}

/// Whether `var` is one name's variable of a multi-lock
/// (`RECIPES_NAME_<n>`, `RECIPES_FENCE_<n>`, `RECIPES_HOLDER_<n>`).
fn numbered(var: &str) -> bool {
    ["RECIPES_NAME_", "RECIPES_FENCE_", "RECIPES_HOLDER_"]
        .iter()
        .filter_map(|p| var.strip_prefix(p))
        .any(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// What CMD gets in its environment, and what it must not inherit: an
/// outer `recipes`' multi-lock variables among them (`RECIPES_FENCE_1`
/// would be another lock's fence; ours are set again).
fn cmd_env(job: &Job<'_>, held: &Held) -> (Vec<(String, String)>, Vec<String>) {
    let mut env = vec![
        ("RECIPES_NAME".to_owned(), job.name.to_owned()),
        ("RECIPES_HOLDER".to_owned(), held.holder.clone()),
    ];
    let inherited = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
    let mut removed: Vec<String> = inherited.filter(|k| numbered(k)).collect();
    removed.push("RECIPES_LOCKS".to_owned());
    if !held.parts.is_empty() {
        removed.retain(|k| k != "RECIPES_LOCKS");
        env.push(("RECIPES_LOCKS".to_owned(), held.parts.len().to_string()));
    }
    for (i, part) in held.parts.iter().enumerate() {
        let n = i + 1;
        env.push((format!("RECIPES_NAME_{n}"), part.name.clone()));
        env.push((format!("RECIPES_FENCE_{n}"), part.fence.to_string()));
        env.push((format!("RECIPES_HOLDER_{n}"), part.holder.clone()));
    }
    if job.permit {
        env.push(("RECIPES_PERMIT".to_owned(), held.holder.clone()));
        removed.push("RECIPES_FENCE".to_owned());
    } else if let Some(fence) = held.fence {
        env.push(("RECIPES_FENCE".to_owned(), fence.to_string()));
        removed.push("RECIPES_PERMIT".to_owned());
    } else {
        removed.extend(["RECIPES_FENCE".to_owned(), "RECIPES_PERMIT".to_owned()]);
    }
    (env, removed)
}

/// How long before its deadline an unrenewed lease is at risk: the grace,
/// at most a fifth of the `ttl` the server granted. Renewals come every
/// third (etcd) or quarter (ZooKeeper) of it, so a healthy lease never gets
/// this close; CMD gets that long between SIGTERM and SIGKILL even when the
/// store cannot be reached.
pub fn warning(grace: Duration, ttl: Duration) -> Duration {
    grace.min(ttl / 5)
}

/// How CMD's run ended.
#[derive(Debug)]
pub enum Outcome {
    /// CMD ended by itself (or after a forwarded signal) with this exit
    /// status of ours.
    Exited(i32),
    /// The lease was lost or at risk (before or while CMD ran); CMD is
    /// gone.
    Lost,
    /// CMD could not be started; this exit status.
    NotStarted(i32),
}

/// Run CMD while `held` is valid; returns once CMD is gone. Does not
/// release `held`.
pub fn run(job: &Job<'_>, held: &Held, forwarded: &Receiver<libc::c_int>) -> Outcome {
    if let Some(reason) = held.lost.reason() {
        say!(
            "recipes: {}: lost between acquiring and starting CMD ({reason}); not starting it",
            job.name
        );
        return Outcome::Lost;
    }
    let (env, removed) = cmd_env(job, held);
    let removed: Vec<&str> = removed.iter().map(String::as_str).collect();
    let cmd = match child::spawn(job.argv, &env, &removed) {
        Ok(cmd) => cmd,
        Err(e) => {
            say!("recipes: cannot run {}: {e}", job.argv[0].to_string_lossy());
            return Outcome::NotStarted(child::spawn_failure_code(&e));
        }
    };
    let outcome = loop {
        let check = until_at_risk(&held.lost, job.warning).map_or(RECHECK, |d| d.min(RECHECK));
        select! {
            recv(cmd.reports) -> report => match report {
                Ok(Report::Exited { status, alone }) => {
                    let code = child::exit_code(status);
                    if !alone {
                        // Nothing CMD started may run on without the lease.
                        let why = format!(
                            "CMD exited ({code}) and left processes running; \
                             they must not outlive the lease"
                        );
                        if let Stopped::KeeperDied = stop(job, &held.lost, &cmd, &why) {
                            break Outcome::Exited(exit::OS_ERROR);
                        }
                    }
                    break exited(job, held, code);
                }
                Ok(_) => {}
                Err(_) => {
                    say!(
                        "recipes: {}: CMD's keeper process died; CMD is killed with it",
                        job.name
                    );
                    cmd.contain_without_keeper();
                    break Outcome::Exited(exit::OS_ERROR);
                }
            },
            recv(held.lost.receiver()) -> _ => {
                // Even if the keeper died meanwhile (what it left is
                // killed): the loss is what happened to the lock, 76.
                stop(job, &held.lost, &cmd, &loss(held));
                break Outcome::Lost;
            }
            recv(forwarded) -> sig => {
                if let Ok(sig) = sig {
                    cmd.signal_tree(sig);
                }
            }
            recv(after(check)) -> _ => {
                if held.lost.is_lost() || at_risk(&held.lost, job.warning) {
                    stop(job, &held.lost, &cmd, &loss(held));
                    break Outcome::Lost;
                }
            }
        }
    };
    cmd.restore_terminal();
    cmd.finish();
    outcome
}

/// CMD's exit with status `code`, once its tree is gone: CMD's status only
/// if the lease still holds; CMD's end and the loss can come together
/// (after a pause of `recipes`), and a loss is never reported as a run
/// that ended under the lock.
fn exited(job: &Job<'_>, held: &Held, code: i32) -> Outcome {
    match held.lost.reason() {
        None => Outcome::Exited(code),
        Some(reason) => {
            say!(
                "recipes: {}: CMD exited ({code}), but the lease was lost ({reason}){}; \
                 exiting as for a loss",
                job.name,
                held.which_was_lost()
            );
            Outcome::Lost
        }
    }
}

/// How long until the lease is at risk (its deadline `warning` away), as
/// things stand; zero when it is. `None` when it has no deadline (its loss
/// is only ever signalled).
fn until_at_risk(lost: &LossSignal, warning: Duration) -> Option<Duration> {
    lost.valid_until().map(|v| {
        v.saturating_duration_since(BootInstant::now())
            .saturating_sub(warning)
    })
}

fn at_risk(lost: &LossSignal, warning: Duration) -> bool {
    until_at_risk(lost, warning).is_some_and(|d| d.is_zero())
}

/// A channel that delivers once `d` from now (never, if that is out of
/// range).
fn after_or_never(d: Duration) -> Receiver<Instant> {
    Instant::now()
        .checked_add(d)
        .map_or_else(never, crossbeam_channel::at)
}

/// Why CMD is stopped, when the lease is lost or at risk.
fn loss(held: &Held) -> String {
    let lost = &held.lost;
    match lost.reason() {
        Some(reason) => format!(
            "lease lost while CMD ran: {reason}{}",
            held.which_was_lost()
        ),
        None => format!(
            "lease at risk while CMD ran: no renewal acknowledged, and it ends in {:?} \
             unless one comes",
            until_at_risk(lost, Duration::ZERO).unwrap_or_default()
        ),
    }
}

/// How [`stop`] ended.
#[derive(Debug)]
enum Stopped {
    /// The keeper reaped the last process of CMD's tree.
    Gone,
    /// The keeper died meanwhile (it was SIGKILLed); what it left was
    /// killed by `recipes` ([`RunningCmd::contain_without_keeper`]).
    KeeperDied,
}

/// SIGTERM to CMD's whole tree (CMD and every process it started, in any
/// process group or session); SIGKILL to it once the lease is lost or the
/// grace ends, whichever comes first; returns once none of it is left.
fn stop(job: &Job<'_>, lost: &LossSignal, cmd: &RunningCmd, why: &str) -> Stopped {
    let kill = if lost.is_lost() {
        "at once: the store may give the lease away any moment".to_owned()
    } else {
        format!(
            "when the lease is lost, or in {:?} unless they exit",
            job.grace
        )
    };
    say!(
        "recipes: {}: {why}; sending SIGTERM to CMD (pid {}) and every process it started, \
         SIGKILL {kill}",
        job.name,
        cmd.pid(),
    );
    cmd.signal_tree(libc::SIGTERM);
    let grace_ends = after_or_never(job.grace);
    loop {
        // Once lost, the kill is due now: wait on nothing more.
        let (lost_rx, recheck) = if lost.is_lost() {
            (never(), after(Duration::ZERO))
        } else {
            (lost.receiver().clone(), after(RECHECK))
        };
        select! {
            recv(cmd.reports) -> report => match report {
                Ok(report) if tree_gone(&report) => return Stopped::Gone,
                Ok(_) => {}
                Err(_) => return keeper_died(job, cmd),
            },
            recv(grace_ends) -> _ => break,
            recv(lost_rx) -> _ => {}
            recv(recheck) -> _ => {
                if lost.is_lost() {
                    break;
                }
            }
        }
    }
    say!(
        "recipes: {}: CMD still running; sending {} to it and every process it started",
        job.name,
        signals::name(libc::SIGKILL)
    );
    cmd.kill_tree();
    loop {
        match cmd.reports.recv() {
            Ok(report) if tree_gone(&report) => return Stopped::Gone,
            Ok(_) => {}
            Err(_) => return keeper_died(job, cmd),
        }
    }
}

/// Whether `report` says nothing of CMD's tree is left.
fn tree_gone(report: &Report) -> bool {
    matches!(report, Report::Empty | Report::Exited { alone: true, .. })
}

/// The keeper died while CMD's tree was being stopped: a keeper that
/// exits on its own kills the tree first, but a SIGKILLed one leaves it to
/// us; nothing of it may outlive the lease.
fn keeper_died(job: &Job<'_>, cmd: &RunningCmd) -> Stopped {
    say!(
        "recipes: {}: CMD's keeper process died while CMD's processes were being stopped; \
         killing what is left",
        job.name
    );
    cmd.contain_without_keeper();
    Stopped::KeeperDied
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use recipes_core::store::LossTrigger;
    use recipes_core::{FencingToken, LossReason};

    use super::*;

    /// A scratch folder of this test process.
    fn scratch(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("recipes-supervise-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn job(argv: &[OsString]) -> Job<'_> {
        Job {
            name: "/test",
            argv,
            permit: false,
            grace: Duration::from_secs(300),
            warning: Duration::from_millis(500),
            lost_exit_code: 76,
        }
    }

    fn held(trigger: &LossTrigger) -> Held {
        Held::new(
            Some(FencingToken(7)),
            "/test/node".into(),
            trigger.signal(),
            || Ok(()),
        )
    }

    /// `supervise::run` in a thread; its outcome within `bound`.
    fn run_within(argv: Vec<OsString>, held: Held, bound: Duration) -> Outcome {
        let (tx, done) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let (_signals, forwarded) = crossbeam_channel::unbounded();
            let _ = tx.send(run(&job(&argv), &held, &forwarded));
        });
        done.recv_timeout(bound)
            .unwrap_or_else(|_| panic!("supervise::run did not return within {bound:?}"))
    }

    #[test]
    fn a_lease_lost_before_cmd_starts_never_runs_it() {
        let dir = scratch("lost-before");
        let ran = dir.join("ran");
        let trigger = LossTrigger::root();
        trigger.fire(LossReason::Deleted);
        let argv = vec!["touch".into(), ran.clone().into()];
        let outcome = run_within(argv, held(&trigger), Duration::from_secs(60));
        assert!(matches!(outcome, Outcome::Lost), "{outcome:?}");
        assert!(!ran.exists(), "CMD ran after the lease was lost");
        let _ = std::fs::remove_dir_all(dir);
    }

    // Running CMD needs the keeper, which is this binary started again:
    // the rest is tested through the `recipes` binary (tests/cli.rs:
    // environment_reaches_cmd_*, fault_partitioned_holder_*; tests/cmd_tree.rs).
}
