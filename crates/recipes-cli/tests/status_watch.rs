//! `recipes status NAME --watch` under a terminal (`script(1)` gives it a
//! pty) through a failover: no leader, then alpha leading with beta
//! waiting, alpha killed, beta leading, beta gone, no leader again; Ctrl-C
//! typed at the terminal ends it with status 0. Beside it, `--watch
//! --json` through a pipe prints one object per change.

mod common;

use std::fs;
use std::io::Write as _;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::*;
use integration::wait_until_with;

/// The clear-screen sequence that starts each redraw.
const REDRAW: &str = "\x1b[H\x1b[2J";

/// How long a watch may take to show a change it was told about
/// (a Redis newcomer waits for the observer's poll).
const SHOWN: Duration = Duration::from_secs(10);

/// A watcher's command line for `sh -c`.
fn watch_line(store: Store, name: &str, json: bool) -> String {
    let flags: Vec<String> = store.flag().iter().map(|f| format!("'{f}'")).collect();
    let json = if json { " --json" } else { "" };
    format!(
        "exec {BIN} {} --ttl 2s status '{name}' --watch{json}",
        flags.join(" ")
    )
}

/// The watcher under a terminal: `script` runs it on a pty and copies the
/// screen to `out`; its stdin is ours, for typing Ctrl-C.
fn under_terminal(store: Store, scene: &Scene) -> Child {
    let out = fs::File::create(scene.file("screen")).unwrap();
    recipes_free_command("script")
        .args([
            "-q",
            "-f",
            "-e",
            "-c",
            &watch_line(store, &scene.name, false),
        ])
        .arg("/dev/null")
        .stdin(Stdio::piped())
        .stdout(out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn through_pipe(store: Store, scene: &Scene) -> Child {
    let out = fs::File::create(scene.file("json")).unwrap();
    recipes_free_command("sh")
        .args(["-c", &watch_line(store, &scene.name, true)])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn recipes_free_command(program: &str) -> std::process::Command {
    integration::env::command_without_recipes_env(program)
}

/// The last screen the terminal watcher drew.
fn screen(scene: &Scene) -> String {
    let all = fs::read_to_string(scene.file("screen")).unwrap_or_default();
    all.rsplit(REDRAW)
        .next()
        .unwrap_or_default()
        .replace('\r', "")
}

fn wait_screen(scene: &Scene, what: &str, shows: impl Fn(&str) -> bool) {
    let desc = format!("the screen shows {what}");
    wait_until_with(
        &desc,
        SHOWN,
        || shows(&screen(scene)),
        || format!("; last screen:\n{}", screen(scene)),
    );
}

/// Wait until both watchers show `holding` (an id, or "-" for nobody):
/// on some stores a change is only seen at the observer's next poll, and
/// a state that passes meanwhile is coalesced away.
fn wait_json(scene: &Scene, holding: &str) {
    let last_holder = || {
        let out = fs::read_to_string(scene.file("json")).unwrap_or_default();
        out.lines().last().map(holder_of).unwrap_or_default()
    };
    wait_until_with(
        &format!("the JSON watch shows {holding} holding"),
        SHOWN,
        || last_holder() == holding,
        || format!("; it shows {:?}", last_holder()),
    );
}

/// Who holds, in one line of `--watch --json`: an id, or "-".
fn holder_of(line: &str) -> &'static str {
    let held = line.split("\"holders\":[").nth(1).unwrap_or_default();
    let held = held.split(']').next().unwrap_or_default();
    if held.contains("\"alpha\"") {
        "alpha"
    } else if held.contains("\"beta\"") {
        "beta"
    } else {
        assert!(held.is_empty(), "{line}");
        "-"
    }
}

fn holder_line_has(screen: &str, role: &str, id: &str) -> bool {
    screen
        .lines()
        .any(|l| l.starts_with(role) && l.contains(&format!("\"{id}\"")))
}

/// `recipes elect NAME --id ID` running `sleep 60` while it leads.
fn candidate(store: Store, scene: &Scene, id: &str) -> Child {
    with_store(store, "2s")
        .args(["--id", id, "elect", &scene.name, "--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn follows_a_failover(store: Store) {
    let scene = Scene::new("status-watch");
    let mut tty = under_terminal(store, &scene);
    let mut pipe = through_pipe(store, &scene);
    wait_screen(&scene, "no leader from the start", |s| {
        s.contains("no leader: no holder for at least")
    });
    wait_json(&scene, "-");

    let mut alpha = candidate(store, &scene, "alpha");
    wait_screen(&scene, "alpha leading", |s| {
        holder_line_has(s, "holder", "alpha")
    });
    wait_json(&scene, "alpha");
    let mut beta = candidate(store, &scene, "beta");
    wait_screen(&scene, "beta waiting behind alpha", |s| {
        holder_line_has(s, "holder", "alpha") && holder_line_has(s, "waiter", "beta")
    });

    // Failover: alpha's process dies; its session expires; beta leads.
    signal(&alpha, libc::SIGKILL);
    wait_exit(&mut alpha);
    wait_screen(&scene, "beta leading after alpha's death", |s| {
        holder_line_has(s, "holder", "beta") && !s.contains("\"alpha\"")
    });
    wait_json(&scene, "beta");
    assert!(
        !screen(&scene).contains("no leader"),
        "beta led: the screen must not say no leader"
    );

    // beta resigns: nobody is left, and the clock runs.
    signal(&beta, libc::SIGTERM);
    wait_exit(&mut beta);
    wait_screen(&scene, "no leader after beta left", |s| {
        s.contains("no leader: no holder for ") && !s.contains("at least")
    });
    // The two watches poll apart: the terminal's may show it first.
    wait_json(&scene, "-");

    // Ctrl-C at the terminal ends the watch.
    tty.stdin.as_mut().unwrap().write_all(b"\x03").unwrap();
    let status = wait_exit(&mut tty);
    assert!(status.success(), "Ctrl-C ends the watch with 0: {status:?}");

    signal(&pipe, libc::SIGINT);
    let status = wait_exit(&mut pipe);
    assert!(status.success(), "SIGINT ends the watch with 0: {status:?}");
    json_tells_the_same_story(&fs::read_to_string(scene.file("json")).unwrap());
}

/// One object per change: empty, alpha, alpha and beta, beta, empty.
fn json_tells_the_same_story(out: &str) {
    let holders: Vec<&str> = out
        .lines()
        .map(|line| {
            assert!(line.starts_with('{') && line.ends_with('}'), "{line}");
            assert!(line.contains("\"no_holder_for_ms\":"), "{line}");
            holder_of(line)
        })
        .collect();
    let mut story = holders.clone();
    story.dedup();
    assert_eq!(
        story,
        ["-", "alpha", "beta", "-"],
        "holders per line: {holders:?}\n{out}"
    );
    // What a line says but for the clock: each differs from the one before.
    let said: Vec<&str> = out
        .lines()
        .map(|l| l.split(",\"no_holder_for_ms\"").next().unwrap())
        .collect();
    assert!(
        said.windows(2).all(|w| w[0] != w[1]),
        "a line per change, not per look:\n{out}"
    );
}

#[test]
fn follows_a_failover_under_a_terminal_zk() {
    follows_a_failover(Store::Zk);
}

#[test]
fn follows_a_failover_under_a_terminal_etcd() {
    follows_a_failover(Store::Etcd);
}

#[test]
fn follows_a_failover_under_a_terminal_pg() {
    follows_a_failover(Store::Pg);
}

#[test]
fn follows_a_failover_under_a_terminal_redis() {
    follows_a_failover(Store::Redis);
}
