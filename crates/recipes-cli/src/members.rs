//! `recipes members NAME [--json] [--watch]`: the members of a group (on
//! ZooKeeper Curator's `GroupMember`), once or on every change until a
//! signal; `{"members":[{"id":…,"data":…}],"version":N}` with --json.

use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;
use crossbeam_channel::Receiver;
use recipes_core::{Client, GroupView};

use crate::exit;
use crate::out::{self, Failure};
use crate::status::json_string;

/// How long one wait for a change lasts before signals are looked at.
const SLICE: Duration = Duration::from_millis(250);

/// `recipes members`.
#[derive(Debug, Args)]
pub struct MembersArgs {
    /// The group: a path such as /services/api.
    pub name: String,
    /// Print JSON (`{"members":[{"id":…,"data":…}],"version":N}`) instead
    /// of text (one `ID DATA` line per member).
    #[arg(long)]
    pub json: bool,
    /// Keep watching: print the members again on every change (the
    /// store's notifications) until Ctrl-C; with --json, one object per
    /// line.
    #[arg(long)]
    pub watch: bool,
}

/// The view as printed: JSON on one line, or one `ID DATA` line per member
/// (data as UTF-8, lossily) and nothing for an empty group.
pub fn render(view: &GroupView, json: bool) -> String {
    let mut out = String::new();
    if json {
        out.push_str("{\"members\":[");
        for (i, m) in view.members.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let data = String::from_utf8_lossy(&m.data);
            let _ = write!(
                out,
                "{sep}{{\"id\":{},\"data\":{}}}",
                json_string(&m.id),
                json_string(&data)
            );
        }
        let _ = writeln!(out, "],\"version\":{}}}", view.version);
    } else {
        for m in &view.members {
            let _ = writeln!(out, "{} {}", m.id, String::from_utf8_lossy(&m.data));
        }
    }
    out
}

/// Print the members once, or on every change until a signal; a failed
/// write to stdout ends it.
fn members<C: Client>(
    client: &C,
    args: &MembersArgs,
    signals: &Receiver<libc::c_int>,
) -> Result<(), Failure> {
    let group = client.group(&args.name)?;
    if !args.watch {
        out::print(&render(&group.members()?, args.json))?;
        return Ok(());
    }
    let mut watch = group.watch()?;
    out::print(&render(watch.last(), args.json))?;
    while signals.try_recv().is_err() {
        if let Some(change) = watch.next_timeout(SLICE)? {
            let gap = if args.json { "" } else { "\n" };
            out::print(&format!("{gap}{}", render(&change.view, args.json)))?;
        }
    }
    Ok(())
}

/// Run `recipes members` on `client`: the exit status.
pub fn run<C: Client>(client: C, args: &MembersArgs, signals: &Receiver<libc::c_int>) -> i32 {
    let done = members(&client, args, signals);
    let _ = client.close_within(Duration::from_secs(2));
    match done {
        Ok(()) => 0,
        Err(Failure::Stdout(e)) => out::failed(&e),
        Err(Failure::Store(e)) => {
            say!(
                "recipes: members of {}: {e}",
                recipes_core::store::quote(&args.name)
            );
            exit::for_error(&e)
        }
    }
}
