# What a careful user writes by hand with psycopg2 for an uncontended
# fenced lock and its release, run by M1p (pg_cycle.rs) beside ours.
# Usage: python3 -c "$(cat pg_py_loops.py)" URL lease|advisory SECONDS
# Prints "<cycles> <elapsed s> <p50 us> <p99 us> <own CPU s>".
#
# One connection in autocommit mode: each statement is its own
# transaction, no BEGIN/COMMIT round trips. Parameters are passed as
# psycopg2 does by default: it quotes them into the text on the client and
# sends one simple query a statement (no server-side prepare).
#
# - lease: one statement bumps the name's fence (an upsert in a CTE) and
#   inserts the lease row when the name is free or its lease expired
#   (database time), returning the fence; the release deletes the row if
#   it still carries that fence. A refused take bumps the fence too
#   (fences only have to grow). Two statements a cycle.
# - advisory: pg_advisory_lock(key), the fence bump (UPDATE ... RETURNING)
#   and pg_advisory_unlock(key). Three statements a cycle.
import sys
import time

import psycopg2

url, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
name = "/bench/psycopg2/m1p-" + mode
key = 0x6D3170  # the advisory key: "m1p"

conn = psycopg2.connect(url)
conn.autocommit = True
cur = conn.cursor()
cur.execute(
    "CREATE TABLE IF NOT EXISTS py_fences (name text PRIMARY KEY, v bigint NOT NULL)"
)
cur.execute(
    "CREATE TABLE IF NOT EXISTS py_leases (name text PRIMARY KEY, "
    "fence bigint NOT NULL, expires_at timestamptz NOT NULL)"
)
cur.execute(
    "INSERT INTO py_fences VALUES (%s, 0) ON CONFLICT (name) DO NOTHING", (name,)
)

TAKE = """
WITH f AS (
  INSERT INTO py_fences AS x (name, v) VALUES (%(name)s, 1)
  ON CONFLICT (name) DO UPDATE SET v = x.v + 1
  RETURNING v)
INSERT INTO py_leases AS l (name, fence, expires_at)
SELECT %(name)s, f.v, clock_timestamp() + interval '10 s' FROM f
ON CONFLICT (name) DO UPDATE SET fence = EXCLUDED.fence, expires_at = EXCLUDED.expires_at
  WHERE l.expires_at <= clock_timestamp()
RETURNING l.fence
"""


def lease():
    cur.execute(TAKE, {"name": name})
    row = cur.fetchone()
    assert row is not None, "the lease row is free between cycles"
    cur.execute("DELETE FROM py_leases WHERE name = %s AND fence = %s", (name, row[0]))
    assert cur.rowcount == 1


def advisory():
    cur.execute("SELECT pg_advisory_lock(%s)", (key,))
    cur.execute("UPDATE py_fences SET v = v + 1 WHERE name = %s RETURNING v", (name,))
    assert cur.fetchone() is not None
    cur.execute("SELECT pg_advisory_unlock(%s)", (key,))
    assert cur.fetchone()[0]


cycle = {"lease": lease, "advisory": advisory}[mode]
took = []
cpu = time.process_time()
started = time.monotonic()
while time.monotonic() - started < seconds:
    t = time.perf_counter()
    cycle()
    took.append(time.perf_counter() - t)
elapsed = time.monotonic() - started
cpu = time.process_time() - cpu
took.sort()


def pct(p):
    return took[round((len(took) - 1) * p / 100)] * 1e6


print(len(took), elapsed, pct(50), pct(99), cpu)
