//! A cgroup v2 of CMD's own, where the hierarchy is writable: every process
//! CMD starts stays in it (whatever its process group or session), and one
//! write to `cgroup.kill` ends them all, also those forking at that moment.
//!
//! `RECIPES_CGROUP=off` turns it off (the keeper's subreaper still finds
//! the tree, see `keeper.rs`).

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use crate::tree::{self, Found};

/// The environment variable that turns the cgroup off (`off`).
pub const SWITCH: &str = "RECIPES_CGROUP";

/// A cgroup made for one CMD.
#[derive(Debug, Clone)]
pub struct OwnCgroup {
    dir: PathBuf,
}

impl OwnCgroup {
    /// Make `recipes-<pid>` below our own cgroup v2. `None` when
    /// `RECIPES_CGROUP=off`, when there is no cgroup v2 hierarchy, or when
    /// it is not ours to write (the v1-only hosts, an unprivileged user
    /// outside a delegated subtree).
    pub fn create() -> Option<OwnCgroup> {
        if std::env::var_os(SWITCH).is_some_and(|v| v == "off") {
            return None;
        }
        let parent = own_v2_dir()?;
        // Moving CMD in needs write access to the cgroup it leaves.
        let procs = CString::new(parent.join("cgroup.procs").as_os_str().as_bytes()).ok()?;
        // SAFETY: access reads a valid C string.
        if unsafe { libc::access(procs.as_ptr(), libc::W_OK) } != 0 {
            return None;
        }
        let dir = parent.join(format!("recipes-{}", std::process::id()));
        // A leftover of a dead `recipes` with our pid: empty, so removable.
        let _ = fs::remove_dir(&dir);
        fs::create_dir(&dir).ok()?;
        Some(OwnCgroup { dir })
    }

    /// The cgroup at `dir` (made by [`create`](Self::create) in another
    /// process).
    pub fn at(dir: PathBuf) -> OwnCgroup {
        OwnCgroup { dir }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its `cgroup.procs`, for a child to write `0` to (itself) between
    /// fork and exec.
    pub fn procs_path(&self) -> Option<CString> {
        CString::new(self.dir.join("cgroup.procs").as_os_str().as_bytes()).ok()
    }

    /// The processes in it now.
    pub fn procs(&self) -> Vec<libc::pid_t> {
        fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Send `sig` to every process in it but those of `done` (signalled
    /// already), each only while it is still in it: a pid listed may be
    /// reaped and given to another process before the signal.
    pub fn signal_except(&self, done: &[Found], sig: libc::c_int) {
        for pid in self.procs() {
            if !done.iter().any(|f| f.pid == pid) {
                tree::signal_checked(pid, sig, || self.holds(pid));
            }
        }
    }

    /// Whether `pid` is in it now. A process given a pid reaped meanwhile
    /// is not in it, unless one of ours started it (then it is ours too).
    fn holds(&self, pid: libc::pid_t) -> bool {
        self.procs().contains(&pid)
    }

    /// SIGKILL everything in it: `cgroup.kill` (Linux 5.14 and later), else
    /// each process listed (the caller repeats until the tree is empty).
    pub fn kill(&self) {
        if fs::write(self.dir.join("cgroup.kill"), "1").is_err() {
            self.signal_except(&[], libc::SIGKILL);
        }
    }

    /// Remove it once empty. `Err` while processes are still in it.
    ///
    /// # Errors
    ///
    /// The OS error of `rmdir` (EBUSY while populated).
    pub fn remove(&self) -> io::Result<()> {
        match fs::remove_dir(&self.dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

/// Our own cgroup's directory in a mounted cgroup v2 hierarchy.
fn own_v2_dir() -> Option<PathBuf> {
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = own.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let mounts = fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|line| {
        let (fields, fs_type) = line.split_once(" - ")?;
        if !fs_type.starts_with("cgroup2 ") {
            return None;
        }
        let mut fields = fields.split(' ');
        let root = unescape(fields.nth(3)?);
        let mount_point = unescape(fields.next()?);
        let below = Path::new(own).strip_prefix(&root).ok()?;
        let dir = Path::new(&mount_point).join(below);
        dir.is_dir().then_some(dir)
    })
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::unescape;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape("/sys/fs/cgroup/unified"), "/sys/fs/cgroup/unified");
        assert_eq!(unescape("/mnt/a\\040b"), "/mnt/a b");
    }
}
