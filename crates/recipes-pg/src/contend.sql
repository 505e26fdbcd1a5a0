-- Layout 4: a queue's look and enter, each one statement (one implicit
-- transaction: pooler-safe). Read by schema.rs; see contend.rs for the
-- verbs they serve and docs/notes/pg-driver.md for why each step is there.
--
-- Each statement of a VOLATILE function takes a fresh snapshot (READ
-- COMMITTED), so a statement that runs after the name's row was locked
-- sees every entry ahead of ours: each was inserted by a transaction that
-- held that row until it committed.

-- The queue of p_name as the entry p_seq (role p_role: 'read' or 'write'
-- for a read-write lock's entry, else NULL) sees it, and the fence bump
-- when ours holds: fewer than p_most live entries ahead that our role
-- counts (a writer or a plain entry every one, a reader only the
-- writers). Returns ours alone with the new fence when it holds; else the
-- window of the live queue up to ours that the rule looks at, newest
-- first, fence NULL: ours and the p_most ahead, or, for a read-write
-- lock, ours, the one just ahead and the nearest writer ahead.
CREATE OR REPLACE FUNCTION recipes.look(p_name text, p_seq bigint, p_role text, p_most bigint)
RETURNS TABLE (r_seq bigint, r_role text, r_fence bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_fence bigint;
BEGIN
    -- Looked at first without a lock: most looks of a waiting entry end
    -- here, and lock nothing.
    IF (SELECT count(*) FROM (
            SELECT 1 FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session
            WHERE q.name = p_name AND q.seq < p_seq AND s.expires_at > clock_timestamp()
              AND (p_role IS DISTINCT FROM 'read' OR q.role IS DISTINCT FROM 'read')
            LIMIT p_most) AS counted) < p_most THEN
        -- The confirm. A renewal that checked its row before the expiry may
        -- commit after it (a slow commit), making an entry ahead live
        -- again: so the sessions of ours and of every entry ahead are
        -- locked in share mode (waiting for such a renewal, holding off
        -- later ones until this commits) and judged on their newest
        -- versions. The fence never goes back, even after the schema was
        -- dropped or truncated: at least the database clock in µs.
        WITH ahead AS (
            SELECT q.seq, q.role, s.expires_at > clock_timestamp() AS live
            FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session
            WHERE q.name = p_name AND q.seq <= p_seq FOR SHARE OF s)
        UPDATE recipes.names n
        SET fence = greatest(n.fence + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::int8)
        WHERE n.name = p_name
          AND EXISTS (SELECT 1 FROM ahead WHERE ahead.seq = p_seq AND ahead.live)
          AND (SELECT count(*) FROM ahead WHERE ahead.seq < p_seq AND ahead.live
               AND (p_role IS DISTINCT FROM 'read' OR ahead.role IS DISTINCT FROM 'read'))
              < p_most
        RETURNING n.fence INTO v_fence;
        IF v_fence IS NOT NULL THEN
            RETURN QUERY SELECT p_seq, p_role, v_fence;
            RETURN;
        END IF;
    END IF;
    IF p_role IS NULL THEN
        RETURN QUERY
            SELECT q.seq, q.role, NULL::bigint
            FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session
            WHERE q.name = p_name AND q.seq <= p_seq AND s.expires_at > clock_timestamp()
            ORDER BY q.seq DESC LIMIT p_most + 1;
    ELSE
        RETURN QUERY
            WITH live AS (
                SELECT q.seq, q.role FROM recipes.queue q
                JOIN recipes.sessions s ON s.id = q.session
                WHERE q.name = p_name AND q.seq <= p_seq AND s.expires_at > clock_timestamp())
            SELECT live.seq, live.role, NULL::bigint FROM live
            WHERE live.seq = p_seq
               OR live.seq = (SELECT max(l.seq) FROM live l WHERE l.seq < p_seq)
               OR live.seq = (SELECT max(l.seq) FROM live l
                              WHERE l.seq < p_seq AND l.role IS DISTINCT FROM 'read')
            ORDER BY live.seq DESC;
    END IF;
END $$;

-- Enter the queue of p_name (kind p_kind) with the entry p_entry of the
-- session p_session: take the next seq from the name's row (locked until
-- commit, so queue order is commit order), insert our row, then look
-- (recipes.look) as that entry. The first row is ours (r_fence NULL), the
-- look's follow. No row: nothing was inserted (the entry exists: an enter
-- sent again; the name is another recipe's; or it is inside the semaphore
-- p_outside).
CREATE OR REPLACE FUNCTION recipes.enter(p_name text, p_entry uuid, p_session bigint,
    p_kind text, p_value bytea, p_outside text, p_role text, p_most bigint)
RETURNS TABLE (r_seq bigint, r_role text, r_fence bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_seq bigint;
BEGIN
    WITH n AS (
        INSERT INTO recipes.names AS n (name, kind) SELECT p_name, p_kind
        WHERE NOT EXISTS (SELECT 1 FROM recipes.names p
                          WHERE p.name = p_outside AND p.kind = 'semaphore')
        ON CONFLICT (name) DO UPDATE SET next_seq = n.next_seq + 1
        WHERE n.kind = p_kind RETURNING n.next_seq)
    INSERT INTO recipes.queue AS q (name, seq, entry, session, value, role)
    SELECT p_name, n.next_seq, p_entry, p_session, p_value, p_role FROM n
    ON CONFLICT (entry) DO NOTHING RETURNING q.seq INTO v_seq;
    IF v_seq IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT v_seq, p_role, NULL::bigint;
    RETURN QUERY SELECT * FROM recipes.look(p_name, v_seq, p_role, p_most);
END $$;
