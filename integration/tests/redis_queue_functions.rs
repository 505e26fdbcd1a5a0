//! The Redis queue library's functions called by hand, against a real
//! `redis-server`: what an enter sent twice (its reply lost, the engine
//! sends it again) and a remove leave in the store, and which channels
//! they publish on. The library is loaded by a real client first; the
//! session is a key the test writes, as a client's session script does.
//! Refusals of a name another recipe stands on: `clashes.rs`.

mod redis_queue_functions {
    pub mod clashes;
}

use std::time::Duration;

use integration::{scale, RedisServer};
use recipes_core::Client;
use recipes_redis::RedisClient;

const NS: &str = "{recipes}:";
/// The session of the tests that call the functions by hand, one a test
/// (the server is the binary's shared one): its key holds [`TOKEN`].
const SID: &str = "77";
const SID_WAKE: &str = "78";
const SID_RESENT: &str = "79";
const SID_OLD: &str = "80";
const SID_DEAD: &str = "81";
const TOKEN: &str = "t0ken";

/// The binary's shared server with the queue library loaded.
struct Lab {
    server: &'static RedisServer,
    library: String,
}

impl Lab {
    fn new() -> Lab {
        let server = RedisServer::shared();
        let client = connect(server);
        let g = client
            .mutex("/qf/loader")
            .unwrap()
            .try_lock_for(scale(Duration::from_secs(20)))
            .unwrap()
            .expect("free");
        g.release().unwrap();
        client.close().unwrap();
        let listed: redis::Value = server.cmd(&["FUNCTION", "LIST", "LIBRARYNAME", "recipes_q*"]);
        let library = library_name(&listed).expect("the queue library is loaded");
        Lab { server, library }
    }

    /// A session `sid` of ours, as a client's session script makes one.
    fn session(&self, sid: &str) {
        let _: String = self.server.cmd(&["SET", &format!("{NS}s:{sid}"), TOKEN]);
    }

    /// `FCALL <library>_<f>` with `args` after the numkeys (0).
    fn call(&self, f: &str, args: &[&str]) -> redis::Value {
        let name = format!("{}_{f}", self.library);
        let mut all = vec!["FCALL", &name, "0"];
        all.extend_from_slice(args);
        self.server.cmd(&all)
    }

    /// A read-write lock's enter of `member` as `role`, taking if it may.
    fn enter_rw(&self, name: &str, member: &str, role: &str) -> redis::Value {
        let (hold, size, fence) = (
            format!("{NS}rw:{name}:"),
            format!("{NS}size:{name}"),
            format!("{NS}fence:{name}"),
        );
        self.call(
            "enter",
            &[
                NS, name, &hold, "rw", member, TOKEN, role, &size, "", "0", &fence,
            ],
        )
    }

    /// A semaphore `sem`'s permit `member` entered (taking if fewer than
    /// `max` live members are ahead) or confirmed again: `f` is `enter` or
    /// `confirm`.
    fn permit(&self, f: &str, sem: &str, member: &str, max: &str) -> redis::Value {
        let queue = format!("{sem}/leases");
        let (hold, fence) = (format!("{NS}permit:{queue}:"), format!("{NS}fence:{queue}"));
        let head = [NS, &queue, &hold, "permit", member, TOKEN];
        match f {
            "enter" => self.call(f, &[&head[..], &["", "", "", max, &fence]].concat()),
            _ => self.call(f, &[&head[..], &[max, &fence]].concat()),
        }
    }

    /// A read-write lock's member `member` confirmed (again).
    fn confirm_rw(&self, name: &str, member: &str) -> redis::Value {
        let (hold, fence) = (format!("{NS}rw:{name}:"), format!("{NS}fence:{name}"));
        self.call(
            "confirm",
            &[NS, name, &hold, "rw", member, TOKEN, "0", &fence],
        )
    }

    fn remove_rw(&self, name: &str, member: &str) -> i64 {
        let hold = format!("{NS}rw:{name}:");
        match self.call("remove", &[NS, name, &hold, "rw", member]) {
            redis::Value::Int(n) => n,
            other => panic!("remove: {other:?}"),
        }
    }

    /// Of each of `names`, only its fence is left; the index of the
    /// session `sid` is empty.
    fn only_the_fence_left(&self, names: &[&str], sid: &str) {
        for name in names {
            assert_eq!(
                self.keys_of(name),
                vec![format!("{NS}fence:{name}")],
                "only the fence outlives the queue"
            );
        }
        let index: i64 = self.server.cmd(&["EXISTS", &format!("{NS}h:{sid}")]);
        assert_eq!(index, 0, "the session's index is empty");
    }

    /// Every key that names `name`, sorted.
    fn keys_of(&self, name: &str) -> Vec<String> {
        self.server.keys(&format!("*{name}*"))
    }
}

fn connect(server: &RedisServer) -> RedisClient {
    RedisClient::builder(server.url())
        .ttl(Duration::from_secs(10))
        .connect()
        .expect("connect")
}

/// `got` is a refusal that names `theirs`.
fn refused(what: &str, theirs: &str, got: recipes_core::Result<bool>) {
    match got {
        Err(recipes_core::Error::InvalidArgument(why)) => {
            assert!(why.contains(theirs), "{what}: {why}")
        }
        other => panic!("{what} on the name of {theirs}: {other:?}"),
    }
}

/// The library's name in a `FUNCTION LIST` reply.
fn library_name(listed: &redis::Value) -> Option<String> {
    let redis::Value::Array(libraries) = listed else {
        return None;
    };
    let fields = match libraries.first()? {
        redis::Value::Array(f) => f.clone(),
        redis::Value::Map(m) => m.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect(),
        _ => return None,
    };
    let at = fields
        .iter()
        .position(|f| matches!(f, redis::Value::BulkString(b) if b == b"library_name"))?;
    match &fields[at + 1] {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

/// `{0, shown, fence}` → Some(fence); `{0, shown}` → None.
fn fence_of(reply: &redis::Value) -> Option<i64> {
    let redis::Value::Array(parts) = reply else {
        panic!("enter: {reply:?}")
    };
    assert_eq!(parts.first(), Some(&redis::Value::Int(0)), "{reply:?}");
    match parts.get(2) {
        Some(redis::Value::Int(f)) => Some(*f),
        None => None,
        other => panic!("a fence: {other:?}"),
    }
}

#[test]
fn an_enter_sent_again_changes_nothing_and_answers_the_same() {
    let lab = Lab::new();
    lab.session(SID);
    let name = "/qf/again";
    let (r1, r2, w) = (format!("{SID}-r1"), format!("{SID}-r2"), format!("{SID}-w"));
    let first =
        fence_of(&lab.enter_rw(name, &r1, "read")).expect("a reader into an empty queue holds");
    let again = fence_of(&lab.enter_rw(name, &r1, "read")).expect("still holds");
    assert_eq!(first, again, "the same fence, not a new one");
    let second = fence_of(&lab.enter_rw(name, &r2, "read")).expect("a reader among readers holds");
    assert!(second > first);
    assert_eq!(fence_of(&lab.enter_rw(name, &r2, "read")), Some(second));
    assert_eq!(
        fence_of(&lab.enter_rw(name, &w, "write")),
        None,
        "a writer waits"
    );
    assert_eq!(
        fence_of(&lab.enter_rw(name, &w, "write")),
        None,
        "still waits"
    );
    let queue: Vec<String> = lab
        .server
        .cmd(&["ZRANGE", &format!("{NS}q:{name}"), "0", "-1"]);
    assert_eq!(
        queue,
        vec![r1.clone(), r2.clone(), w.clone()],
        "each once, in order"
    );
    let roles: i64 = lab.server.cmd(&["HLEN", &format!("{NS}r:{name}")]);
    let index: i64 = lab.server.cmd(&["HLEN", &format!("{NS}h:{SID}")]);
    assert_eq!((roles, index), (3, 3));

    assert_eq!(lab.remove_rw(name, &r1), 1, "it held");
    assert_eq!(lab.remove_rw(name, &r1), 0, "gone already");
    assert_eq!(lab.remove_rw(name, &w), 0, "it never held");
    let hold = format!("{NS}rw:{name}:{r1}");
    let exists: i64 = lab.server.cmd(&["EXISTS", &hold]);
    assert_eq!(exists, 0, "a reader's hold key goes with it");
    assert_eq!(lab.remove_rw(name, &r2), 1);
    lab.only_the_fence_left(&[name], SID);
}

/// A confirm's reply is a fence.
fn int(reply: redis::Value) -> i64 {
    match reply {
        redis::Value::Int(n) => n,
        other => panic!("a fence: {other:?}"),
    }
}

/// Holders that share a name's fence counter (a semaphore's permits, a
/// read-write lock's readers): an enter or a confirm sent again after
/// another holder took (its reply lost) answers the fence minted for
/// that holder, never the other's.
#[test]
fn a_resent_confirm_of_a_permit_or_a_reader_answers_its_own_fence() {
    let lab = Lab::new();
    lab.session(SID_RESENT);
    let (sem, rw) = ("/qf/resent-sem", "/qf/resent-rw");
    let m = |x: &str| format!("{SID_RESENT}-{x}");
    let (a, b, c) = (m("a"), m("b"), m("c"));
    let fa = fence_of(&lab.permit("enter", sem, &a, "2")).expect("the first permit holds");
    let fb = fence_of(&lab.permit("enter", sem, &b, "2")).expect("the second permit holds");
    assert!(fb > fa);
    assert_eq!(fence_of(&lab.permit("enter", sem, &c, "2")), None, "full");
    assert_eq!(
        int(lab.permit("confirm", sem, &a, "2")),
        fa,
        "a's confirm again"
    );
    assert_eq!(
        fence_of(&lab.permit("enter", sem, &a, "2")),
        Some(fa),
        "a's enter again"
    );
    let queue = format!("{sem}/leases");
    let hold = format!("{NS}permit:{queue}:");
    let removed = lab.call("remove", &[NS, &queue, &hold, "permit", &a]);
    assert_eq!(removed, redis::Value::Int(1), "a held");
    let fc = int(lab.permit("confirm", sem, &c, "2"));
    assert!(fc > fb);
    assert_eq!(
        int(lab.permit("confirm", sem, &b, "2")),
        fb,
        "b's confirm again"
    );
    assert_eq!(
        int(lab.permit("confirm", sem, &c, "2")),
        fc,
        "c's confirm again"
    );
    // A permit held by a client of the previous version (its hold key
    // holds the member alone), whose session expired: swept as ever.
    lab.session(SID_OLD);
    let d = format!("{SID_OLD}-d");
    fence_of(&lab.permit("enter", sem, &d, "3")).expect("a third permit of three holds");
    let _: String = lab.server.cmd(&["SET", &format!("{hold}{d}"), &d]);
    let _: i64 = lab.server.cmd(&["DEL", &format!("{NS}s:{SID_OLD}")]);
    for x in [&b, &c] {
        lab.call("remove", &[NS, &queue, &hold, "permit", x]);
    }
    lab.call("list", &[NS, &queue, &hold, "permit", &d]);

    let (r1, r2) = (m("r1"), m("r2"));
    let f1 = fence_of(&lab.enter_rw(rw, &r1, "read")).expect("a reader holds");
    let f2 = fence_of(&lab.enter_rw(rw, &r2, "read")).expect("a reader among readers holds");
    assert!(f2 > f1);
    assert_eq!(
        fence_of(&lab.enter_rw(rw, &r1, "read")),
        Some(f1),
        "r1's enter again"
    );
    assert_eq!(int(lab.confirm_rw(rw, &r1)), f1, "r1's confirm again");
    assert_eq!(int(lab.confirm_rw(rw, &r2)), f2, "r2's confirm again");
    assert_eq!((lab.remove_rw(rw, &r1), lab.remove_rw(rw, &r2)), (1, 1));
    for name in [&queue[..], rw] {
        let left = vec![format!("{NS}fence:{name}")];
        assert_eq!(lab.keys_of(name), left, "only the fence outlives the queue");
    }
}

#[test]
fn a_read_write_lock_wakes_only_the_member_behind_and_a_lock_its_observers() {
    let lab = Lab::new();
    lab.session(SID_WAKE);
    let client = redis::Client::open(lab.server.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let (rw, lock) = ("/qf/rw", "/qf/lock");
    let (r, w) = (format!("{SID_WAKE}-r"), format!("{SID_WAKE}-w"));
    let mut pubsub = conn.as_pubsub();
    let wake_rw = format!("{NS}wake:{rw}");
    let (wake_lock, gone_r) = (format!("{NS}wake:{lock}"), format!("{NS}gone:{r}"));
    pubsub.subscribe(&[&wake_rw, &wake_lock, &gone_r]).unwrap();
    pubsub
        .set_read_timeout(Some(scale(Duration::from_secs(10))))
        .unwrap();

    fence_of(&lab.enter_rw(rw, &r, "read")).expect("holds");
    fence_of(&lab.enter_rw(rw, &w, "write"));
    assert_eq!(lab.remove_rw(rw, &r), 1);
    // A mutex's enter and remove, then an election candidate's (it has a
    // value): its observers hear the new leader.
    let (m, e) = (format!("{SID_WAKE}-m"), format!("{SID_WAKE}-e"));
    let (hold, size, fence) = (
        format!("{NS}lock:{lock}"),
        format!("{NS}size:{lock}"),
        format!("{NS}fence:{lock}"),
    );
    for (member, value) in [(&m, ""), (&e, "v")] {
        lab.call(
            "enter",
            &[
                NS, lock, &hold, "lock", member, TOKEN, value, &size, "", "1", &fence,
            ],
        );
        lab.call("remove", &[NS, lock, &hold, "lock", member]);
    }

    let heard: Vec<(String, String)> = (0..4)
        .map(|_| {
            let msg = pubsub.get_message().unwrap();
            (
                msg.get_channel_name().to_owned(),
                msg.get_payload().unwrap(),
            )
        })
        .collect();
    let wake = |member: &String| (wake_lock.clone(), member.clone());
    assert_eq!(
        heard,
        vec![
            (gone_r.clone(), rw.to_owned()),
            wake(&m),
            wake(&e),
            wake(&e)
        ],
        "the writer behind the reader hears its going; nothing on the \
         read-write lock's wake channel; the mutex's remove on its own, not \
         its enter; the candidate's enter and remove"
    );
    assert_eq!(lab.remove_rw(rw, &w), 0);
}

/// A dead holder of one recipe on a name another recipe then takes: the
/// taker's listing sweeps the dead member and its hold key, read from the
/// dead session's index (its own layout's), not the taker's layout's,
/// which left it for good (nothing else lists it once the index is gone).
#[test]
fn a_dead_holder_of_another_recipe_is_swept_with_its_hold_key() {
    let lab = Lab::new();
    let client = connect(lab.server);
    let bound = scale(Duration::from_secs(20));
    let (reader, holder) = (format!("{SID_DEAD}-r"), format!("{SID_DEAD}-m"));
    // A reader, whose session then ends; a mutex takes the name.
    let (read_then_lock, lock_then_read) = ("/qf/dead-reader", "/qf/dead-holder");
    lab.session(SID_DEAD);
    fence_of(&lab.enter_rw(read_then_lock, &reader, "read")).expect("holds");
    // A mutex's holder, the same way; a read-write lock takes the name.
    let (lock_key, size, fence) = (
        format!("{NS}lock:{lock_then_read}"),
        format!("{NS}size:{lock_then_read}"),
        format!("{NS}fence:{lock_then_read}"),
    );
    let args = [
        NS,
        lock_then_read,
        &lock_key,
        "lock",
        &holder,
        TOKEN,
        "",
        &size,
        "",
        "1",
        &fence,
    ];
    fence_of(&lab.call("enter", &args)).expect("holds");
    let _: i64 = lab.server.cmd(&["DEL", &format!("{NS}s:{SID_DEAD}")]);

    let mutex = client.mutex(read_then_lock).unwrap();
    let g = mutex
        .try_lock_for(bound)
        .unwrap()
        .expect("the reader is dead");
    g.release().unwrap();
    let rw = client.rw_lock(lock_then_read).unwrap();
    let g = rw.try_read_for(bound).unwrap().expect("the holder is dead");
    g.release().unwrap();
    lab.only_the_fence_left(&[read_then_lock, lock_then_read], SID_DEAD);
    client.close().unwrap();
}
