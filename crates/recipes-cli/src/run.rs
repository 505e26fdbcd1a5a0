//! One subcommand from start to exit status: connect, acquire (a signal
//! ends the wait), supervise CMD, release, close.

use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};

use recipes_core::Client;

use crate::backend::{acquire, Held, Recipe, Wait};
use crate::cli::{BackendChoice, RunOptions, StatusArgs};
use crate::exit;
use crate::out::{self, Failure};
use crate::signals;
use crate::status;
use crate::supervise::{self, Job, Outcome};

/// How long closing the session may take: closing deletes what the session
/// still holds at once, instead of after the TTL.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The store as messages name it.
pub fn describe(choice: &BackendChoice) -> String {
    match choice {
        BackendChoice::Zk(hosts) => format!("ZooKeeper at {hosts}"),
        BackendChoice::Etcd(endpoints) => format!("etcd at {}", endpoints.join(",")),
        BackendChoice::Pg(url, _) => {
            match recipes_pg::PgClient::builder(url.clone()).redacted_url() {
                Some(shown) => format!("PostgreSQL at {shown}"),
                None => "PostgreSQL (an unreadable URL)".to_owned(),
            }
        }
        BackendChoice::Redis(url) => format!("Redis at {}", redis_shown(url)),
    }
}

/// A Redis URL without its password.
fn redis_shown(url: &str) -> String {
    match url
        .split_once("://")
        .and_then(|(scheme, rest)| Some((scheme, rest.rsplit_once('@')?.1)))
    {
        Some((scheme, host)) => format!("{scheme}://***@{host}"),
        None => url.to_owned(),
    }
}

/// Close the session: what it still holds goes at once, not after the TTL.
fn close<C: Client>(client: &C) {
    if let Err(e) = client.close_within(CLOSE_GRACE) {
        say!("recipes: warning: the session did not close in time ({e}); it ends within the TTL");
    }
}

/// `recipes lock|semaphore|elect` through `backend`: the exit status.
pub fn run_under<C: Client>(
    backend: C,
    recipe: Recipe,
    name: &str,
    opts: &RunOptions,
    forwarded: &Receiver<libc::c_int>,
) -> i32 {
    let shown = shown(name);
    let wait = match (opts.no_wait, opts.wait) {
        (true, _) => Wait::AtOnce,
        (false, Some(d)) => Instant::now()
            .checked_add(d)
            .map_or(Wait::Forever, Wait::Until),
        (false, None) => Wait::Forever,
    };
    // The acquisition blocks; it runs aside so a signal can end the wait.
    let (client, todo, named) = (backend.clone(), recipe.clone(), name.to_owned());
    let acquired =
        signals::unless_signalled(forwarded, move || acquire(&client, &todo, &named, wait));
    let held = match acquired {
        Ok(Ok(Some(held))) => held,
        Ok(Ok(None)) => {
            say!(
                "recipes: {shown}: not acquired{}",
                match wait {
                    Wait::AtOnce => " (held elsewhere, --no-wait)".to_owned(),
                    _ => format!(" within {:?}", opts.wait.unwrap_or_default()),
                }
            );
            close(&backend);
            return i32::from(opts.conflict_exit_code);
        }
        Ok(Err(e)) => {
            say!("recipes: {shown}: {e}");
            close(&backend);
            return exit::for_error(&e);
        }
        // A signal (or no thread to acquire on): closing the session
        // removes a half-made acquisition at once.
        Err(stopped) => {
            let status = signals::stopped(&shown, stopped);
            close(&backend);
            return status;
        }
    };
    let acquired_at = Instant::now();
    let job = Job {
        name,
        argv: &opts.command,
        permit: matches!(recipe, Recipe::Semaphore(_)),
        grace: opts.grace,
        warning: supervise::warning(opts.grace, backend.granted_ttl()),
        lost_exit_code: i32::from(opts.lost_exit_code),
    };
    let outcome = supervise::run(&job, &held, forwarded);
    let code = match outcome {
        Outcome::Exited(code) | Outcome::NotStarted(code) => {
            if let (Outcome::Exited(_), Some(d)) = (&outcome, opts.hold_at_least) {
                hold_until(&held, acquired_at + d, forwarded, &shown);
            }
            // Aside, so that a signal ends it: a double barrier's leave
            // waits for every other member. Cut short, the close below
            // removes what the session still has.
            match signals::unless_signalled(forwarded, move || held.release()) {
                Ok(Ok(())) => code,
                // A double barrier's leave that did not see every member
                // go within --wait: CMD's own failure wins.
                Ok(Err(e)) if crate::double_barrier::leave_timed_out(&e) => {
                    say!("recipes: {shown}: not every member left within the wait");
                    if code == 0 {
                        i32::from(opts.conflict_exit_code)
                    } else {
                        code
                    }
                }
                Ok(Err(e)) => {
                    say!(
                        "recipes: {name}: warning: release failed ({e}); \
                         the lease ends by itself within the TTL"
                    );
                    code
                }
                Err(stopped) => signals::stopped(&shown, stopped),
            }
        }
        Outcome::Lost => {
            // Whatever is left is gone, or goes with the session below; a
            // release would wait for a store that may not answer (the
            // guard's drop still tries, within the close's grace).
            drop(held);
            job.lost_exit_code
        }
    };
    close(&backend);
    code
}

/// Keep `held` until `until` (`--hold-at-least`): a signal or the lease's
/// loss ends the wait early.
fn hold_until(held: &Held, until: Instant, forwarded: &Receiver<libc::c_int>, shown: &str) {
    let Some(left) = until.checked_duration_since(Instant::now()) else {
        return;
    };
    say!("recipes: {shown}: CMD ended; holding on for {left:?} (--hold-at-least)");
    select! {
        recv(held.lost.receiver()) -> _ => {
            let reason = held.lost.reason().map_or("lost".into(), |r| r.to_string());
            say!("recipes: {shown}: warning: lost while holding on ({reason})");
        }
        recv(forwarded) -> sig => {
            let sig = sig.unwrap_or(libc::SIGTERM);
            say!("recipes: {shown}: {} while holding on; releasing", signals::name(sig));
        }
        default(left) => {}
    }
}

/// `recipes status` through `client`: the exit status.
pub fn status<C: Client>(
    client: C,
    store: &str,
    args: &StatusArgs,
    signals: &Receiver<libc::c_int>,
) -> i32 {
    let (name, json) = (args.name.as_str(), args.json);
    if args.watch {
        let watched = crate::watch::watch(&client, name, json, signals);
        let _ = client.close_within(CLOSE_GRACE);
        return match watched {
            Ok(()) => 0,
            Err(Failure::Stdout(e)) => out::failed(&e),
            Err(Failure::Store(e)) => {
                say!("recipes: status of {} on {store}: {e}", shown(name));
                exit::for_error(&e)
            }
        };
    }
    let read = status::read(&client, name);
    let _ = client.close_within(CLOSE_GRACE);
    match read {
        Ok(s) => match out::print(&status::render(&s, name, client.store(), json, None)) {
            Ok(()) => 0,
            Err(e) => out::failed(&e),
        },
        Err(e) => {
            say!("recipes: status of {} on {store}: {e}", shown(name));
            exit::for_error(&e)
        }
    }
}

/// `name` as messages show it: as it is when short, else a cut quote.
fn shown(name: &str) -> std::borrow::Cow<'_, str> {
    if name.chars().count() <= 80 {
        name.into()
    } else {
        recipes_core::store::quote(name).into()
    }
}
