//! A data folder made by `initdb` once per machine and copied for each
//! server: `initdb` runs its bootstrap for seconds on a loaded machine, a
//! copy of its 40 MB takes a tenth of one, and the suite starts a PostgreSQL
//! server per fault test (one at a time, so each second is a second of the
//! whole run).
//!
//! The template lives in `<tmp>/recipes-it-pg-template/<key>/data`, where
//! the key names the `initdb` binary (size and change time) and the
//! arguments, so an upgraded PostgreSQL makes a new one. It is made under
//! an `flock` in a folder of its own and renamed into place when complete.
//! Only a speed-up: when anything fails, or with `RECIPES_PG_TEMPLATE=0`,
//! the server runs `initdb` itself.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{PG_BIN_DIR, PG_SUPERUSER};

/// Fills `data` (which must not exist) with a fresh data folder owned by
/// `uid`/`gid`: a copy of the template, or `initdb`'s own output.
pub(super) fn fresh_data_dir(data: &Path, log: &Path, uid: u32, gid: u32) {
    if let Some(template) = template(uid, gid) {
        let copied = Command::new("cp")
            .arg("-a")
            .arg(&template)
            .arg(data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if copied {
            let note = format!(
                "=== [harness] data folder copied from {}\n",
                template.display()
            );
            let _ = append(log, &note);
            return;
        }
        let _ = std::fs::remove_dir_all(data);
    }
    init_data_dir(data, log, uid, gid);
}

/// The template's data folder, made on first use; `None` when it cannot
/// be made.
fn template(uid: u32, gid: u32) -> Option<PathBuf> {
    if std::env::var("RECIPES_PG_TEMPLATE").is_ok_and(|v| v == "0") {
        return None;
    }
    let initdb = std::fs::metadata(format!("{PG_BIN_DIR}/initdb")).ok()?;
    let mut hasher = DefaultHasher::new();
    (
        initdb.len(),
        initdb.ctime(),
        initdb.ctime_nsec(),
        uid,
        gid,
        initdb_args(),
    )
        .hash(&mut hasher);
    let root = std::env::temp_dir().join("recipes-it-pg-template");
    let folder = root.join(format!("{:016x}", hasher.finish()));
    let data = folder.join("data");
    if data.join("PG_VERSION").exists() {
        return Some(data);
    }
    std::fs::create_dir_all(&root).ok()?;
    let lock = std::fs::File::create(root.join(format!("{:016x}.lock", hasher.finish()))).ok()?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return None;
    }
    if data.join("PG_VERSION").exists() {
        return Some(data);
    }
    let building = root.join(format!("building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    std::fs::create_dir_all(&building).ok()?;
    super::chown(&building, uid, gid);
    let log = building.join("initdb.log");
    let made = std::panic::catch_unwind(|| init_data_dir(&building.join("data"), &log, uid, gid));
    let placed = made.is_ok() && std::fs::rename(&building, &folder).is_ok();
    if !placed {
        let _ = std::fs::remove_dir_all(&building);
        return None;
    }
    Some(data)
}

fn append(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(text.as_bytes())
}

/// `initdb`'s arguments beside `--pgdata`.
fn initdb_args() -> [String; 6] {
    [
        format!("--username={PG_SUPERUSER}"),
        "--auth=trust".to_owned(),
        "--encoding=UTF8".to_owned(),
        "--locale=C.UTF-8".to_owned(),
        // The folder is thrown away after the test; syncing it costs time.
        "--no-sync".to_owned(),
        "--no-instructions".to_owned(),
    ]
}

/// Runs `initdb` as `uid`/`gid`, its output appended to `log`.
///
/// # Panics
///
/// When it fails; the message quotes the log.
fn init_data_dir(data: &Path, log: &Path, uid: u32, gid: u32) {
    use std::os::unix::process::CommandExt as _;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
    let status = Command::new(format!("{PG_BIN_DIR}/initdb"))
        .arg(format!("--pgdata={}", data.display()))
        .args(initdb_args())
        .uid(uid)
        .gid(gid)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("clone the log handle"))
        .stderr(out)
        .status();
    match status {
        Ok(status) if status.success() => {}
        other => panic!(
            "initdb {} failed: {other:?}\n{}",
            data.display(),
            crate::ServerLogs::single("pg initdb", log).tail()
        ),
    }
}
