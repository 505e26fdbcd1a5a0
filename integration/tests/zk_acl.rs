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
