//! Running `recipes doctor` and reading its lines.

use std::process::Stdio;

use super::recipes;

/// Run `recipes ARGS doctor EXTRA`: exit status, stdout, stderr.
pub fn doctor(store: &[String], ttl: &str, extra: &[&str]) -> (i32, String, String) {
    let out = recipes()
        .args(store)
        .args(["--ttl", ttl, "doctor"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("recipes runs");
    (
        out.status.code().expect("recipes exits"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The level (ok, warn, fail, skip) of the check `name` in the text
/// output.
pub fn level<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    out.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        let level = words.next()?;
        (words.next() == Some(name)).then_some(level)
    })
}
