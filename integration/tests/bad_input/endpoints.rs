//! Endpoints: URL forms a store does not take and a missing port are
//! `InvalidArgument` before anything is dialled; a reachable port that is
//! not the store (the other store, an HTTP server, nothing at all) is a
//! retryable `Backend` error naming the address and the likely mistakes
//! (another store's port, HTTP, TLS expected), within the connect timeout; ZooKeeper chroots that do not exist yet are made, as Curator
//! makes its namespace.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use integration::ports::reserve_port;
use integration::wait_until;
use recipes_core::{Client, Error};

use crate::bench::{error_is, invalid, ok, Bench};
use crate::stores::{Settings, Store};

/// The connect timeout of every case here; the bound adds room.
const CONNECT: Duration = Duration::from_secs(2);
const BOUND: Duration = Duration::from_secs(6);

fn settings() -> Settings {
    Settings {
        connect_timeout: CONNECT,
        ..Settings::default()
    }
}

/// A port that speaks TLS (with the test certificate) and answers plain
/// bytes as an HTTP server does: a TLS-terminating gateway, such as one in
/// front of an unreachable host. Argument: port, certificate, key.
const GATEWAY: &str = r#"
import socket, ssl, sys, threading
port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
tls.load_cert_chain(cert, key)
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(64)
def serve(c):
    try:
        c.settimeout(10)
        first = c.recv(1, socket.MSG_PEEK)
        if first == b"\x16":
            c = tls.wrap_socket(c, server_side=True)
        if first:
            c.recv(65536)
            c.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
    except Exception:
        pass
    finally:
        c.close()
while True:
    c, _ = listener.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// A python3 server on a free loopback port (`python3 -m http.server`, or
/// the [`GATEWAY`]), killed on drop.
struct HttpServer {
    child: Child,
    addr: SocketAddr,
    _port: integration::ports::PortReservation,
}

impl HttpServer {
    fn start() -> HttpServer {
        HttpServer::spawn(|port| {
            let mut c = Command::new("python3");
            c.args(["-m", "http.server", "--bind", "127.0.0.1", port]);
            c
        })
    }

    fn gateway() -> HttpServer {
        let pki = integration::TestPki::shared();
        HttpServer::spawn(|port| {
            let mut c = Command::new("python3");
            c.args(["-c", GATEWAY, port]);
            c.arg(&pki.server.cert).arg(&pki.server.key);
            c
        })
    }

    fn spawn(command: impl FnOnce(&str) -> Command) -> HttpServer {
        let port = reserve_port();
        let child = command(&port.port().to_string())
            .current_dir(std::env::temp_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("a python3 server starts");
        let addr = port.addr();
        wait_until("the HTTP server listens", Duration::from_secs(10), || {
            std::net::TcpStream::connect(addr).is_ok()
        });
        HttpServer {
            child,
            addr,
            _port: port,
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connect to `target` fails with a `Backend` error whose message names
/// `names` (retryable or not: a server of the wrong kind will not turn
/// into the right one, but it may be restarting).
fn unreachable<S: Store>(target: &str, names: &str) -> Result<(), String> {
    let r = S::connect_to(target, &settings());
    error_is(
        r,
        &format!("a Backend error naming {names} and the likely mistake"),
        |e| {
            matches!(e, Error::Backend { message, .. }
                if message.contains(names) && message.contains("check that"))
        },
    )
}

pub fn run<S: Store>() {
    let mut b = Bench::<S>::new("endpoints");
    let http = HttpServer::start();
    let gateway = HttpServer::gateway();
    let free = reserve_port();
    let addr = S::addr();
    b.case_within(
        "the other store's port is unreachable, named",
        BOUND,
        |_| {
            let other = S::other_addr().to_string();
            unreachable::<S>(&S::target_at(&other), &other)
        },
    );
    b.case_within("an HTTP server is unreachable, named", BOUND, |_| {
        let http = http.addr.to_string();
        unreachable::<S>(&S::target_at(&http), &http)
    });
    // The same time on every store (issue 23): within the connect timeout,
    // with a second for the answer.
    b.case_within(
        "a port nothing listens on is unreachable, named, within the connect timeout",
        CONNECT + Duration::from_secs(1),
        |_| {
            let free = free.addr().to_string();
            unreachable::<S>(&S::target_at(&free), &free)
        },
    );
    // Issue 23: an unreachable host behind such a gateway was Error::Tls
    // "speaks TLS and this client was not told to" (exit 78).
    b.case_within(
        "a port that speaks TLS and answers plain bytes too is not called TLS-only",
        BOUND,
        |_| {
            let at = gateway.addr.to_string();
            unreachable::<S>(&S::target_at(&at), &at)
        },
    );
    b.case_within(
        "a host name that does not resolve is unreachable",
        BOUND,
        |_| {
            let target = S::target_at("no-such-host.invalid:2181");
            unreachable::<S>(&target, "no-such-host.invalid")
        },
    );
    // failed on 295faf2 (etcd): Backend "no etcd member of zk://… answered
    // within 2s" after 5 ms; builder.rs:84 checks only for empty endpoints.
    b.case_within("a zk:// URL is refused, saying host:port", BOUND, |_| {
        invalid(S::connect_to(&format!("zk://{addr}"), &settings()))
    });
    b.case_within(
        "an https:// URL is refused without TLS settings",
        BOUND,
        |_| invalid(S::connect_to(&format!("https://{addr}"), &settings())),
    );
    // failed on 295faf2: zk Backend after the whole connect timeout, etcd Backend
    // at once saying "within 2s"; neither builder asks for host:port.
    b.case_within(
        "a host without a port is refused, saying host:port",
        BOUND,
        |_| invalid(S::connect_to("127.0.0.1", &settings())),
    );
    b.case_within("an empty endpoint is refused", BOUND, |_| {
        invalid(S::connect_to("", &settings()))?;
        invalid(S::connect_to(&format!("{addr}, "), &settings()))
    });
    match S::LABEL {
        "zk" => {
            b.case_within("an http:// URL is refused by ZooKeeper", BOUND, |_| {
                invalid(S::connect_to(&format!("http://{addr}"), &settings()))
            });
            b.case_within(
                "a chroot that does not exist is made, as Curator does",
                BOUND,
                |ctx| {
                    let chroot = ctx.name("chroot");
                    ctx.may_leave(&chroot);
                    let c = ok(
                        "connect",
                        recipes_zk::ZkClient::builder(S::target())
                            .chroot(chroot.clone())
                            .connect_timeout(CONNECT)
                            .connect(),
                    )?;
                    in_chroot(&c, &chroot)
                },
            );
            // failed on 295faf2: the lock fails with Backend "create the folder /x: node
            // not exists"; a chroot in the connect string is passed through to
            // zookeeper-client, while only ZkClientBuilder::chroot makes it.
            b.case_within(
                "a chroot suffix of the connect string that does not exist works",
                BOUND,
                |ctx| {
                    let chroot = ctx.name("suffix");
                    ctx.may_leave(&chroot);
                    let target = format!("{}{chroot}", S::target());
                    let c = ok(
                        "connect",
                        recipes_zk::ZkClient::builder(target)
                            .connect_timeout(CONNECT)
                            .connect(),
                    )?;
                    in_chroot(&c, &chroot)
                },
            );
        }
        "pg" => {
            b.case_within("an http:// URL is refused by PostgreSQL", BOUND, |_| {
                invalid(S::connect_to(
                    &format!("http://{addr}/recipes"),
                    &settings(),
                ))
            });
            b.case_within("an unknown role is Unauthenticated", BOUND, |_| {
                let target = format!("postgres://nobody@{addr}/recipes");
                error_is(
                    S::connect_to(&target, &settings()),
                    "Unauthenticated",
                    |e| matches!(e, Error::Unauthenticated { .. }),
                )
            });
            b.case_within(
                "a role without grants on the schema is PermissionDenied",
                BOUND,
                |_| {
                    let target = integration::PgServer::shared().url_as("recipes_user");
                    error_is(
                        S::connect_to(&target, &settings()),
                        "PermissionDenied",
                        |e| matches!(e, Error::PermissionDenied { .. }),
                    )
                },
            );
        }
        "redis" => {
            b.case_within("an http:// URL is refused by Redis", BOUND, |_| {
                invalid(S::connect_to(&format!("http://{addr}"), &settings()))
            });
            b.case_within(
                "a rediss:// URL is refused without TLS settings",
                BOUND,
                |_| invalid(S::connect_to(&format!("rediss://{addr}"), &settings())),
            );
            b.case_within(
                "a redis:// URL and plain host:port are taken",
                BOUND,
                |_| {
                    for target in [format!("redis://{addr}"), addr.to_string()] {
                        let c = ok("connect", S::connect_to(&target, &settings()))?;
                        ok("ping", c.ping())?;
                        ok("close", c.close())?;
                    }
                    Ok(())
                },
            );
        }
        _ => {
            b.case_within("an http:// URL is taken by etcd", BOUND, |_| {
                let c = ok(
                    "connect",
                    S::connect_to(&format!("http://{addr}"), &settings()),
                )?;
                ok("ping", c.ping())?;
                ok("close", c.close())
            });
        }
    }
    b.finish();
}

/// A lock `/x` of a client rooted at `chroot` lives under `chroot/x`.
fn in_chroot(c: &recipes_zk::ZkClient, chroot: &str) -> Result<(), String> {
    let g = ok("lock", c.mutex("/x").and_then(|m| m.lock()))?;
    let seen = integration::ZkServer::shared()
        .facts()
        .children(&format!("{chroot}/x"));
    let r = if seen.len() == 1 {
        Ok(())
    } else {
        Err(format!("under {chroot}/x: {seen:?}"))
    };
    ok("release", g.release())?;
    ok("close", c.clone().close())?;
    r
}
