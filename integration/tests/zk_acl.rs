//! ZooKeeper ACLs between two identities: what one digest identity's
//! recipes made (its folders are creator-all, anyone-read), another
//! identity may read but not join — a mutex, a semaphore and an election
//! each refuse it with `PermissionDenied` naming the node, and leave
//! nothing behind; the owner's holders are untouched.

use std::time::Duration;

use integration::ZkServer;
use recipes_core::{Client as _, Error};
use recipes_zk::ZkClient;

fn as_identity(user: &str, password: &str) -> ZkClient {
    ZkClient::builder(ZkServer::shared().connect_string())
        .session_timeout(Duration::from_secs(10))
        .digest_auth(user, password)
        .connect()
        .expect("connect")
}

/// `r` is a `PermissionDenied` naming `node`.
fn denied<T: std::fmt::Debug>(r: Result<T, Error>, node: &str) {
    match r {
        Err(Error::PermissionDenied { what }) => {
            assert!(what.contains(node), "names {node}: {what}");
            assert!(
                !what.contains("owner-pw") && !what.contains("other-pw"),
                "no password in: {what}"
            );
        }
        other => panic!("another identity on {node}: {other:?}"),
    }
}

#[test]
fn another_identity_may_read_but_not_join_and_leaves_nothing() {
    // A top-level folder of the owner's own: creator-all below it.
    let root = format!("/recipes-acl-{}", std::process::id());
    let (lock, sem, elect) = (
        format!("{root}/lock"),
        format!("{root}/sem"),
        format!("{root}/elect"),
    );
    let owner = as_identity("owner", "owner-pw");
    let held = owner.mutex(&lock).unwrap().lock().unwrap();
    let permit = owner.semaphore(&sem, 2).unwrap().acquire().unwrap();
    let leading = owner.election(&elect).unwrap().campaign(b"owner").unwrap();
    let facts = ZkServer::shared().facts();
    let before: Vec<Vec<String>> = [&lock, &format!("{sem}/leases"), &elect]
        .iter()
        .map(|p| facts.children(p))
        .collect();

    let other = as_identity("other", "other-pw");
    denied(other.mutex(&lock).unwrap().try_lock(), &lock);
    denied(other.semaphore(&sem, 2).unwrap().try_acquire(), &sem);
    denied(
        other.election(&elect).unwrap().try_campaign(b"other"),
        &elect,
    );
    // Reading is anyone's.
    assert_eq!(other.contenders(&lock).unwrap().len(), 1);
    let leader = other.election(&elect).unwrap().leader().unwrap().unwrap();
    assert_eq!(leader.value, b"owner");

    let after: Vec<Vec<String>> = [&lock, &format!("{sem}/leases"), &elect]
        .iter()
        .map(|p| facts.children(p))
        .collect();
    assert_eq!(before, after, "the refusals left nothing and took nothing");
    held.check().expect("the owner still holds the lock");
    permit.check().expect("the owner still holds its permit");
    leading.check().expect("the owner still leads");
    drop((held, permit, leading));
    other.close().unwrap();
    owner.close().unwrap();
}

/// SASL DIGEST-MD5 against a server that requires it: the right password
/// locks (its node belongs to `sasl:app`), a wrong one and none are
/// refused at connect with `Unauthenticated`, within the connect timeout,
/// and leave nothing.
#[test]
fn sasl_digest_authenticates_and_a_wrong_password_is_unauthenticated() {
    use integration::ZkConfig;
    let server = ZkServer::start_with(ZkConfig::default().with_sasl_user("app", "app-pw-9"));
    let connect = |password: Option<&str>| {
        let builder = ZkClient::builder(server.connect_string())
            .session_timeout(Duration::from_secs(5))
            .connect_timeout(Duration::from_secs(5));
        match password {
            Some(pw) => builder.sasl_digest("app", pw).connect(),
            None => builder.connect(),
        }
    };
    let client = connect(Some("app-pw-9")).expect("the right password");
    let name = "/sasl/lock";
    let held = client.mutex(name).unwrap().lock().unwrap();
    // The server refuses clients without SASL: the harness's own
    // (unauthenticated) reader included, so ours reads.
    assert_eq!(client.contenders(name).unwrap().len(), 1);
    held.release().unwrap();

    let started = std::time::Instant::now();
    match connect(Some("wrong-pw-3")) {
        Err(Error::Unauthenticated { what }) => assert!(!what.contains("wrong-pw-3"), "{what}"),
        other => panic!("a wrong password: {other:?}"),
    }
    assert!(
        started.elapsed() < integration::scale(Duration::from_secs(10)),
        "refused within the connect timeout"
    );
    // Without SASL the server refuses the session's requests.
    match connect(None).and_then(|c| c.mutex("/sasl/other")?.try_lock()) {
        Err(Error::Unauthenticated { .. } | Error::PermissionDenied { .. }) => {}
        other => panic!("no credentials: {other:?}"),
    }
    assert!(client.contenders(name).unwrap().is_empty(), "nothing left");
    client.close().unwrap();
}
