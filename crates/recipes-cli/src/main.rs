//! # recipes
//!
//! Run a command under a distributed lock, semaphore permit or leadership
//! over ZooKeeper or etcd — like `flock(1)`, across machines, with fencing.
//!
//! ```text
//! recipes --zk 127.0.0.1:2181 lock /locks/nightly-report --wait 30s -- ./report.sh
//! ```
//!
//! CMD runs in its own process group with `RECIPES_FENCE` (the fencing
//! token), `RECIPES_NAME` and `RECIPES_HOLDER` in its environment, and a
//! parent-death signal (SIGKILL), so a killed `recipes` does not leave CMD
//! running without the lock. When the lease is lost, CMD's group gets
//! SIGTERM, then SIGKILL after `--grace` or at the earliest moment the
//! server may give the lease away, whichever is first.
//!
//! ## What is not guaranteed
//!
//! - A lease can expire while CMD runs (a pause, a partition): the fence is
//!   what keeps a stale CMD's writes out — pass `RECIPES_FENCE` to the
//!   resource.
//! - The parent-death signal reaches CMD itself, not processes CMD started:
//!   if `recipes` is SIGKILLed, CMD's own children live on unless CMD ends
//!   them.
//! - `elect` on ZooKeeper campaigns in Curator's latch layout: Curator
//!   latches on the same path contend with it, Curator `LeaderSelector`s
//!   (lock layout) do not.

#![warn(missing_docs)]
#![deny(missing_debug_implementations)]

mod backend;
mod cgroup;
mod child;
mod cli;
mod duration;
mod exit;
mod keeper;
mod keeper_protocol;
mod run;
mod signals;
mod status;
mod supervise;
mod tree;

use backend::{on_client, Recipe};
use cli::Command;

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == keeper::ARG) {
        std::process::exit(keeper::main(&args[1..]));
    }
    std::process::exit(real_main());
}

fn real_main() -> i32 {
    // Before any thread exists, so every thread inherits the mask.
    if let Err(e) = signals::block() {
        eprintln!("recipes: cannot block signals: {e}");
        return exit::UNAVAILABLE;
    }
    let (cli, choice) = match cli::parse(std::env::args_os()) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let forwarded = match signals::listen() {
        Ok(rx) => rx,
        Err(e) => {
            eprintln!("recipes: cannot start the signal thread: {e}");
            return exit::UNAVAILABLE;
        }
    };
    let store = run::describe(&choice);
    let connected = match backend::connect(&choice, cli.ttl) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("recipes: cannot connect to {store}: {e}");
            return exit::for_error(&e);
        }
    };
    let id = cli::participant_id(&cli);
    on_client!(connected, client => match &cli.command {
        Command::Lock(a) => run::run_under(client, Recipe::Lock, &a.name, &a.run, &forwarded),
        Command::Semaphore(a) => {
            let recipe = Recipe::Semaphore(a.permits);
            run::run_under(client, recipe, &a.name, &a.run, &forwarded)
        }
        Command::Elect(a) => {
            run::run_under(client, Recipe::Elect(id), &a.name, &a.run, &forwarded)
        }
        Command::Status(a) => run::status(client, &store, &a.name, a.json),
    })
}
