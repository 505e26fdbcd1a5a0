//! Running CMD under a held lease: start it only while the lease is valid,
//! forward our signals to it, and stop it when the lease is lost.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, select, Receiver};
use recipes_core::{BootInstant, LossReason, LossSignal};

use crate::backend::{Held, KILL_MARGIN};
use crate::child::{self, RunningCmd};
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
    /// How long CMD may take to stop after SIGTERM on loss.
    pub grace: Duration,
    /// The slack the client subtracts from the lease deadline: the lease's
    /// earliest server-side expiry is this much after `valid_until`.
    pub lease_slack: Duration,
    /// Our exit status on loss.
    pub lost_exit_code: i32,
}

/// How CMD's run ended.
#[derive(Debug)]
pub enum Outcome {
    /// CMD ended by itself (or after a forwarded signal) with this exit
    /// status of ours.
    Exited(i32),
    /// The lease was lost (before or while CMD ran); CMD is gone.
    Lost,
    /// CMD could not be started; this exit status.
    NotStarted(i32),
}

/// Run CMD while `held` is valid; returns once CMD is gone. Does not
/// release `held`.
pub fn run(job: &Job<'_>, held: &Held, forwarded: &Receiver<libc::c_int>) -> Outcome {
    if let Some(reason) = held.lost.reason() {
        eprintln!(
            "recipes: {}: lost between acquiring and starting CMD ({reason}); not starting it",
            job.name
        );
        return Outcome::Lost;
    }
    let mut env = vec![
        ("RECIPES_NAME", job.name.to_owned()),
        ("RECIPES_HOLDER", held.holder.clone()),
    ];
    let removed: &[&str] = if job.permit {
        env.push(("RECIPES_PERMIT", held.holder.clone()));
        &["RECIPES_FENCE"]
    } else if let Some(fence) = held.fence {
        env.push(("RECIPES_FENCE", fence.to_string()));
        &["RECIPES_PERMIT"]
    } else {
        &["RECIPES_FENCE", "RECIPES_PERMIT"]
    };
    let cmd = match child::spawn(job.argv, &env, removed) {
        Ok(cmd) => cmd,
        Err(e) => {
            eprintln!("recipes: cannot run {}: {e}", job.argv[0].to_string_lossy());
            return Outcome::NotStarted(child::spawn_failure_code(&e));
        }
    };
    let outcome = loop {
        select! {
            recv(cmd.exited) -> status => {
                break Outcome::Exited(child::exit_code(&status.unwrap_or_else(|_| {
                    Err(std::io::Error::other("CMD's wait thread is gone"))
                })));
            }
            recv(held.lost.receiver()) -> _ => {
                stop_after_loss(job, &held.lost, &cmd);
                break Outcome::Lost;
            }
            recv(forwarded) -> sig => {
                if let Ok(sig) = sig {
                    cmd.signal_group(sig);
                }
            }
            recv(after(RECHECK)) -> _ => {
                if held.lost.is_lost() {
                    stop_after_loss(job, &held.lost, &cmd);
                    break Outcome::Lost;
                }
            }
        }
    };
    cmd.restore_terminal();
    outcome
}

/// When CMD must be gone after a loss for `reason`: at once if the store
/// already gave the lease away (expired session, deleted node or key,
/// revoked lease); else [`KILL_MARGIN`] before the earliest moment it may.
/// `valid_until` is the send time of the last acknowledged renewal plus the
/// TTL less the clock-drift margin and `lease_slack`, so that moment is
/// `valid_until + lease_slack`.
fn kill_by(lost: &LossSignal, reason: LossReason, lease_slack: Duration) -> BootInstant {
    let now = BootInstant::now();
    match reason {
        LossReason::SessionExpired | LossReason::Deleted | LossReason::Revoked => now,
        _ => lost
            .valid_until()
            .map_or(now, |v| v + lease_slack.saturating_sub(KILL_MARGIN)),
    }
}

/// SIGTERM to CMD's group, SIGKILL when the grace ends or just before the
/// lease's earliest server-side expiry, whichever comes first; then wait
/// until CMD is gone.
fn stop_after_loss(job: &Job<'_>, lost: &LossSignal, cmd: &RunningCmd) {
    let reason = lost.reason().unwrap_or(LossReason::DeadlineExpired);
    let expiry = kill_by(lost, reason, job.lease_slack)
        .saturating_duration_since(BootInstant::now())
        .min(job.grace);
    let when = if expiry.is_zero() {
        "at once: the store may already have given the lease away".to_owned()
    } else {
        format!("in {expiry:?} unless it exits")
    };
    eprintln!(
        "recipes: {}: lease lost while CMD ran: {reason}; sending SIGTERM to CMD (pid {}), \
         SIGKILL {when}",
        job.name,
        cmd.pid(),
    );
    cmd.signal_group(libc::SIGTERM);
    let kill_at = Instant::now() + expiry;
    select! {
        recv(cmd.exited) -> _ => {
            // CMD is gone; others it started in its group may not be.
            cmd.signal_group(libc::SIGKILL);
            return;
        }
        recv(after(kill_at.saturating_duration_since(Instant::now()))) -> _ => {}
    }
    eprintln!(
        "recipes: {}: CMD still running; sending {}",
        job.name,
        signals::name(libc::SIGKILL)
    );
    cmd.signal_group(libc::SIGKILL);
    let _ = cmd.exited.recv();
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use recipes_core::{FencingToken, LossTrigger};

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
            lease_slack: Duration::from_millis(500),
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

    /// The store already gave the lease away (our node was deleted): a CMD
    /// that ignores SIGTERM is killed at once, whatever the grace (300 s).
    #[test]
    fn a_lease_the_store_gave_away_kills_cmd_at_once() {
        let dir = scratch("given-away");
        let ready = dir.join("ready");
        let script = format!(
            "trap '' TERM; echo $$ > {0}.tmp && mv {0}.tmp {0}; while :; do sleep 1; done",
            ready.display()
        );
        let trigger = LossTrigger::root();
        let fire = trigger.clone();
        let watch = ready.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(60);
            while !watch.exists() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            fire.fire(LossReason::Deleted);
        });
        let argv = vec!["sh".into(), "-c".into(), script.into()];
        let outcome = run_within(argv, held(&trigger), Duration::from_secs(60));
        assert!(matches!(outcome, Outcome::Lost), "{outcome:?}");
        let pid = std::fs::read_to_string(&ready).unwrap();
        assert!(
            !PathBuf::from(format!("/proc/{}", pid.trim())).exists(),
            "CMD (pid {pid}) still exists after run returned"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn cmds_status_is_ours() {
        let trigger = LossTrigger::root();
        let argv = vec!["sh".into(), "-c".into(), "exit 3".into()];
        let outcome = run_within(argv, held(&trigger), Duration::from_secs(60));
        assert!(matches!(outcome, Outcome::Exited(3)), "{outcome:?}");
        let argv = vec!["sh".into(), "-c".into(), "kill -TERM $$".into()];
        let outcome = run_within(argv, held(&trigger), Duration::from_secs(60));
        assert!(
            matches!(outcome, Outcome::Exited(143)),
            "128 + SIGTERM: {outcome:?}"
        );
    }
}
