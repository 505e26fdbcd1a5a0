//! Per-server temporary folders, removed on drop and swept after crashes.
//!
//! Every folder lives under `<tmp>/recipes-it/<pid>-<label>-<n>`. A folder
//! whose owning process is gone (a killed test run, or a process-wide shared
//! server that is never dropped) is removed by the next harness that creates
//! a folder, unless a failing test asked to keep it; kept folders are swept
//! after a day.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;
use std::time::Duration;

const KEEP_MARKER: &str = "KEPT-AFTER-PANIC";
const KEEP_FOR: Duration = Duration::from_secs(24 * 3600);

/// A temporary folder owned by one server (data, config, log).
///
/// Dropped normally, it is removed. Dropped while the thread panics, it is
/// kept and its path printed, so the logs of a failed test can be read.
#[derive(Debug)]
pub struct TestDir {
    path: PathBuf,
    /// Whether dropping it removes the folder (not for the folder of a
    /// server another test process started).
    owned: bool,
}

impl TestDir {
    /// Creates a fresh folder whose name contains `label`.
    ///
    /// # Panics
    ///
    /// When the folder cannot be created.
    pub fn new(label: &str) -> TestDir {
        static SWEEP: Once = Once::new();
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let root = root();
        SWEEP.call_once(|| sweep(&root));
        // A server shared by the test processes of a nextest run keeps its
        // folder in the run's folder, removed when the run ends.
        let root = crate::run_shared::starting_root().unwrap_or(root);
        if let Err(e) = std::fs::create_dir_all(&root) {
            panic!("cannot create {}: {e}", root.display());
        }
        // Always a folder of our own: one kept after an earlier test's
        // failure (swept only after a day) may bear our name, its process
        // id since reused; a server started in it would find that test's
        // data (seen: "role recipes_user already exists" at bootstrap).
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = root.join(format!("{}-{label}-{n}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => return TestDir { path, owned: true },
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("cannot create test folder {}: {e}", path.display()),
            }
        }
    }

    /// The folder of a server another test process of this nextest run
    /// started (see [`crate::run_shared`]); dropping it leaves the folder.
    pub(crate) fn adopted(path: PathBuf) -> TestDir {
        TestDir { path, owned: false }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if std::thread::panicking() {
            let _ = std::fs::write(self.path.join(KEEP_MARKER), b"");
            eprintln!("test failed; keeping {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn root() -> PathBuf {
    std::env::temp_dir().join("recipes-it")
}

/// Removes folders of processes that no longer run.
fn sweep(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next()?.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let path = entry.path();
        let kept_recently = std::fs::metadata(path.join(KEEP_MARKER))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age < KEEP_FOR);
        if !kept_recently {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}
