//! Names: empty, relative, oversized, with components or characters one
//! store refuses. A name one store refuses is `InvalidArgument` before
//! anything is sent; a name it accepts works and leaves nothing.

use recipes_core::{Client, MAX_NAME_BYTES};

use crate::bench::{invalid, invalid_saying, ok, Bench, Ctx};
use crate::stores::Store;

/// A mutex on `name` locks and releases, and a semaphore, an election and
/// the contender list take it too.
fn works<S: Store>(ctx: &Ctx<S>, name: &str) -> Result<(), String> {
    let guard = ok("lock", ctx.client.mutex(name).and_then(|m| m.lock()))?;
    let contenders = ok("contenders", ctx.client.contenders(name))?;
    if contenders.len() != 1 {
        return Err(format!("{} contenders, expected ours", contenders.len()));
    }
    ok("release", guard.release())
}

/// Every recipe (and the read verbs) refuse `name`.
fn refused_everywhere<S: Store>(ctx: &Ctx<S>, name: &str, words: &[&str]) -> Result<(), String> {
    let c = ctx.client;
    invalid_saying(c.mutex(name), words).map_err(|e| format!("mutex: {e}"))?;
    invalid(c.semaphore(name, 2)).map_err(|e| format!("semaphore: {e}"))?;
    invalid(c.election(name)).map_err(|e| format!("election: {e}"))?;
    invalid(c.leader_latch(name, "id")).map_err(|e| format!("latch: {e}"))?;
    invalid(c.leader_selector(name, "id")).map_err(|e| format!("selector: {e}"))?;
    invalid(c.rw_lock(name)).map_err(|e| format!("read-write lock: {e}"))?;
    invalid(c.multi_lock(&[name])).map_err(|e| format!("multi-lock: {e}"))?;
    invalid(c.barrier(name)).map_err(|e| format!("barrier: {e}"))?;
    invalid(c.double_barrier(name, 2)).map_err(|e| format!("double barrier: {e}"))?;
    invalid(c.counter(name)).map_err(|e| format!("counter: {e}"))?;
    invalid(c.group(name)).map_err(|e| format!("group: {e}"))?;
    invalid(c.contenders(name)).map_err(|e| format!("contenders: {e}"))?;
    invalid(c.permits(name)).map_err(|e| format!("permits: {e}"))
}

/// Refused on ZooKeeper (saying `words`), accepted on etcd.
fn zk_only_refuses<S: Store>(ctx: &Ctx<S>, suffix: &str, words: &[&str]) -> Result<(), String> {
    let name = format!("{}{suffix}", ctx.root());
    match S::LABEL {
        "zk" => refused_everywhere(ctx, &name, words),
        _ => works(ctx, &name),
    }
}

pub fn run<S: Store>() {
    let mut b = Bench::<S>::new("names");
    b.case("an empty name is refused by every recipe", |ctx| {
        refused_everywhere(ctx, "", &["empty"])
    });
    b.case("a relative name is refused by every recipe", |ctx| {
        refused_everywhere(ctx, "locks/x", &["'/'"])
    });
    b.case("the root / is refused by every recipe", |ctx| {
        refused_everywhere(ctx, "/", &[])
    });
    b.case("a trailing / is refused by every recipe", |ctx| {
        refused_everywhere(ctx, &format!("{}/a/", ctx.root()), &["end with '/'"])
    });
    b.case("an empty component // is refused by every recipe", |ctx| {
        refused_everywhere(ctx, &format!("{}//a", ctx.root()), &["//"])
    });
    b.case("a NUL character is refused by every recipe", |ctx| {
        refused_everywhere(ctx, &format!("{}/a\u{0}b", ctx.root()), &["U+0000"])
    });
    b.case("a newline is refused by every recipe", |ctx| {
        refused_everywhere(ctx, &format!("{}/a\nb", ctx.root()), &["U+000A"])
    });
    for (what, c) in [
        ("a tab", '\t'),
        ("a carriage return", '\r'),
        ("DEL (U+007F)", '\u{7f}'),
        ("a C1 control (U+0085)", '\u{85}'),
    ] {
        b.case(&format!("{what} is refused by every recipe"), |ctx| {
            let name = format!("{}/a{c}b", ctx.root());
            refused_everywhere(ctx, &name, &[&format!("U+{:04X}", c as u32)])
        });
    }
    b.case(
        "spaces, punctuation and letters beyond ASCII work on every store",
        |ctx| works(ctx, &format!("{}/nightly report-été_✓.v1:a@b", ctx.root())),
    );
    b.case("a . component: zk refuses, etcd takes it", |ctx| {
        zk_only_refuses(ctx, "/./a", &["'.'"])
    });
    b.case("a .. component: zk refuses, etcd takes it", |ctx| {
        zk_only_refuses(ctx, "/a/..", &["'..'"])
    });
    b.case(
        "a character above U+FFFF: zk refuses, etcd takes it",
        |ctx| zk_only_refuses(ctx, "/lock-\u{1F512}", &["U+1F512"]),
    );
    b.case(
        "a private-use character: zk refuses, etcd takes it",
        |ctx| zk_only_refuses(ctx, "/a\u{E000}", &["U+E000"]),
    );
    b.case(
        "/zookeeper: zk refuses it as reserved, etcd takes it",
        |ctx| match S::LABEL {
            "zk" => refused_everywhere(ctx, "/zookeeper/x", &["reserves"]),
            _ => works(ctx, "/zookeeper/bad-input-x"),
        },
    );
    // One limit on every store (issue 23): PostgreSQL's, whose btree entry
    // holds about 2.7 KB.
    b.case(
        "a name of exactly MAX_NAME_BYTES (2,048) works and leaves nothing",
        |ctx| {
            let name = format!(
                "{}/{}",
                ctx.root(),
                "n".repeat(MAX_NAME_BYTES - ctx.root().len() - 1)
            );
            assert_eq!(name.len(), MAX_NAME_BYTES);
            works(ctx, &name)
        },
    );
    b.case(
        "a name one byte over MAX_NAME_BYTES is refused, saying 2048",
        |ctx| {
            let name = format!(
                "{}/{}",
                ctx.root(),
                "n".repeat(MAX_NAME_BYTES - ctx.root().len())
            );
            refused_everywhere(ctx, &name, &["2049 bytes", "at most 2048 bytes"])
        },
    );
    // failed on 6b1593a (pg): "use at most 32768 bytes", core's old limit,
    // beside PostgreSQL's own 2,048.
    b.case(
        "a 40 KiB name is refused, saying the limit of 2048 bytes",
        |ctx| {
            let name = format!("{}/{}", ctx.root(), "n".repeat(40 * 1024));
            refused_everywhere(ctx, &name, &["at most 2048 bytes"])?;
            invalid_saying(ctx.client.read(&name), &["at most 2048 bytes"])
        },
    );
    b.case(
        "a 1.1 MB name is refused by every recipe, quoted short",
        |ctx| {
            let name = format!("{}/{}", ctx.root(), "n".repeat(1_100_000));
            refused_everywhere(ctx, &name, &["bytes"])
        },
    );
    // failed on 295faf2 (etcd): Backend "etcdserver: key is not provided", not
    // InvalidArgument; read("") is sent unchecked and rpc.rs:28 maps gRPC
    // INVALID_ARGUMENT to a non-retryable Backend error.
    b.case("a plain read of an invalid key is refused", |ctx| {
        invalid(ctx.client.read(""))?;
        invalid(ctx.client.read(&format!("/{}", "k".repeat(1_100_000))))
    });
    b.case("an empty latch or selector id is refused", |ctx| {
        let name = ctx.name("latch");
        invalid(ctx.client.leader_latch(&name, ""))?;
        invalid(ctx.client.leader_selector(&name, ""))
    });
    b.finish();
}
