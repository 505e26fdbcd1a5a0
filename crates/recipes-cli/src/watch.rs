//! `recipes status NAME --watch`: the status, shown again on every change.
//!
//! The store's own watches say when to look (the election observer's
//! looks, on NAME and on NAME/leases, where a semaphore's permits live):
//! no polling of the store but for what a backend's observer does itself
//! (Redis publishes only goings: a newcomer shows at its next poll). Under
//! a terminal the screen is redrawn, with a clock while NAME has no
//! holder; otherwise each change is printed once (`--json`: one object per
//! line).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use crossbeam_channel::{never, select, tick, Receiver};
use recipes_core::Client;

use crate::out::{self, Failure};
use crate::status::{self, Status, Vacancy};

/// How often the clock of a terminal view moves while NAME has no holder,
/// and how soon a failed read is tried again.
const CLOCK: Duration = Duration::from_secs(1);

/// Clear the screen and put the cursor top left.
const REDRAW: &str = "\x1b[H\x1b[2J";

/// Show NAME's status on every change until a signal arrives on `signals`
/// (then `Ok`) or the client closes.
///
/// # Errors
///
/// The first read's and the observers' errors (a name the store refuses,
/// no connection); later read errors are shown and retried. A failed write
/// to stdout ends the watch.
pub fn watch<C: Client>(
    client: &C,
    name: &str,
    json: bool,
    signals: &Receiver<libc::c_int>,
) -> Result<(), Failure> {
    let own = client.election(name)?.observe()?;
    // A name whose `/leases` child the store refuses is no semaphore.
    let permits = client
        .election(&format!("{name}/leases"))
        .and_then(|e| e.observe())
        .ok();
    let permit_looks = permits.as_ref().map_or(never(), |o| o.looks().clone());
    let terminal = !json && std::io::stdout().is_terminal();
    let mut view = View {
        vacant: None,
        shown: None,
    };
    let mut status = status::read(client, name)?;
    let mut failing = false;
    loop {
        let vacancy = view.vacancy(&status);
        if terminal || view.shown.as_ref() != Some(&status) {
            let text = status::render(&status, name, client.store(), json, Some(vacancy));
            let redraw = if terminal { REDRAW } else { "" };
            let gap = if view.shown.is_some() && !terminal && !json {
                "\n"
            } else {
                ""
            };
            out::print(&format!("{redraw}{gap}{text}"))?;
            view.shown = Some(status.clone());
        }
        // The clock moves only on a terminal, and only while it shows one.
        let clock = if failing || (terminal && vacancy.is_some()) {
            tick(CLOCK)
        } else {
            never()
        };
        // The store is read again on a look, or to retry a failed read;
        // the clock alone only redraws (no polling of the store).
        select! {
            recv(own.looks()) -> r => if r.is_err() { return Ok(()) },
            recv(permit_looks) -> r => if r.is_err() { return Ok(()) },
            recv(signals) -> _ => return Ok(()),
            recv(clock) -> _ => if !failing { continue },
        }
        match status::read(client, name) {
            Ok(s) => {
                status = s;
                failing = false;
            }
            Err(e) => {
                if !failing {
                    say!("recipes: status of {name}: {e}; looking again");
                }
                failing = true;
            }
        }
    }
}

/// What the watch has shown, and since when NAME has had no holder.
struct View {
    /// Since when the watch has seen NAME without a holder, and whether it
    /// had none from the start (so maybe for longer); `None` while held.
    vacant: Option<(Instant, bool)>,
    shown: Option<Status>,
}

impl View {
    /// How long `status` has had no holder, `None` while it has one.
    fn vacancy(&mut self, status: &Status) -> Option<Vacancy> {
        if !status.entries.is_empty() {
            self.vacant = None;
            return None;
        }
        let from_start = self.shown.is_none();
        let (since, at_least) = *self.vacant.get_or_insert((Instant::now(), from_start));
        Some(Vacancy {
            for_: since.elapsed(),
            at_least,
        })
    }
}
