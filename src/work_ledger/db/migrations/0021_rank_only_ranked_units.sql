-- Rank rows only for the units the top lists can show (issue 32). 0017 kept a row in
-- wl_unit_ranks for every unit: the fold inserted one for each new unit, in the order of
-- its id (random), and upserted it again at the unit's first claim. So a backlog's first
-- lives updated rows on random pages of that table: after each checkpoint, a full-page
-- image per page for the hint bits the upsert's check sets and another for the update
-- (measured with pg_walinspect over one 64-agent window after a CHECKPOINT: 0.5 of them
-- per life, 4 KB of WAL per life on that table alone, beside the 11 KB the rest of a life
-- writes). v_costliest_units lists units with cost_cents > 0, v_most_attempted_units
-- those with attempts > 1, each from its partial index: a unit that is neither is in no
-- list, so it needs no row. Now a unit gets its row when it first costs something or is
-- claimed a second time, appended at the end of the table (where the fold's recent rows
-- are), and keeps it. Registering units writes no rank rows.

-- No fold of an older serve runs while this one replaces the fold and trims the table:
-- the fold's own lock, held until this migration commits.
SELECT pg_advisory_xact_lock(hashtext('wl_fold_read_summaries'));

DELETE FROM wl_unit_ranks WHERE NOT (cost_cents > 0 OR attempts > 1);

-- 0017's fold, with ranks kept for the ranked units only.
CREATE OR REPLACE FUNCTION wl_fold_read_summaries_locked() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    folded bigint;
    left_keys text[];
BEGIN
    WITH gone AS (
        DELETE FROM wl_unit_changes RETURNING 1
    ), sides AS MATERIALIZED (
        -- Read once: the aggregates below are those of the wl_pending_* views, over it.
        SELECT * FROM wl_pending_sides
    ), units AS (
        INSERT INTO wl_unit_tallies AS t
        SELECT domain, state, disposition, 0, sum(sign), sum(sign * (attempts > 0)::integer),
               sum(sign * (attempts > 1)::integer), sum(sign * attempts),
               sum(sign * cost_cents), sum(sign * no_evidence::integer),
               min(disposed_at) FILTER (WHERE sign = 1), max(disposed_at) FILTER (WHERE sign = 1)
        FROM sides
        GROUP BY domain, state, disposition
        ORDER BY domain, state, disposition
        ON CONFLICT ON CONSTRAINT unit_tallies_key DO UPDATE
        SET units = t.units + excluded.units,
            attempted_units = t.attempted_units + excluded.attempted_units,
            reworked_units = t.reworked_units + excluded.reworked_units,
            attempts = t.attempts + excluded.attempts,
            cost_cents = t.cost_cents + excluded.cost_cents,
            units_without_evidence = t.units_without_evidence + excluded.units_without_evidence,
            first_disposed_at = least(t.first_disposed_at, excluded.first_disposed_at),
            last_disposed_at = greatest(t.last_disposed_at, excluded.last_disposed_at)
    ), rework AS (
        INSERT INTO wl_rework_tallies AS t
        SELECT domain, 0, sum(sign * superseded), sum(sign * released)
        FROM sides WHERE attempts > 1
        GROUP BY domain
        HAVING sum(sign * superseded) <> 0 OR sum(sign * released) <> 0
        ORDER BY domain
        ON CONFLICT ON CONSTRAINT rework_tallies_key DO UPDATE
        SET superseded_attempts = t.superseded_attempts + excluded.superseded_attempts,
            released_attempts = t.released_attempts + excluded.released_attempts
    ), days AS (
        INSERT INTO wl_rework_days AS t
        SELECT domain, date_trunc('day', disposed_at, 'UTC') AS day, 0, sum(sign),
               sum(sign * (attempts > 1)::integer), sum(sign * attempts),
               sum(sign * superseded), sum(sign * released)
        FROM sides WHERE disposed_at IS NOT NULL AND attempts > 0
        GROUP BY domain, day
        ORDER BY domain, day
        ON CONFLICT ON CONSTRAINT rework_days_key DO UPDATE
        SET attempted_units = t.attempted_units + excluded.attempted_units,
            reworked_units = t.reworked_units + excluded.reworked_units,
            attempts = t.attempts + excluded.attempts,
            superseded_attempts = t.superseded_attempts + excluded.superseded_attempts,
            released_attempts = t.released_attempts + excluded.released_attempts
    ), pending_links AS MATERIALIZED (
        SELECT s.disposition, scope.domain, link, sum(s.sign) AS delta
        FROM sides AS s
        CROSS JOIN LATERAL unnest(s.links) AS link
        CROSS JOIN LATERAL (VALUES (s.domain), ('(all)')) AS scope (domain)
        WHERE s.disposition IS NOT NULL
        GROUP BY s.disposition, scope.domain, link
        HAVING sum(s.sign) <> 0
    ), links AS (
        INSERT INTO wl_disposed_links AS l
        SELECT disposition, domain, link, delta FROM pending_links
        ORDER BY disposition, domain, link
        ON CONFLICT ON CONSTRAINT disposed_links_key DO UPDATE SET units = l.units + excluded.units
        RETURNING l.disposition, l.domain, l.link, l.units
    ), link_counts AS (
        -- What wl_pending_link_tallies says, from the upsert's own answer: a link whose
        -- units now equal its (positive) delta is new to its key, one at 0 has left it.
        INSERT INTO wl_link_tallies AS t
        SELECT k.disposition, k.domain, 0,
               count(*) FILTER (WHERE k.units = p.delta AND p.delta > 0)
               - count(*) FILTER (WHERE k.units = 0)
        FROM links AS k JOIN pending_links AS p USING (disposition, domain, link)
        GROUP BY k.disposition, k.domain
        HAVING count(*) FILTER (WHERE k.units = p.delta AND p.delta > 0)
               <> count(*) FILTER (WHERE k.units = 0)
        ORDER BY k.disposition, k.domain
        ON CONFLICT ON CONSTRAINT link_tallies_key DO UPDATE SET links = t.links + excluded.links
    ), ranks AS (
        -- Once a unit ranks it ranks for good (its cost and attempts never fall: cost
        -- records and attempts are append-only), so no row ever leaves.
        INSERT INTO wl_unit_ranks AS r
        SELECT u.id, u.domain, u.external_ref, u.cost_cents, u.attempt_count
        FROM work_units AS u
        -- An array computed first: the units are read by their key, never a scan.
        WHERE u.id = ANY (ARRAY(SELECT DISTINCT unit_id FROM wl_unit_changes))
          AND (u.cost_cents > 0 OR u.attempt_count > 1)
        ORDER BY u.id
        ON CONFLICT (unit_id) DO UPDATE
        SET domain = excluded.domain, external_ref = excluded.external_ref,
            cost_cents = excluded.cost_cents, attempts = excluded.attempts
        WHERE (r.domain, r.external_ref, r.cost_cents, r.attempts)
              IS DISTINCT FROM (excluded.domain, excluded.external_ref, excluded.cost_cents,
                                excluded.attempts)
    )
    SELECT (SELECT count(*) FROM gone),
           (SELECT array_agg(DISTINCT format('%s/%s/%s', c.old_domain, c.old_state,
                                              c.old_disposition))
            FROM wl_unit_changes AS c
            WHERE c.old_disposed_at IS NOT NULL
              AND (c.old_domain, c.old_state, c.old_disposition)
                  IS DISTINCT FROM (c.new_domain, c.new_state, c.new_disposition))
    INTO folded, left_keys;
    DELETE FROM wl_disposed_links WHERE units = 0;
    IF left_keys IS NOT NULL THEN
        UPDATE wl_unit_tallies AS t
        SET first_disposed_at = w.first_disposed_at, last_disposed_at = w.last_disposed_at
        FROM (SELECT k.domain, k.state, k.disposition,
                     min(u.disposed_at) AS first_disposed_at, max(u.disposed_at) AS last_disposed_at
              FROM wl_unit_tallies AS k
              LEFT JOIN work_units AS u
                     ON (u.domain, u.state) = (k.domain, k.state)
                    AND u.disposition IS NOT DISTINCT FROM k.disposition
              WHERE format('%s/%s/%s', k.domain, k.state, k.disposition) = ANY (left_keys)
              GROUP BY k.domain, k.state, k.disposition) AS w
        WHERE (t.domain, t.state) = (w.domain, w.state)
          AND t.disposition IS NOT DISTINCT FROM w.disposition;
    END IF;
    RETURN folded;
END $$;

-- Ranks: a unit that costs something or was claimed more than once, not in
-- wl_unit_changes, has a rank row with its cost and attempts; no other unit has one.
CREATE OR REPLACE FUNCTION wl_unit_ranks_drift()
    RETURNS TABLE (summary text, key text, kept text, actual text)
    LANGUAGE sql STABLE AS $$
    SELECT 'wl_unit_ranks', coalesce(u.external_ref, r.external_ref),
           CASE WHEN r.unit_id IS NULL THEN 'no rank row'
                ELSE (r.domain, r.cost_cents, r.attempts)::text END,
           CASE WHEN u.id IS NULL THEN 'no rank row: no cost and at most one attempt'
                ELSE (u.domain, u.cost_cents, u.attempt_count)::text END
    FROM (SELECT * FROM work_units WHERE cost_cents > 0 OR attempt_count > 1) AS u
    FULL JOIN wl_unit_ranks AS r ON r.unit_id = u.id
    WHERE NOT EXISTS (SELECT 1 FROM wl_unit_changes AS c WHERE c.unit_id = coalesce(u.id, r.unit_id))
      AND (r.domain, r.external_ref, r.cost_cents, r.attempts)
          IS DISTINCT FROM (u.domain, u.external_ref, u.cost_cents, u.attempt_count)
$$;

-- 0017's rebuild, filling the ranks of the ranked units only.
CREATE OR REPLACE FUNCTION wl_rebuild_read_summaries() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE work_units, work_unit_attempts IN SHARE MODE;
    PERFORM pg_advisory_xact_lock(hashtext('wl_fold_read_summaries'));
    TRUNCATE wl_unit_changes, wl_unit_ranks;
    PERFORM wl_rebuild_read_summaries_0014();
    INSERT INTO wl_unit_ranks
    SELECT id, domain, external_ref, cost_cents, attempt_count FROM work_units
    WHERE cost_cents > 0 OR attempt_count > 1;
    ANALYZE wl_unit_ranks, wl_unit_changes;
END $$;
