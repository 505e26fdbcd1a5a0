//! Signals sent to `recipes` itself: SIGINT, SIGTERM and SIGHUP are blocked
//! in every thread and taken by one thread with `sigwait`, which hands them
//! to the main loop over a channel (to forward to CMD). SIGTTOU is blocked
//! too, so `recipes` can take the terminal back from CMD while it is in the
//! background.
//!
//! A `recipes` started with SIGINT or SIGTERM ignored (`&` in a script
//! ignores SIGINT) takes and forwards them all the same, and CMD starts
//! with every signal at its default action. An ignored SIGHUP is `nohup`'s
//! request: it stays ignored, in `recipes` and in CMD, and is not
//! forwarded.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::Receiver;

/// The signals `recipes` forwards to CMD.
pub const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Whether `recipes` started with SIGHUP ignored (`nohup`).
static NOHUP: AtomicBool = AtomicBool::new(false);

fn forwarded_set() -> libc::sigset_t {
    let nohup = NOHUP.load(Ordering::Relaxed);
    // SAFETY: sigemptyset/sigaddset initialise and fill a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FORWARDED {
            if !(nohup && s == libc::SIGHUP) {
                libc::sigaddset(&mut set, s);
            }
        }
        set
    }
}

/// Whether `sig` is ignored in this process.
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: queries the disposition into a zeroed struct.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Block the forwarded signals and SIGTTOU in the calling thread. Call it
/// first thing in `main`, before any thread exists: threads inherit the
/// mask, so only the `sigwait` thread ever takes these signals.
///
/// # Errors
///
/// The OS error of `pthread_sigmask`.
pub fn block() -> io::Result<()> {
    NOHUP.store(ignored(libc::SIGHUP), Ordering::Relaxed);
    let mut set = forwarded_set();
    // SAFETY: adds to a valid set; pthread_sigmask reads it.
    let rc = unsafe {
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    // Blocked now, so the default action cannot end us: `sigwait` takes
    // them. An ignored signal would be dropped by some kernels, and CMD's
    // keeper would inherit the ignoring.
    for s in [libc::SIGINT, libc::SIGTERM] {
        if ignored(s) {
            // SAFETY: sets a default disposition.
            unsafe {
                libc::signal(s, libc::SIG_DFL);
            }
        }
    }
    Ok(())
}

/// Start the thread that takes the forwarded signals; each arrives on the
/// returned channel.
///
/// # Errors
///
/// When the thread cannot be started.
pub fn listen() -> io::Result<Receiver<libc::c_int>> {
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("recipes-signals".into())
        .spawn(move || {
            let set = forwarded_set();
            loop {
                let mut sig: libc::c_int = 0;
                // SAFETY: `set` is a valid set, `sig` a valid out pointer.
                if unsafe { libc::sigwait(&set, &mut sig) } == 0 && tx.send(sig).is_err() {
                    return;
                }
            }
        })?;
    Ok(rx)
}

/// Run `call` on a thread of its own and return what it returns, unless a
/// forwarded signal comes first: then `Err(Some(signal))` (the call goes
/// on until the caller closes its session, which ends it). `Err(None)`:
/// no thread could be started, or it died.
pub fn unless_signalled<T: Send + 'static>(
    forwarded: &Receiver<libc::c_int>,
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Option<libc::c_int>> {
    let (tx, done) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("recipes-call".into())
        .spawn(move || {
            let _ = tx.send(call());
        })
        .map_err(|_| None)?;
    crossbeam_channel::select! {
        recv(done) -> result => result.map_err(|_| None),
        recv(forwarded) -> sig => Err(Some(sig.unwrap_or(libc::SIGTERM))),
    }
}

/// The exit status of a call on `name` that [`unless_signalled`] cut
/// short, said on stderr.
pub fn stopped(name: &str, stopped: Option<libc::c_int>) -> i32 {
    match stopped {
        Some(sig) => {
            say!(
                "recipes: {name}: {} while waiting; giving up",
                self::name(sig)
            );
            crate::exit::for_signal(sig)
        }
        None => {
            say!("recipes: {name}: the calling thread could not run");
            crate::exit::UNAVAILABLE
        }
    }
}

/// The name of a signal, for messages.
pub fn name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGKILL => "SIGKILL",
        _ => "a signal",
    }
}
