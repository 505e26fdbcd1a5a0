//! A paused holder's writes to the application's own tables, refused by
//! the database itself: PostgreSQL's `guard.transaction`.
//!
//! ```sh
//! RECIPES_PG=postgres://postgres@127.0.0.1:5432/postgres cargo run --example pg_fenced_transaction
//! ```
//!
//! 1. Holder A takes the lock and, in a transaction fenced by it, writes a
//!    row of the application's table `recipes_example_ledger`.
//! 2. A "pauses" past its session's TTL: its client stops renewing the
//!    session row (`PgClient::orphan`), as a stopped process would.
//! 3. The row expires in database time; B takes the lock (a higher fence)
//!    and writes in its own fenced transaction.
//! 4. A wakes up and, unaware, writes again: its transaction finds the
//!    name's fence moved past its own and commits nothing (`FenceRejected`).
//!
//! No fence column is needed in the application's table: the check runs
//! in the same transaction as the write, under a share lock of the lock's
//! row, so no later holder can exist before the write commits.

use std::time::Duration;

use recipes_pg::tokio_postgres::types::Type;
use recipes_pg::{Client, Error, FencedTransaction, PgClient};

const LOCK: &str = "/examples/pg-fenced-transaction";

fn main() -> Result<(), Error> {
    let url = std::env::var("RECIPES_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let connect = |ttl| PgClient::builder(url.as_str()).ttl(ttl).connect();
    // Two clients, two sessions: as if A and B ran on different machines.
    let (a, b) = (
        connect(Duration::from_secs(2))?,
        connect(Duration::from_secs(5))?,
    );
    println!("backend: {}", a.url());

    let held_a = a.mutex(LOCK)?.lock()?;
    let write = |who: &str, fence: u64| {
        let (who, fence) = (who.to_owned(), fence as i64);
        move |tx: &mut recipes_pg::Transaction<'_>| {
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS recipes_example_ledger \
                 (id int PRIMARY KEY, written_by text NOT NULL, fence bigint NOT NULL)",
            )?;
            tx.execute(
                "INSERT INTO recipes_example_ledger (id, written_by, fence) VALUES (1, $1, $2) \
                 ON CONFLICT (id) DO UPDATE SET written_by = $1, fence = $2",
                &[(&who, Type::TEXT), (&fence, Type::INT8)],
            )
        }
    };
    held_a.transaction(write("A", held_a.token().get()))?;
    println!(
        "1. A holds the lock (fence {}) and wrote the ledger",
        held_a.token()
    );

    println!(
        "2. A pauses past its {:?} TTL. SIMULATED: A's client stops renewing its session",
        a.granted_ttl()
    );
    a.orphan();
    let reason = held_a.lost().wait_timeout(Duration::from_secs(30));
    println!("   A's loss signal fired ({reason:?}); A does not look at it");

    let held_b = b.mutex(LOCK)?.lock()?;
    held_b.transaction(write("B", held_b.token().get()))?;
    println!(
        "3. B holds the lock (fence {}) and wrote the ledger",
        held_b.token()
    );

    match held_a.transaction(write("A", held_a.token().get())) {
        Err(Error::FenceRejected { what }) => {
            println!("4. the database REJECTED A's transaction: {what}")
        }
        other => panic!("A's stale transaction was not refused: {other:?}"),
    }
    let last = held_b.transaction(|tx| {
        let rows = tx.query(
            "SELECT written_by FROM recipes_example_ledger WHERE id = 1",
            &[],
        )?;
        Ok(rows.first().map(|r| r.get::<_, String>(0)))
    })?;
    println!("   the ledger says it was written by {last:?}");
    held_b.release()?;
    drop(held_a);
    a.close().ok();
    b.close()
}
