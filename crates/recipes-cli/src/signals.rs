//! Signals sent to `recipes` itself: SIGINT, SIGTERM and SIGHUP are blocked
//! in every thread and taken by one thread with `sigwait`, which hands them
//! to the main loop over a channel (to forward to CMD). SIGTTOU is blocked
//! too, so `recipes` can take the terminal back from CMD while it is in the
//! background.

use std::io;

use crossbeam_channel::Receiver;

/// The signals `recipes` forwards to CMD.
pub const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FORWARDED {
            libc::sigaddset(&mut set, s);
        }
        set
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
    let mut set = forwarded_set();
    // SAFETY: adds to a valid set; pthread_sigmask reads it.
    let rc = unsafe {
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
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
