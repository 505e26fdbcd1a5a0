//! Endpoint validation at connect: `host:port` or `http://host:port`, and
//! anything else refused before a connection is tried, saying what to
//! write. No server is needed: nothing listens on port 1.

use std::time::Duration;

use recipes_etcd::{Error, EtcdClient};

fn connect(endpoint: &str) -> Result<EtcdClient, Error> {
    EtcdClient::builder([endpoint])
        .connect_timeout(Duration::from_millis(200))
        .connect()
}

#[test]
fn endpoints_are_host_port_or_http_urls() {
    for good in [
        "127.0.0.1:1",
        "http://127.0.0.1:1",
        "localhost:1",
        "[::1]:1",
    ] {
        match connect(good) {
            Err(Error::InvalidArgument(_)) => panic!("{good} was refused as malformed"),
            Err(_) => {}
            Ok(_) => panic!("{good}: something answered on port 1"),
        }
    }
    for bad in [
        "",
        " ",
        "127.0.0.1",
        "zk://127.0.0.1:2181",
        "https://h:2379",
        "h:port",
        ":2379",
        "a:1,b:2",
    ] {
        let e = connect(bad).expect_err(bad);
        let text = e.to_string();
        assert!(matches!(e, Error::InvalidArgument(_)), "{bad}: {e:?}");
        assert!(
            text.contains("host:port") && text.contains(&format!("{bad:?}")),
            "{text}"
        );
    }
}
