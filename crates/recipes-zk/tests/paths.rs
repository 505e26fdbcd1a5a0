//! Path validation as a client sees it: a chroot is checked like every
//! recipe's path, before anything is dialled (nothing listens on the
//! connect string's port).

use std::time::Duration;

use recipes_zk::{Error, ZkClient};

fn connect_under(chroot: &str) -> recipes_zk::Result<ZkClient> {
    ZkClient::builder("127.0.0.1:9")
        .connect_timeout(Duration::from_millis(50))
        .chroot(chroot)
        .connect()
}

#[test]
fn paths_are_checked_with_a_message_that_says_what_to_change() {
    for ok in ["/a", "/locks/nightly-report", "/ünïcödé", "/zookeeperish"] {
        let r = connect_under(ok);
        assert!(
            !matches!(r, Err(Error::InvalidArgument(_))),
            "{ok:?}: {r:?}"
        );
    }
    for (bad, says) in [
        ("", "empty"),
        ("locks", "start with '/'"),
        ("/", "root"),
        ("/a/", "end with '/'"),
        ("/a//b", "empty component"),
        ("/a/./b", "'.'"),
        ("/a/..", "'..'"),
        ("/zookeeper", "reserves"),
        ("/zookeeper/quota", "reserves"),
        ("/a\u{0}b", "U+0000"),
        ("/a\nb", "U+000A"),
        ("/a\u{7f}", "U+007F"),
    ] {
        match connect_under(bad) {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains(says), "{bad:?}: {msg}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

#[test]
fn a_connect_string_is_host_port_with_an_optional_chroot() {
    for bad in [
        "127.0.0.1",
        "zk://127.0.0.1:2181",
        "h:x",
        ":2181",
        "h:1, ",
        "h:1/a//b",
    ] {
        let r = ZkClient::builder(bad).connect();
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "{bad:?}: {r:?}"
        );
    }
}

#[test]
fn debug_output_never_shows_the_digest_password() {
    let builder = ZkClient::builder("127.0.0.1:9").digest_auth("app", "s3cret-pw-941");
    let shown = format!("{builder:?}");
    assert!(
        shown.contains("app") && !shown.contains("s3cret-pw-941"),
        "{shown}"
    );
}
