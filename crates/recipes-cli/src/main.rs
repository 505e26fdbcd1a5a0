//! # recipes
//!
//! Run a command under a distributed lock, semaphore permit or leadership
//! over ZooKeeper, etcd or PostgreSQL — like `flock(1)`, across machines, with fencing.
//!
//! ```text
//! recipes --zk 127.0.0.1:2181 lock /locks/nightly-report --wait 30s -- ./report.sh
//! ```
//!
//! CMD runs with `RECIPES_FENCE` (the fencing token), `RECIPES_NAME` and
//! `RECIPES_HOLDER` in its environment, every signal at its default action
//! (but an ignored SIGHUP: `nohup`), in its own process group, as the child
//! of a *keeper*: a small process of ours that outlives a SIGKILL of
//! `recipes`, is a child subreaper (so every process CMD starts stays below
//! it, also one that calls `setsid` or is orphaned) and, where a cgroup v2
//! hierarchy is writable, puts CMD in a cgroup of its own. CMD's *tree* is
//! CMD and every process it started.
//!
//! - When the lease is lost or at risk, the tree gets SIGTERM, then SIGKILL
//!   after `--grace` or at the earliest moment the server may give the
//!   lease away, whichever is first; `recipes` exits once none of it is
//!   left.
//! - When CMD exits and left processes running, they are stopped the same
//!   way before the lease is released.
//! - SIGINT, SIGTERM and SIGHUP sent to `recipes` reach every process of
//!   the tree, also when `recipes` was started with them ignored (`&` in a
//!   script ignores SIGINT), except an ignored SIGHUP (`nohup`).
//! - When `recipes` is SIGKILLed, the keeper reads end of file on a socket
//!   only `recipes` held and kills the tree at once — milliseconds, while
//!   the lease still lasts (it outlives the kill by at least two thirds of
//!   the TTL: renewals come every third or quarter of it).
//!
//! ## What is guaranteed where
//!
//! | | cgroup v2 writable | otherwise (subreaper keeper) |
//! |---|---|---|
//! | how the tree is killed | `cgroup.kill` (each pid in `cgroup.procs` before Linux 5.14), then a `/proc` walk | a `/proc` walk below the keeper, repeated until it has no child |
//! | a process forking while it is killed | killed with it (`cgroup.kill` is atomic) | caught by the next walk |
//! | the keeper alone is SIGKILLed | CMD dies (parent-death signal); `recipes` kills the cgroup, exits 71 | CMD dies; `recipes`, a subreaper too, kills what CMD started (it is reparented to `recipes`) before it releases, exits 71 |
//! | `recipes` and the keeper are SIGKILLed (`kill -9` of both, the OOM killer) | CMD dies; what it started lives on in its cgroup | CMD dies; what it started lives on |
//!
//! The cgroup is `recipes-<pid>` below the cgroup `recipes` runs in; it is
//! used where that is a cgroup v2 directory whose `cgroup.procs` we may
//! write (root, or a delegated subtree such as a systemd user session), and
//! `RECIPES_CGROUP=off` turns it off. If the keeper cannot start, CMD does
//! not run (exit 71). docs/command.md has the details.
//!
//! ## What is not guaranteed
//!
//! - A lease can expire while CMD runs (a pause, a partition): the fence is
//!   what keeps a stale CMD's writes out — pass `RECIPES_FENCE` to the
//!   resource. A machine that stalls for longer than the lease stalls the
//!   keeper too.
//! - Processes CMD has started elsewhere — through a service manager
//!   (`systemd-run`), a daemon (`docker run -d`), another machine (`ssh`) —
//!   are not in its tree.
//! - `elect` on ZooKeeper campaigns in Curator's latch layout: Curator
//!   latches on the same path contend with it, Curator `LeaderSelector`s
//!   (lock layout) do not.

#![warn(missing_docs)]
#![deny(missing_debug_implementations)]

#[macro_use]
mod say;

mod backend;
mod barrier;
mod cgroup;
mod child;
mod choose;
mod cli;
mod count;
mod credentials;
mod doctor;
mod double_barrier;
mod duration;
mod exit;
mod generated;
mod help;
mod join;
mod keeper;
mod keeper_protocol;
mod locks;
mod members;
mod out;
mod run;
mod signals;
mod status;
mod supervise;
mod tree;
mod watch;

use backend::{on_client, Recipe};
use cli::Command;

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == keeper::ARG) {
        std::process::exit(keeper::main(&args[1..]));
    }
    std::process::exit(real_main());
}

/// Why names are short, in the refusal of a long one.
const NAME_LIMIT: &str = "names are sent in every request";

fn real_main() -> i32 {
    // Before any thread exists, so every thread inherits the mask.
    if let Err(e) = signals::block() {
        say!("recipes: cannot block signals: {e}");
        return exit::UNAVAILABLE;
    }
    let (cli, choice) = match cli::parse(std::env::args_os()) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let forwarded = match signals::listen() {
        Ok(rx) => rx,
        Err(e) => {
            say!("recipes: cannot start the signal thread: {e}");
            return exit::UNAVAILABLE;
        }
    };
    // What every store refuses is refused before connecting: a bad name is
    // a usage error even when the store is down.
    for name in cli.command.names() {
        if let Err(e) =
            recipes_core::store::check_name("the name", name, NAME_LIMIT, char::is_control)
        {
            say!("recipes: {e}");
            return exit::for_error(&e);
        }
    }
    if let Some(addr) = cli.command.run_options().and_then(|o| o.metrics_addr) {
        let exporter = metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install();
        if let Err(e) = exporter {
            say!("recipes: cannot serve metrics on {addr}: {e}; give a free address");
            return exit::USAGE;
        }
    }
    let credentials = credentials::resolve(cli.user.as_deref(), cli.password_file.as_deref());
    let credentials = match credentials {
        Ok(c) => c,
        Err(msg) => {
            say!("recipes: {msg}");
            return exit::USAGE;
        }
    };
    let tls = match cli.tls() {
        Ok(tls) => tls,
        Err(msg) => {
            say!("recipes: {msg}");
            return exit::USAGE;
        }
    };
    if let Command::Doctor(args) = &cli.command {
        let asked = doctor::Asked {
            choice: &choice,
            ttl: cli.ttl,
            tls: tls.as_ref(),
        };
        return doctor::run(&asked, args, credentials.as_ref(), cli.zk_sasl);
    }
    let store = run::describe(&choice);
    let connected = match backend::connect(
        &choice,
        cli.ttl,
        credentials.as_ref(),
        cli.zk_sasl,
        tls.as_ref(),
    ) {
        Ok(c) => c,
        Err(e) => {
            say!("recipes: cannot connect to {store}: {e}");
            return exit::for_error(&e);
        }
    };
    let id = cli::participant_id(&cli);
    on_client!(connected, client => match &cli.command {
        Command::Lock(a) => {
            let recipe = Recipe::Locks(a.parts.clone());
            run::run_under(client, recipe, cli.command.name(), &a.run, &forwarded)
        }
        Command::Semaphore(a) => {
            let recipe = Recipe::Semaphore(a.permits);
            run::run_under(client, recipe, &a.name, &a.run, &forwarded)
        }
        Command::Elect(a) => {
            run::run_under(client, Recipe::Elect(id), &a.name, &a.run, &forwarded)
        }
        Command::Status(a) => run::status(client, &store, a, &forwarded),
        Command::Count(a) => count::run(client, &a.op, &forwarded),
        Command::Barrier(a) => barrier::run(client, &a.op, &forwarded),
        Command::DoubleBarrier(a) => {
            let recipe = Recipe::DoubleBarrier(a.count, a.run.wait);
            run::run_under(client, recipe, &a.name, &a.run, &forwarded)
        }
        Command::Members(a) => members::run(client, a, &forwarded),
        Command::Join(a) => {
            let recipe = Recipe::Join(id, a.data.clone().unwrap_or_default());
            run::run_under(client, recipe, &a.name, &a.run, &forwarded)
        }
        Command::Doctor(_) | Command::Completions(_) | Command::Man => exit::USAGE,
    })
}
