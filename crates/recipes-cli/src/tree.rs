//! The processes below one process, read from `/proc`: what the keeper
//! signals and kills. As a subreaper the keeper stays the ancestor of
//! everything CMD starts, also of orphans and of children that called
//! `setsid`, so this walk finds them all.

use std::collections::HashMap;
use std::fs;

/// The live processes below `root`, parents before their children. A
/// zombie is left out unless threads of it still run: a process whose main
/// thread ended (`pthread_exit`) reads `Z` while its other threads go on,
/// and must still be signalled (its pid is not reused until it is reaped).
pub fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    let mut children: HashMap<libc::pid_t, Vec<libc::pid_t>> = HashMap::new();
    let mut zombies = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if let Some((state, ppid, threads)) = stat_fields(pid) {
            children.entry(ppid).or_default().push(pid);
            if state == 'Z' && threads <= 1 {
                zombies.push(pid);
            }
        }
    }
    let mut found = Vec::new();
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        for &child in children.get(&parent).into_iter().flatten() {
            found.push(child);
            next.push(child);
        }
    }
    found.retain(|p| !zombies.contains(p));
    found
}

/// Field 3 (state), 4 (parent) and 20 (number of threads) of
/// `/proc/PID/stat`; the command name before them is in parentheses and
/// may hold anything.
fn stat_fields(pid: libc::pid_t) -> Option<(char, libc::pid_t, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    // Fields 5 to 19 lie between; field 20 is the 16th after the parent.
    let threads = rest.nth(15)?.parse().ok()?;
    Some((state, ppid, threads))
}

/// Send `sig` to each of `pids`.
pub fn signal(pids: &[libc::pid_t], sig: libc::c_int) {
    for &pid in pids {
        // SAFETY: kill has no memory preconditions.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grandchild_is_a_descendant() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        let me = std::process::id() as libc::pid_t;
        let sh = child.id() as libc::pid_t;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let below_sh = loop {
            let below_sh = descendants(sh);
            if !below_sh.is_empty() || std::time::Instant::now() > deadline {
                break below_sh;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let below_me = descendants(me);
        signal(&below_sh, libc::SIGKILL);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(below_sh.len(), 1, "sh's sleep: {below_sh:?}");
        assert!(
            below_me.contains(&sh) && below_me.contains(&below_sh[0]),
            "{below_me:?}"
        );
    }
}
