//! `peers/CuratorDataPeer.java`: Curator's data recipes (`SharedCount`,
//! `GroupMember`), one request per run, compiled into a test's folder.

use std::process::Command;

use crate::peers::CURATOR_CLASSPATH;
use crate::test_dir::TestDir;

fn jars() -> String {
    CURATOR_CLASSPATH
        .iter()
        .map(|jar| format!("/usr/share/java/{jar}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// `CuratorDataPeer.java` compiled into `dir`; the `java` command to run it
/// against the ZooKeeper at `connect` (append the request's words).
///
/// # Panics
///
/// When javac fails.
pub fn curator_data_peer(dir: &TestDir, connect: &str) -> Command {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/CuratorDataPeer.java");
    let out = Command::new("javac")
        .args([
            "-J-XX:TieredStopAtLevel=1",
            "-J-XX:+UseSerialGC",
            "-implicit:none",
            "-d",
        ])
        .arg(dir.path())
        .args(["-cp", &jars(), source])
        .output()
        .expect("javac (Debian's openjdk-17-jdk)");
    assert!(
        out.status.success(),
        "javac: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut java = Command::new("java");
    java.args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp"])
        .arg(format!("{}:{}", dir.path().display(), jars()))
        .arg("CuratorDataPeer")
        .arg(connect);
    java
}

/// Run a peer's request to its end: its `OK …` line.
///
/// # Panics
///
/// When it fails or does not answer `OK`.
pub fn peer_reply(mut cmd: Command) -> String {
    let out = cmd.output().expect("start the peer");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        out.status.success() && stdout.starts_with("OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
