//! Who may connect, and where: an ACL user without our keys or channels
//! is `PermissionDenied` saying what to grant (and the grant it names is
//! enough), a database index the server lacks is a terminal
//! `InvalidArgument` within the connect timeout, and a host that does not
//! answer is never called a TLS problem. Each refusal leaves nothing.

use std::time::{Duration, Instant};

use integration::{scale, RedisServer};
use recipes_core::{Client, Error};
use recipes_redis::RedisClient;

const NS: &str = "{recipes}:";

/// The grant the refusal names (`ACL_HINT` in recipes-redis's `rpc.rs`).
const GRANT: [&str; 10] = [
    "~{recipes}:*",
    "&{recipes}:*",
    "+@read",
    "+@write",
    "+@scripting",
    "+@pubsub",
    "+@connection",
    "-@dangerous",
    "+time",
    "+info",
];

/// An ACL user `name` with password `pw` and the rules `rules`.
fn acl_user(server: &RedisServer, name: &str, rules: &[&str]) {
    let mut args = vec!["ACL", "SETUSER", name, "reset", "on", ">pw"];
    args.extend_from_slice(rules);
    server.cmd::<String>(&args);
}

fn as_user(server: &RedisServer, user: &str) -> recipes_core::Result<RedisClient> {
    RedisClient::builder(format!("redis://{}", server.addr()))
        .user(user, "pw")
        .ttl(Duration::from_secs(5))
        .connect()
}

/// Our keys, the session id counter aside (kept for ever, as fences).
fn our_keys(server: &RedisServer) -> Vec<String> {
    let mut keys = server.keys(&format!("{NS}*"));
    keys.retain(|k| k != &format!("{NS}sessions"));
    keys
}

#[test]
fn an_acl_user_without_our_keys_or_channels_is_permission_denied_saying_what_to_grant() {
    let server = RedisServer::start();
    acl_user(&server, "nokeys", &["+@all", "&*"]);
    acl_user(&server, "nochannels", &["+@all", "~*"]);
    for user in ["nokeys", "nochannels"] {
        match as_user(&server, user) {
            Err(Error::PermissionDenied { what }) => {
                assert!(what.contains("ACL SETUSER"), "{user}: {what}");
                assert!(what.contains("~{recipes}:* &{recipes}:*"), "{user}: {what}");
            }
            other => panic!("{user}: {other:?}"),
        }
        assert_eq!(server.keys("*"), Vec::<String>::new(), "{user}: nothing");
    }
}

/// The grant the refusal names is enough for every recipe, and without
/// `INFO` (nor `CONFIG`) the client warns and goes on.
#[test]
fn the_grant_the_refusal_names_is_enough_and_an_unreadable_policy_is_not_fatal() {
    let server = RedisServer::start();
    let mut named = GRANT.to_vec();
    named.push("~/app/*");
    acl_user(&server, "granted", &named);
    let mut blind = named.to_vec();
    blind.retain(|r| *r != "+info");
    acl_user(&server, "blind", &blind);
    for user in ["granted", "blind"] {
        let c = as_user(&server, user).unwrap_or_else(|e| panic!("{user}: {e:?}"));
        let g = c.mutex("/access/lock").unwrap().lock().unwrap();
        g.fenced_set("/app/resource", user).unwrap();
        g.release().unwrap();
        let p = c.semaphore("/access/sem", 2).unwrap().acquire().unwrap();
        p.release().unwrap();
        let l = c
            .election("/access/election")
            .unwrap()
            .campaign(b"v")
            .unwrap();
        l.resign().unwrap();
        c.close().unwrap();
    }
    let mut left = our_keys(&server);
    left.retain(|k| {
        !k.starts_with(&format!("{NS}fence:")) && !k.starts_with(&format!("{NS}size:"))
    });
    assert_eq!(left, Vec::<String>::new());
}

/// The same grant is enough for the barriers and groups: a double
/// barrier's leave, a tied barrier's set and its setter's crash, a group's
/// join and leave. (Their members have no hold key, and removing one read
/// the key `''`, which the grant does not cover: every leave failed and was
/// retried until the session ended, and the sweep of a crashed setter's
/// session failed every other client's renewal and connect.) A crashed
/// double barrier member's flag (`ready:`) goes with it.
#[test]
fn the_named_grant_is_enough_for_barriers_and_groups_and_a_crashed_member() {
    let server = RedisServer::start();
    acl_user(&server, "granted", &GRANT);
    let c = as_user(&server, "granted").unwrap();
    let member = c.double_barrier("/access/db", 1).unwrap().enter().unwrap();
    assert!(
        member.leave_timeout(scale(Duration::from_secs(5))).unwrap(),
        "the double barrier's member left"
    );
    let joined = c.group("/access/group").unwrap().join("m1", b"").unwrap();
    joined.release().unwrap();
    // A tied setter that crashes: its session expires and is swept by the
    // next renewal or connect of any client.
    let setter = RedisClient::builder(format!("redis://{}", server.addr()))
        .user("granted", "pw")
        .ttl(Duration::from_secs(1))
        .connect()
        .unwrap();
    let b = setter.barrier("/access/tied").unwrap().tied_to_session();
    b.set().unwrap();
    // And a double barrier's member, whose flag is up (it is the one
    // awaited): the flag goes with the last member, crashed or not.
    let crashed = setter.double_barrier("/access/db-crash", 1).unwrap();
    std::mem::forget(crashed.enter().unwrap());
    setter.orphan();
    integration::wait_until(
        "the crashed setter's session expired",
        scale(Duration::from_secs(10)),
        || server.keys(&format!("{NS}s:*")).len() == 1,
    );
    let other = as_user(&server, "granted").expect("a connect sweeps the crashed session");
    c.barrier("/access/tied")
        .unwrap()
        .wait()
        .expect("the crashed setter's barrier is down");
    other.close().unwrap();
    c.close().unwrap();
    let mut left = our_keys(&server);
    left.retain(|k| {
        !k.starts_with(&format!("{NS}fence:"))
            && !k.starts_with(&format!("{NS}size:"))
            && !k.starts_with(&format!("{NS}gv"))
    });
    assert_eq!(left, Vec::<String>::new());
}

#[test]
fn a_database_index_the_server_lacks_is_invalid_within_the_connect_timeout() {
    let server = RedisServer::start();
    // The redis crate retries a connect twice, with up to a second of
    // jitter each time: a refusal comes within ~2.5 s, not at once.
    let timeout = Duration::from_secs(5);
    let started = Instant::now();
    let r = RedisClient::builder(format!("redis://{}/99", server.addr()))
        .connect_timeout(timeout)
        .connect();
    match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("databases"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < scale(timeout),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.keys("*"), Vec::<String>::new());
}

/// Nothing listening, and an address that does not route: neither is a
/// TLS problem (`speaks TLS`), both a retryable backend error naming the
/// address, within the connect timeout.
#[test]
fn a_host_that_does_not_answer_is_not_a_tls_problem() {
    let free = integration::ports::reserve_port();
    let timeout = Duration::from_secs(1);
    for addr in [free.addr().to_string(), "10.255.255.1:6379".to_owned()] {
        let started = Instant::now();
        let r = RedisClient::builder(format!("redis://{addr}"))
            .connect_timeout(timeout)
            .connect();
        match r {
            Err(Error::Backend {
                message, retryable, ..
            }) => {
                assert!(message.contains(&addr), "{message}");
                assert!(retryable, "{message}");
            }
            other => panic!("{addr}: {other:?}"),
        }
        assert!(
            started.elapsed() < scale(timeout * 3),
            "{:?}",
            started.elapsed()
        );
    }
}
