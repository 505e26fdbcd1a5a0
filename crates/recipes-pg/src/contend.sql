-- Layouts 4 to 7: a queue's look and enter, each one statement (one
-- implicit transaction: pooler-safe); layout 5 gave the read-write lock
-- its gate, its own confirm and its fenced check, layout 6 a reader's
-- fast enter and its release without the trigger, layout 7 the look and
-- the confirm our entry's uuid beside its seq, and the confirm's wait for
-- the open fenced transactions of expired holders ahead.
--
-- Ours is our seq *and* our entry (p_entry): a seq is drawn again after
-- the name's row was lost (truncated, the schema dropped, an older backup
-- restored: next_seq starts over), so another's row may stand at our seq
-- while ours is gone; judged by seq alone, its look would confirm that
-- row as ours, and mint a fence beside its owner's. Read by schema.rs; see
-- contend.rs for the verbs they serve and docs/notes/pg-driver.md for why
-- each step is there.
--
-- Each statement of a VOLATILE function takes a fresh snapshot (READ
-- COMMITTED), so a statement that runs after the name's row was locked
-- sees every entry ahead of ours: each was inserted by a transaction that
-- held that row until it committed.

-- The next of recipes.rw_order (a read-write lock's seq or token), floored
-- by the database clock in µs. The sequence runs behind the clock (it
-- moves by one a draw), and an older backup restored sets it back to
-- where it stood at the dump, so the draws after a restore would repeat
-- those made since. So when a draw finds it more than 10 ms behind the
-- clock, the sequence is set to the clock (recipes.rw_floor): every draw
-- is at most the clock when made, so one after a restore is above every
-- one before it, unless the restore came within 10 ms of its dump. At
-- most one floor a 10 ms of draws.
CREATE OR REPLACE FUNCTION recipes.rw_next() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_seq bigint := nextval('recipes.rw_order');
BEGIN
    IF v_seq >= (extract(epoch FROM clock_timestamp()) * 1000000)::int8 - 10000 THEN
        RETURN v_seq;
    END IF;
    RETURN recipes.rw_floor();
END $$;

-- recipes.rw_next's floor: the next of recipes.rw_order, the sequence set
-- to the clock first if it still lags by more than 10 ms. setval can move
-- a sequence back, so floors must not race: each is made under a
-- session-level advisory lock held across three calls that wait for
-- nothing (no deadlock), released on every way out, an error or a cancel
-- included. SECURITY DEFINER: setval needs UPDATE on the sequence, which
-- the roles that use the schema are not granted (USAGE is enough for a
-- draw); it does nothing but move the sequence up to the clock.
CREATE OR REPLACE FUNCTION recipes.rw_floor() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_seq bigint;
    v_now bigint;
BEGIN
    BEGIN
        PERFORM pg_advisory_lock(hashtext('recipes.rw_order'));
        v_seq := nextval('recipes.rw_order');
        v_now := (extract(epoch FROM clock_timestamp()) * 1000000)::int8;
        IF v_seq < v_now - 10000 THEN
            v_seq := setval('recipes.rw_order', v_now);
        END IF;
        PERFORM pg_advisory_unlock(hashtext('recipes.rw_order'));
    EXCEPTION WHEN query_canceled OR others THEN
        PERFORM pg_advisory_unlock(hashtext('recipes.rw_order'));
        RAISE;
    END;
    RETURN v_seq;
END $$;

-- A read-write lock's gate: a transaction-scoped advisory lock on the
-- name (two-int form, class 1919247223 = 'recw', key hashtext(name)),
-- shared for a reader, exclusive for a writer. Every enter and confirm of
-- a read-write lock's entry, and every fenced write of its holder, takes
-- it first and reads the queue only in the statements after (a fresh
-- snapshot): a writer's enter or confirm is committed before any later
-- reader's passes the gate, and waits for every earlier reader's commit,
-- while readers pass together. The lock manager queues a new shared
-- request behind a waiting exclusive one, so readers' enters cannot
-- starve a writer's (a row lock's FOR SHARE would: a compatible locker
-- never queues). See docs/notes/pg-driver.md.
CREATE OR REPLACE FUNCTION recipes.rw_gate(p_name text, p_shared boolean)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_shared THEN
        PERFORM pg_advisory_xact_lock_shared(1919247223, hashtext(p_name));
    ELSE
        PERFORM pg_advisory_xact_lock(1919247223, hashtext(p_name));
    END IF;
END $$;

-- Whether a read-write lock's holding (entry p_entry, token p_fence) may
-- still write, with its gate held to the end of the caller's transaction:
-- our entry is live, and no writer confirmed after ours (the name's fence
-- is the last writer's token: a writer's own, a reader's at most ours).
-- A writer's check holds the gate exclusive, so no reader or writer
-- confirms until the caller commits; a reader's shared, so no writer does.
CREATE OR REPLACE FUNCTION recipes.rw_held(p_name text, p_fence bigint, p_entry uuid,
    p_reading boolean)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_ok boolean;
BEGIN
    PERFORM recipes.rw_gate(p_name, p_reading);
    SELECT EXISTS (
        SELECT 1 FROM recipes.names n
        WHERE n.name = p_name
          AND CASE WHEN p_reading THEN n.fence <= p_fence ELSE n.fence = p_fence END
          AND EXISTS (SELECT 1 FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session
                      WHERE q.entry = p_entry AND s.expires_at > clock_timestamp()))
    INTO v_ok;
    RETURN v_ok;
END $$;

-- The confirm of a read-write lock's entry p_seq (role p_role): through
-- the gate (recipes.rw_gate), then, on a fresh snapshot, ours live and no
-- live entry ahead that our role counts (a writer every one, a reader only
-- the writers), judged on the newest versions of those entries' sessions,
-- locked in share mode (a renewal that commits late cannot revive one; a
-- reader locks no other reader's). The token comes from recipes.rw_order,
-- which never goes back: a reader's is only returned (readers write
-- nothing shared, so they confirm together), a writer's is also the
-- name's fence, which the gate orders against every reader's: a writer
-- mints after every earlier reader committed, a reader after every
-- earlier writer. NULL when ours does not hold.
CREATE OR REPLACE FUNCTION recipes.rw_confirm(p_name text, p_seq bigint, p_role text,
    p_entry uuid)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_holds boolean;
    v_fence bigint;
BEGIN
    PERFORM recipes.rw_gate(p_name, p_role = 'read');
    WITH ahead AS (
        SELECT q.seq, q.entry, s.expires_at > clock_timestamp() AS live
        FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session
        WHERE q.name = p_name AND q.seq <= p_seq
          AND (q.seq = p_seq OR p_role = 'write' OR q.role IS DISTINCT FROM 'read')
        FOR SHARE OF s)
    SELECT EXISTS (SELECT 1 FROM ahead
                   WHERE ahead.seq = p_seq AND ahead.entry = p_entry AND ahead.live)
       AND NOT EXISTS (SELECT 1 FROM ahead WHERE ahead.seq < p_seq AND ahead.live)
    INTO v_holds;
    IF NOT v_holds THEN
        RETURN NULL;
    END IF;
    IF p_role = 'read' THEN
        RETURN recipes.rw_next();
    END IF;
    UPDATE recipes.names n SET fence = recipes.rw_next() WHERE n.name = p_name
    RETURNING n.fence INTO v_fence;
    RETURN v_fence;
END $$;

-- The queue of p_name as the entry p_seq (role p_role: 'read' or 'write'
-- for a read-write lock's entry, else NULL) sees it, and the fence bump
-- when ours holds: fewer than p_most live entries ahead that our role
-- counts (a writer or a plain entry every one, a reader only the
-- writers). Returns ours alone with the new fence when it holds; else the
-- window of the live queue up to ours that the rule looks at, newest
-- first, fence NULL: ours and the p_most ahead, or, for a read-write
-- lock, ours, the one just ahead and the nearest writer ahead.
CREATE OR REPLACE FUNCTION recipes.look(p_name text, p_seq bigint, p_role text, p_most bigint,
    p_entry uuid)
RETURNS TABLE (r_seq bigint, r_role text, r_fence bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_fence bigint;
    v_now timestamptz;
BEGIN
    -- Looked at first without a lock: most looks of a waiting entry end
    -- here, and lock nothing.
    IF (SELECT count(*) FROM (
            SELECT 1 FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session
            WHERE q.name = p_name AND q.seq < p_seq AND s.expires_at > clock_timestamp()
              AND (p_role IS DISTINCT FROM 'read' OR q.role IS DISTINCT FROM 'read')
            LIMIT p_most) AS counted) < p_most THEN
        -- The confirm (a read-write lock's: recipes.rw_confirm, the same
        -- rule through its gate). A renewal that checked its row before the expiry may
        -- commit after it (a slow commit), making an entry ahead live
        -- again: so the sessions of ours and of every entry ahead are
        -- locked in share mode (waiting for such a renewal, holding off
        -- later ones until this commits) and judged on their newest
        -- versions. The fence never goes back, even after the schema was
        -- dropped or truncated: at least the database clock in µs.
        --
        -- A permit's fenced write or transaction locks its own row in
        -- share mode (entry.rs, STILL_PERMITTED), not the name's row: so
        -- an entry ahead judged expired is locked here (`gone`), which
        -- waits for such a transaction begun while its session was live
        -- to end, and no permit is admitted beside one still writing. Both
        -- judge on one instant (v_now), so no entry is counted gone that
        -- was not locked.
        IF p_role IS NOT NULL THEN
            v_fence := recipes.rw_confirm(p_name, p_seq, p_role, p_entry);
        ELSE
            -- The name's row first, alone: a confirm that waited for it
            -- (behind a holder's fenced transaction) while it held the
            -- sessions in share mode would hold up their renewals — ours
            -- and the other contenders' — for as long, and they would
            -- lose their leases meanwhile. Judged after, on a fresh
            -- snapshot.
            PERFORM 1 FROM recipes.names n WHERE n.name = p_name FOR NO KEY UPDATE;
            v_now := clock_timestamp();
            WITH ahead AS (
                SELECT q.seq, q.entry, q.role, s.expires_at > v_now AS live
                FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session
                WHERE q.name = p_name AND q.seq <= p_seq FOR SHARE OF s),
            gone AS (
                SELECT 1 FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session
                WHERE q.name = p_name AND q.seq < p_seq AND s.expires_at <= v_now
                FOR NO KEY UPDATE OF q)
            UPDATE recipes.names n
            SET fence = greatest(n.fence + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::int8)
            WHERE n.name = p_name
              AND (SELECT count(*) FROM gone) >= 0
              AND EXISTS (SELECT 1 FROM ahead
                          WHERE ahead.seq = p_seq AND ahead.entry = p_entry AND ahead.live)
              AND (SELECT count(*) FROM ahead WHERE ahead.seq < p_seq AND ahead.live
                   AND (p_role IS DISTINCT FROM 'read' OR ahead.role IS DISTINCT FROM 'read'))
                  < p_most
            RETURNING n.fence INTO v_fence;
        END IF;
        IF v_fence IS NOT NULL THEN
            RETURN QUERY SELECT p_seq, p_role, v_fence;
            RETURN;
        END IF;
    END IF;
    IF p_role IS NULL THEN
        RETURN QUERY
            SELECT q.seq, q.role, NULL::bigint
            FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session
            WHERE q.name = p_name AND (q.seq < p_seq OR q.entry = p_entry)
              AND s.expires_at > clock_timestamp()
            ORDER BY q.seq DESC LIMIT p_most + 1;
    ELSE
        RETURN QUERY
            WITH live AS (
                SELECT q.seq, q.role FROM recipes.queue q
                JOIN recipes.sessions s ON s.id = q.session
                WHERE q.name = p_name AND (q.seq < p_seq OR q.entry = p_entry)
                  AND s.expires_at > clock_timestamp())
            SELECT live.seq, live.role, NULL::bigint FROM live
            WHERE live.seq = p_seq
               OR live.seq = (SELECT max(l.seq) FROM live l WHERE l.seq < p_seq)
               OR live.seq = (SELECT max(l.seq) FROM live l
                              WHERE l.seq < p_seq AND l.role IS DISTINCT FROM 'read')
            ORDER BY live.seq DESC;
    END IF;
END $$;

-- Layout 6's look, for a client of that release still connected when
-- the schema was upgraded (it calls the look with four arguments): as the
-- look of the entry now at its seq, which is what it judged by before.
-- A client of this release never calls it.
CREATE OR REPLACE FUNCTION recipes.look(p_name text, p_seq bigint, p_role text, p_most bigint)
RETURNS TABLE (r_seq bigint, r_role text, r_fence bigint)
LANGUAGE sql VOLATILE AS $$
    SELECT * FROM recipes.look(p_name, p_seq, p_role, p_most,
        (SELECT q.entry FROM recipes.queue q WHERE q.name = p_name AND q.seq = p_seq))
$$;

-- Enter the queue of p_name (kind p_kind) with the entry p_entry of the
-- session p_session: take the next seq from the name's row (locked until
-- commit, so queue order is commit order; a read-write lock's entry: from
-- recipes.rw_order behind the name's gate), insert our row, then look
-- (recipes.look) as that entry. The first row is ours (r_fence NULL), the
-- look's follow. No row: nothing was inserted (the entry exists: an enter
-- sent again; the name is another recipe's; or it is inside the semaphore
-- p_outside).
--
-- A reader's fast path (layout 6): through the gate (shared), one
-- statement inserts our row when the name's row exists with our kind,
-- and on the same fresh snapshot reads the name's writers (all of them:
-- a writer enters behind the gate held exclusive, so every writer this
-- snapshot shows drew its seq before ours and none enters until we
-- commit), their sessions locked in share mode and judged on their
-- newest versions as recipes.rw_confirm does, and our session's
-- liveness. No live writer and ours live: ours holds, and its token is
-- its seq, drawn behind the gate after every earlier writer's token was
-- committed (so above each) and before any later writer's (so below
-- each), as recipes.rw_confirm's would be. Our own session is not
-- locked in share mode: the insert's foreign-key check holds it FOR KEY
-- SHARE, and a renewal only extends it. Anything else (the name's first
-- entry, another kind, an entry sent again, a live writer, our session
-- expired) goes the general way below, or looks.
CREATE OR REPLACE FUNCTION recipes.enter(p_name text, p_entry uuid, p_session bigint,
    p_kind text, p_value bytea, p_outside text, p_role text, p_most bigint)
RETURNS TABLE (r_seq bigint, r_role text, r_fence bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_seq bigint;
    v_kind text;
    v_live boolean;
    v_clear boolean;
BEGIN
    IF p_role = 'read' AND p_outside IS NULL THEN
        -- The gate by assignment: a plain expression, no statement.
        v_live := pg_advisory_xact_lock_shared(1919247223, hashtext(p_name)) IS NULL;
        WITH ins AS (
            INSERT INTO recipes.queue AS q (name, seq, entry, session, value, role)
            SELECT p_name, recipes.rw_next(), p_entry, p_session, p_value, 'read'
            WHERE EXISTS (SELECT 1 FROM recipes.names n
                          WHERE n.name = p_name AND n.kind = p_kind)
            ON CONFLICT (entry) DO NOTHING RETURNING q.seq),
        writers AS (
            SELECT s.expires_at > clock_timestamp() AS live
            FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session
            WHERE q.name = p_name AND q.role = 'write'
            FOR SHARE OF s)
        SELECT ins.seq,
               (SELECT s.expires_at > clock_timestamp() FROM recipes.sessions s
                WHERE s.id = p_session),
               NOT EXISTS (SELECT 1 FROM writers WHERE writers.live)
        INTO v_seq, v_live, v_clear
        FROM ins;
        IF v_seq IS NOT NULL THEN
            r_seq := v_seq;
            r_role := p_role;
            r_fence := NULL;
            RETURN NEXT;
            IF v_live AND v_clear THEN
                r_fence := v_seq;
                RETURN NEXT;
                RETURN;
            END IF;
            RETURN QUERY SELECT * FROM recipes.look(p_name, v_seq, p_role, p_most, p_entry);
            RETURN;
        END IF;
    END IF;
    IF p_role IS NOT NULL THEN
        -- A read-write lock's entry: through the gate, then (fresh
        -- snapshots) the name's row made if need be, and our row with the
        -- next of recipes.rw_order. The gate orders each reader's enter
        -- against each writer's, so their seqs are in commit order;
        -- readers' among themselves need not be (no rule compares them).
        PERFORM recipes.rw_gate(p_name, p_role = 'read');
        IF EXISTS (SELECT 1 FROM recipes.names p
                   WHERE p.name = p_outside AND p.kind = 'semaphore') THEN
            RETURN;
        END IF;
        SELECT n.kind INTO v_kind FROM recipes.names n WHERE n.name = p_name;
        IF NOT FOUND THEN
            INSERT INTO recipes.names (name, kind) VALUES (p_name, p_kind)
            ON CONFLICT (name) DO NOTHING;
            SELECT n.kind INTO v_kind FROM recipes.names n WHERE n.name = p_name;
        END IF;
        IF v_kind IS DISTINCT FROM p_kind THEN
            RETURN;
        END IF;
        INSERT INTO recipes.queue AS q (name, seq, entry, session, value, role)
        VALUES (p_name, recipes.rw_next(), p_entry, p_session, p_value, p_role)
        ON CONFLICT (entry) DO NOTHING RETURNING q.seq INTO v_seq;
    ELSE
        WITH n AS (
            INSERT INTO recipes.names AS n (name, kind) SELECT p_name, p_kind
            WHERE NOT EXISTS (SELECT 1 FROM recipes.names p
                              WHERE p.name = p_outside AND p.kind = 'semaphore')
            ON CONFLICT (name) DO UPDATE SET next_seq = n.next_seq + 1
            WHERE n.kind = p_kind RETURNING n.next_seq)
        INSERT INTO recipes.queue AS q (name, seq, entry, session, value, role)
        SELECT p_name, n.next_seq, p_entry, p_session, p_value, p_role FROM n
        ON CONFLICT (entry) DO NOTHING RETURNING q.seq INTO v_seq;
    END IF;
    IF v_seq IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT v_seq, p_role, NULL::bigint;
    RETURN QUERY SELECT * FROM recipes.look(p_name, v_seq, p_role, p_most, p_entry);
END $$;

-- Delete the entry p_entry as its holder's release (or the clean-up of
-- an entry that did not win): the queue's trigger is told so
-- (recipes.releasing, for this transaction only), and does not fire for a
-- reader's row (its WHEN condition, schema.rs). A reader's release tells
-- the name's channel itself, only when a writer is queued behind it
-- (readers never wait on a reader; a writer may). That check passes the
-- name's gate first (shared), so a writer's enter either committed before
-- it (seen: notified) or passes the gate after this delete committed (its
-- look sees the reader gone and never waits on it). Why it matters: a
-- NOTIFY makes its transaction's commit take one database-wide lock held
-- across the commit's flush (PostgreSQL keeps the notification queue in
-- commit order so), so readers that notified would commit one at a time
-- again. The settings and the gate are taken by assignment (plain
-- expressions, no statement).
CREATE OR REPLACE FUNCTION recipes.release(p_entry uuid) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_name text;
    v_seq bigint;
    v_role text;
    v_done boolean;
BEGIN
    v_done := set_config('recipes.releasing', 'on', true) IS NULL;
    DELETE FROM recipes.queue WHERE entry = p_entry
    RETURNING name, seq, role INTO v_name, v_seq, v_role;
    v_done := set_config('recipes.releasing', 'off', true) IS NULL;
    IF v_role = 'read' THEN
        v_done := pg_advisory_xact_lock_shared(1919247223, hashtext(v_name)) IS NULL;
        IF EXISTS (SELECT 1 FROM recipes.queue q
                   WHERE q.name = v_name AND q.seq > v_seq AND q.role = 'write') THEN
            v_done := pg_notify('recipes_' || md5(v_name), v_seq::text) IS NULL;
        END IF;
    END IF;
END $$;

-- What the queue's triggers run (layout 6: queue_notify on every update
-- and delete but a reader's own release, queue_notify_insert on every
-- insert but a read-write lock entry's; their WHEN conditions decide, in
-- schema.rs): tell the name's channel the row's seq, so a waiter hears of
-- the entry it waits on and a holder of its own row's deletion, whoever
-- deleted it (a session's end, by hand).
CREATE OR REPLACE FUNCTION recipes.notify_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('recipes_' || md5(COALESCE(OLD.name, NEW.name)),
                      COALESCE(OLD.seq, NEW.seq)::text);
    RETURN NULL;
END $$;
