//! The crates ship as real crates: every published crate carries the
//! metadata crates.io and docs.rs need, and the declared minimum Rust
//! version (`rust-version`) is at least every dependency's.
//!
//! Only one toolchain exists on the machines that run the suite, so the
//! MSRV cannot be proven by building with it; this checks what can be
//! checked without one: no dependency of a published crate (normal or
//! build, on any platform) declares a newer `rust-version` than ours.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// The crates published to crates.io.
const PUBLISHED: [&str; 6] = [
    "recipes-core",
    "recipes-zk",
    "recipes-etcd",
    "recipes-pg",
    "recipes-redis",
    "recipes-cli",
];

/// `cargo ARGS` in the workspace: its stdout (a panic quoting stderr when
/// it fails).
fn cargo(args: &[&str]) -> Vec<u8> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn metadata() -> Value {
    let out = cargo(&["metadata", "--format-version", "1", "--locked"]);
    serde_json::from_slice(&out).expect("cargo metadata prints JSON")
}

/// "1.89" or "1.89.0" as (1, 89, 0).
fn version(v: &str) -> (u64, u64, u64) {
    let mut parts = v.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

fn packages_by_id(meta: &Value) -> BTreeMap<String, &Value> {
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().expect("id").to_owned(), p))
        .collect()
}

/// The ids of the published crates and everything they need to build
/// (normal and build dependencies, every platform; not dev-dependencies).
fn shipped_closure(meta: &Value, by_id: &BTreeMap<String, &Value>) -> BTreeSet<String> {
    let nodes: BTreeMap<&str, &Value> = meta["resolve"]["nodes"]
        .as_array()
        .expect("resolve")
        .iter()
        .map(|n| (n["id"].as_str().expect("id"), n))
        .collect();
    let mut todo: Vec<String> = by_id
        .iter()
        .filter(|(_, p)| PUBLISHED.contains(&p["name"].as_str().unwrap_or("")))
        .map(|(id, _)| id.clone())
        .collect();
    let mut seen = BTreeSet::new();
    while let Some(id) = todo.pop() {
        if !seen.insert(id.clone()) {
            continue;
        }
        for dep in nodes[id.as_str()]["deps"].as_array().into_iter().flatten() {
            let shipped = dep["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].as_str() != Some("dev"));
            if shipped {
                todo.push(dep["pkg"].as_str().expect("pkg").to_owned());
            }
        }
    }
    seen
}

#[test]
fn declared_msrv_is_at_least_every_dependencys() {
    let meta = metadata();
    let by_id = packages_by_id(&meta);
    let ours: BTreeSet<String> = PUBLISHED
        .iter()
        .map(|name| {
            let p = by_id
                .values()
                .find(|p| p["name"] == *name)
                .unwrap_or_else(|| panic!("{name} is a workspace member"));
            p["rust_version"]
                .as_str()
                .unwrap_or_else(|| panic!("{name} declares no rust-version"))
                .to_owned()
        })
        .collect();
    assert_eq!(ours.len(), 1, "one rust-version for every crate: {ours:?}");
    let msrv = ours.into_iter().next().expect("one");
    let newer: Vec<String> = shipped_closure(&meta, &by_id)
        .iter()
        .map(|id| by_id[id])
        .filter_map(|p| {
            let rv = p["rust_version"].as_str()?;
            (version(rv) > version(&msrv))
                .then(|| format!("{} {} needs {rv}", p["name"], p["version"]))
        })
        .collect();
    assert!(
        newer.is_empty(),
        "the declared rust-version {msrv} is older than what these dependencies need: {newer:?}; \
         raise workspace.package.rust-version"
    );
}

#[test]
fn published_crates_carry_their_metadata() {
    let meta = metadata();
    for p in packages_by_id(&meta).values() {
        let name = p["name"].as_str().unwrap_or("");
        if !PUBLISHED.contains(&name) {
            continue;
        }
        for field in ["description", "license", "repository", "readme"] {
            assert!(
                p[field].as_str().is_some_and(|v| !v.is_empty()),
                "{name} has no {field}"
            );
        }
        for field in ["keywords", "categories"] {
            assert!(
                p[field].as_array().is_some_and(|v| !v.is_empty()),
                "{name} has no {field}"
            );
        }
        assert_eq!(
            p["metadata"]["docs"]["rs"]["all-features"],
            Value::Bool(true),
            "{name}: docs.rs should build it with every feature"
        );
        for dep in p["dependencies"].as_array().into_iter().flatten() {
            if dep["path"].is_string() && dep["kind"].as_str() != Some("dev") {
                assert!(
                    dep["req"].as_str() != Some("*"),
                    "{name}'s path dependency {} has no version",
                    dep["name"]
                );
            }
        }
    }
}

/// What `cargo package --list` (offline: no registry is asked) ships of
/// `name`.
fn package_list(name: &str) -> Vec<String> {
    let out = cargo(&[
        "package",
        "--list",
        "--offline",
        "--allow-dirty",
        "-p",
        name,
    ]);
    String::from_utf8_lossy(&out)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn each_package_holds_its_readme_licences_and_sources_and_no_unbuildable_test() {
    for name in PUBLISHED {
        let files = package_list(name);
        for needed in ["Cargo.toml", "README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
            assert!(
                files.iter().any(|f| f == needed),
                "{name} ships no {needed}: {files:?}"
            );
        }
        let root = if name == "recipes-cli" {
            "src/main.rs"
        } else {
            "src/lib.rs"
        };
        assert!(files.iter().any(|f| f == root), "{name}: {files:?}");
        // The unpublished `integration` crate's tests cannot build from
        // the published crate; nothing of the build's output ships.
        let unbuildable: Vec<&String> = files
            .iter()
            .filter(|f| {
                f.starts_with("target/")
                    || (f.starts_with("tests/") && {
                        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/");
                        let text =
                            std::fs::read_to_string(format!("{dir}{name}/{f}")).unwrap_or_default();
                        text.contains("integration::") || text.contains("use integration")
                    })
            })
            .collect();
        assert!(
            unbuildable.is_empty(),
            "{name} ships what cannot build from the crate: {unbuildable:?}"
        );
    }
}
