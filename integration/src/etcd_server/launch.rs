//! Starting an etcd process: its folder and its command line.

use super::{EtcdConfig, EtcdServer, Membership};
use crate::ports::{reserve_port, PortReservation};
use crate::process::ManagedProcess;
use crate::test_dir::TestDir;

impl EtcdServer {
    /// Writes the folder; does not start the process.
    pub(crate) fn prepare(
        name: String,
        config: EtcdConfig,
        client_port: PortReservation,
        peer_port: PortReservation,
        membership: &Membership,
    ) -> EtcdServer {
        assert!(
            config.binary.exists(),
            "{} is missing: install Debian's etcd-server package (scripts/setup)",
            config.binary.display()
        );
        let dir = TestDir::new(&name);
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let client_url = format!("{scheme}://{}", client_port.addr());
        let peer_url = format!("http://{}", peer_port.addr());
        let mut ports = vec![client_port, peer_port];
        let mut args: Vec<String> = vec![
            format!("--name={name}"),
            format!("--data-dir={}", dir.path().join("data").display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster={}", membership.initial_cluster),
            format!("--initial-cluster-token={}", membership.token),
            // Ignored on restart: the data folder then exists.
            "--initial-cluster-state=new".to_owned(),
            format!("--unsafe-no-fsync={}", !config.fsync),
            format!(
                "--heartbeat-interval={}",
                config.heartbeat_interval.as_millis()
            ),
            format!("--election-timeout={}", config.election_timeout.as_millis()),
            "--logger=zap".to_owned(),
            "--log-outputs=stderr".to_owned(),
        ];
        let mut health_addr = ports[0].addr();
        if let Some(tls) = &config.tls {
            let plain = reserve_port();
            health_addr = plain.addr();
            args[2] = format!("--listen-client-urls={client_url},http://{health_addr}");
            args.extend([
                format!("--cert-file={}", tls.server.cert.display()),
                format!("--key-file={}", tls.server.key.display()),
                format!("--trusted-ca-file={}", tls.ca.display()),
                format!("--client-cert-auth={}", tls.client_auth),
            ]);
            ports.push(plain);
        }
        let process = ManagedProcess::new(
            name.clone(),
            config.binary.clone(),
            args,
            dir.path(),
            dir.path().join("server.log"),
        );
        EtcdServer {
            name,
            client_addr: ports[0].addr(),
            peer_addr: ports[1].addr(),
            health_addr,
            config,
            process,
            _ports: ports,
            dir,
        }
    }
}
