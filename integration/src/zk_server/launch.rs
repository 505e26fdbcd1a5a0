//! Starting the JVM: the jars it needs, the folder and `zoo.cfg` it reads,
//! and its command line.

use std::path::{Path, PathBuf};

use super::config::tls_lines;
use super::{Ensemble, ZkConfig, ZkServer};
use crate::ports::{reserve_port, PortReservation};
use crate::process::ManagedProcess;
use crate::test_dir::TestDir;

/// Where Debian installs ZooKeeper's jars.
pub const ZK_JAR_DIR: &str = "/usr/share/java";

/// `zookeeper.jar`'s manifest names its own dependencies (jute, netty,
/// slf4j-api, …); the slf4j binding has to be added, and netty's codec,
/// which Debian's manifest lacks and the Netty server (the secure client
/// port) needs.
const CLASSPATH_JARS: [&str; 5] = [
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
    "netty-codec.jar",
];

impl ZkServer {
    /// Writes the folder and config; does not start the process.
    pub(crate) fn prepare(
        label: String,
        config: ZkConfig,
        client_port: PortReservation,
        mut other_ports: Vec<PortReservation>,
        ensemble: Option<Ensemble>,
    ) -> ZkServer {
        check_installed();
        let dir = TestDir::new(&label);
        let data_dir = dir.path().join("data");
        let client_addr = client_port.addr();
        let mut cfg = config.common_lines(&data_dir, client_addr);
        let mut secure_addr = None;
        if let Some(tls) = config.tls() {
            let secure = reserve_port();
            secure_addr = Some(secure.addr());
            cfg.push_str(&tls_lines(dir.path(), tls, secure.port()));
            other_ports.push(secure);
        }
        let main_class = match &ensemble {
            None => "org.apache.zookeeper.server.ZooKeeperServerMain",
            Some(ensemble) => {
                cfg.push_str("initLimit=10\nsyncLimit=5\n");
                cfg.push_str(&ensemble.server_lines);
                "org.apache.zookeeper.server.quorum.QuorumPeerMain"
            }
        };
        let cfg_path = dir.path().join("zoo.cfg");
        let written = std::fs::create_dir_all(&data_dir)
            .and_then(|()| std::fs::write(&cfg_path, cfg))
            .and_then(|()| match &ensemble {
                Some(ensemble) => {
                    std::fs::write(data_dir.join("myid"), format!("{}\n", ensemble.my_id))
                }
                None => Ok(()),
            });
        let jaas = config
            .jaas()
            .map(|text| (dir.path().join("jaas.conf"), text));
        let written = written.and_then(|()| match &jaas {
            Some((path, text)) => std::fs::write(path, text),
            None => Ok(()),
        });
        if let Err(e) = written {
            panic!(
                "cannot write ZooKeeper config in {}: {e}",
                dir.path().display()
            );
        }
        let classpath = CLASSPATH_JARS
            .iter()
            .map(|jar| format!("{ZK_JAR_DIR}/{jar}"))
            .collect::<Vec<_>>()
            .join(":");
        let mut args: Vec<String> = class_data_archive(&classpath)
            .map(|jsa| format!("-XX:SharedArchiveFile={}", jsa.display()))
            .into_iter()
            .collect();
        args.extend([
            // A small, fast-starting JVM: tests start many of them.
            "-Xmx256m".into(),
            "-XX:+UseSerialGC".into(),
            "-XX:TieredStopAtLevel=1".into(),
            "-XX:-UsePerfData".into(),
            "-Djava.net.preferIPv4Stack=true".into(),
            "-Dzookeeper.jmx.log4j.disable=true".into(),
            // Election connections to a dead or paused peer give up fast.
            "-Dzookeeper.cnxTimeout=1000".into(),
            "-Dorg.slf4j.simpleLogger.showDateTime=true".into(),
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS".into(),
            // One INFO line per 4lw command would bury the log under polls.
            "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NIOServerCnxn=warn".into(),
            "-cp".into(),
            classpath,
            main_class.into(),
            cfg_path.display().to_string(),
        ]);
        if let Some((path, _)) = &jaas {
            // A JVM option: before the class path and the main class.
            let at = args.iter().position(|a| a == "-cp").unwrap_or(0);
            args.insert(
                at,
                format!("-Djava.security.auth.login.config={}", path.display()),
            );
        }
        other_ports.insert(0, client_port);
        let process = ManagedProcess::new(
            label.clone(),
            "java",
            args,
            dir.path(),
            dir.path().join("server.log"),
        )
        .with_env(config.env());
        ZkServer {
            label,
            client_addr,
            secure_addr,
            config,
            ensemble: ensemble.is_some(),
            process,
            _ports: other_ports,
            dir,
        }
    }
}

fn check_installed() {
    for jar in CLASSPATH_JARS {
        let path = Path::new(ZK_JAR_DIR).join(jar);
        assert!(
            path.exists(),
            "{} is missing: install Debian's zookeeper package (scripts/setup)",
            path.display()
        );
    }
}

/// The class-data archive of ZooKeeper's classes that `scripts/zk-class-archive`
/// writes (`target/zk-cds/zookeeper.jsa`; `RECIPES_ZK_CDS` names another),
/// when it was dumped for this class path and is newer than
/// `zookeeper.jar`: the JVM maps the classes it needs instead of loading
/// and verifying them, which takes a third of a server's start (about
/// 1.6 s to 1.0 s to serving, 630 to 460 ms of CPU, on 2 cores). Without
/// it the JVM starts as before.
fn class_data_archive(classpath: &str) -> Option<PathBuf> {
    let jsa = std::env::var_os("RECIPES_ZK_CDS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/zk-cds/zookeeper.jsa"),
        PathBuf::from,
    );
    let dumped_for = std::fs::read_to_string(jsa.with_extension("classpath")).ok()?;
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let fresh = modified(&jsa)? >= modified(&Path::new(ZK_JAR_DIR).join("zookeeper.jar"))?;
    (fresh && dumped_for.trim_end() == classpath).then_some(jsa)
}
