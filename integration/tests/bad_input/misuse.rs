//! The same misuse has the same answer on every store (issue 23): a
//! recipe on a name another recipe used and released, or named inside a
//! semaphore's layout, or below a held lock's name; a blocking call made
//! inside an async task. Every case holds on every store.

use std::time::Duration;

use recipes_core::Client;

use crate::bench::{invalid, invalid_saying, ok, Bench, Ctx};
use crate::stores::Store;

/// A mutex on `name` is taken at once and released.
fn lock_works<S: Store>(ctx: &Ctx<S>, name: &str) -> Result<(), String> {
    let g = ok(
        "try_lock",
        ctx.client.mutex(name).and_then(|m| m.try_lock()),
    )?;
    ok(
        "release",
        g.ok_or(format!("{name} not acquired"))?.release(),
    )
}

/// A semaphore of `permits` on `name` admits at once, and releases.
fn permit_works<S: Store>(ctx: &Ctx<S>, name: &str, permits: u32) -> Result<(), String> {
    ctx.may_leave(name);
    let s = ok("semaphore", ctx.client.semaphore(name, permits))?;
    let p = ok("try_acquire", s.try_acquire())?;
    ok("release", p.ok_or(format!("{name}: no permit"))?.release())
}

/// An election on `name` is won at once, and resigned.
fn leads<S: Store>(ctx: &Ctx<S>, name: &str) -> Result<(), String> {
    let e = ok("election", ctx.client.election(name))?;
    let l = ok("try_campaign", e.try_campaign(b"v"))?;
    ok("resign", l.ok_or(format!("{name}: not leading"))?.resign())
}

pub fn run<S: Store>() {
    let mut b = Bench::<S>::new("misuse");
    released_names(&mut b);
    inside_a_semaphore(&mut b);
    below_a_held_name(&mut b);
    inside_async(&mut b);
    b.finish();
}

/// A name a recipe used and released is free for any recipe, as on a
/// store that never saw it; a semaphore's size stays (it is its layout).
fn released_names<S: Store>(b: &mut Bench<S>) {
    b.case("a semaphore on a mutex's released name admits", |ctx| {
        let name = ctx.name("m");
        lock_works(ctx, &name)?;
        permit_works(ctx, &name, 2)
    });
    b.case("an election on a mutex's released name leads", |ctx| {
        let name = ctx.name("m");
        lock_works(ctx, &name)?;
        leads(ctx, &name)
    });
    b.case("a mutex on an election's resigned name locks", |ctx| {
        let name = ctx.name("e");
        leads(ctx, &name)?;
        lock_works(ctx, &name)
    });
    b.case(
        "a mutex on a released semaphore's name is refused (its size stays)",
        |ctx| {
            let name = ctx.name("sem");
            permit_works(ctx, &name, 2)?;
            invalid_saying(
                ctx.client.mutex(&name).and_then(|m| m.try_lock()),
                &["semaphore", "another name"],
            )
        },
    );
    b.case(
        "a semaphore of another size on a released semaphore's name is refused",
        |ctx| {
            let name = ctx.name("sem");
            permit_works(ctx, &name, 2)?;
            invalid_saying(
                ctx.client.semaphore(&name, 3).and_then(|s| s.try_acquire()),
                &["2 permits", "asked for 3"],
            )
        },
    );
    b.case(
        "a semaphore of the same size on its released name admits",
        |ctx| {
            let name = ctx.name("sem");
            permit_works(ctx, &name, 2)?;
            permit_works(ctx, &name, 2)
        },
    );
}

/// Names inside a semaphore's layout (`<sem>/locks`, `<sem>/leases`: its
/// internal mutex and its permits on ZooKeeper and PostgreSQL) are not
/// names of their own on any store.
fn inside_a_semaphore<S: Store>(b: &mut Bench<S>) {
    for part in ["locks", "leases"] {
        b.case(
            &format!("a mutex named <semaphore>/{part} is refused, its permit kept"),
            |ctx| {
                let sem = ctx.name("sem");
                ctx.may_leave(&sem);
                let s = ok("semaphore", ctx.client.semaphore(&sem, 2))?;
                let p = ok("acquire", s.acquire())?;
                let inside = format!("{sem}/{part}");
                invalid_saying(
                    ctx.client.mutex(&inside).and_then(|m| m.try_lock()),
                    &["semaphore"],
                )?;
                ok("the permit still holds", p.check())?;
                ok("release", p.release())
            },
        );
        b.case(
            &format!("an election named <semaphore>/{part} is refused"),
            |ctx| {
                let sem = ctx.name("sem");
                permit_works(ctx, &sem, 2)?;
                let inside = format!("{sem}/{part}");
                invalid(
                    ctx.client
                        .election(&inside)
                        .and_then(|e| e.try_campaign(b"v")),
                )
            },
        );
    }
    b.case(
        "a mutex named <semaphore>/other, outside its layout, locks",
        |ctx| {
            let sem = ctx.name("sem");
            permit_works(ctx, &sem, 2)?;
            lock_works(ctx, &format!("{sem}/other"))
        },
    );
}

/// A name below a held lock's is a name of its own: `/a` and `/a/b` never
/// block each other.
fn below_a_held_name<S: Store>(b: &mut Bench<S>) {
    b.case("a mutex below a held mutex's name locks beside it", |ctx| {
        let name = ctx.name("m");
        let g = ok("lock", ctx.client.mutex(&name).and_then(|m| m.lock()))?;
        lock_works(ctx, &format!("{name}/child"))?;
        ok("the outer lock still holds", g.check())?;
        ok("release", g.release())
    });
    b.case(
        "a semaphore below a held mutex's name admits beside it",
        |ctx| {
            let name = ctx.name("m");
            let g = ok("lock", ctx.client.mutex(&name).and_then(|m| m.lock()))?;
            permit_works(ctx, &format!("{name}/sem"), 1)?;
            ok("the outer lock still holds", g.check())?;
            ok("release", g.release())
        },
    );
    b.case("a mutex above a held mutex's name locks beside it", |ctx| {
        let name = ctx.name("outer");
        let g = ok(
            "lock",
            ctx.client
                .mutex(&format!("{name}/inner"))
                .and_then(|m| m.lock()),
        )?;
        lock_works(ctx, &name)?;
        ok("the inner lock still holds", g.check())?;
        ok("release", g.release())
    });
}

/// A blocking call made inside an async task would stall its executor's
/// thread: it is `InvalidArgument` saying where to call it from, on every
/// store, and the same call from `spawn_blocking` works.
fn inside_async<S: Store>(b: &mut Bench<S>) {
    let bound = Duration::from_secs(5);
    b.case_within(
        "lock() inside a current-thread runtime's task is refused, saying spawn_blocking",
        bound,
        |ctx| {
            let rt = tokio_runtime(false)?;
            let c = ctx.client.clone();
            let name = ctx.name("m");
            let r = rt.block_on(async move { c.mutex(&name).and_then(|m| m.lock()).map(drop) });
            invalid_saying(r, &["spawn_blocking"])
        },
    );
    b.case_within(
        "a fenced put inside a multi-thread runtime's task is refused; the guard holds",
        bound,
        |ctx| {
            let name = ctx.name("m");
            let g = ok("lock", ctx.client.mutex(&name).and_then(|m| m.lock()))?;
            let rt = tokio_runtime(true)?;
            let resource = format!("{}-resource", ctx.root());
            let r = rt.block_on(async {
                tokio::spawn(async move {
                    let r = g.put(&resource, b"x");
                    (g, r)
                })
                .await
            });
            let (g, r) = r.map_err(|e| format!("the task failed: {e}"))?;
            invalid_saying(r, &["spawn_blocking"])?;
            ok("still held", g.check())?;
            ok("release", g.release())
        },
    );
    b.case_within("the same lock() from spawn_blocking works", bound, |ctx| {
        let rt = tokio_runtime(true)?;
        let c = ctx.client.clone();
        let name = ctx.name("m");
        let r = rt.block_on(async move {
            tokio::task::spawn_blocking(move || {
                let g = c.mutex(&name)?.lock()?;
                g.release()
            })
            .await
        });
        match r {
            Ok(r) => ok("lock and release", r),
            Err(e) => Err(format!("the blocking task failed: {e}")),
        }
    });
    b.case_within(
        "a plain thread inside a runtime's context (Handle::enter) may block",
        bound,
        |ctx| {
            let rt = tokio_runtime(true)?;
            let _entered = rt.enter();
            lock_works(ctx, &ctx.name("m"))
        },
    );
}

/// A tokio runtime of the test's own: multi-thread (one worker) or
/// current-thread.
fn tokio_runtime(multi: bool) -> Result<tokio::runtime::Runtime, String> {
    let mut b = match multi {
        true => tokio::runtime::Builder::new_multi_thread(),
        false => tokio::runtime::Builder::new_current_thread(),
    };
    if multi {
        b.worker_threads(1);
    }
    b.enable_all()
        .build()
        .map_err(|e| format!("a tokio runtime: {e}"))
}
