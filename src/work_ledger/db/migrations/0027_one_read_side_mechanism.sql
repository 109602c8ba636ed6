-- One read-side mechanism (issue 44, part 3). Every summary the views read is now kept the
-- same way: an insert into a table without an index as a change happens, folded by
-- wl_fold_read_summaries(), and read as folded plus pending. (scope_spend, which v_budget
-- also reads, is the claim's: a budget is decided in the claim's statement, 0011, 0020.)
--
-- - Per-model costs (v_cost_by_model, 0014's wl_model_tallies) were upserted in the
--   statement of every cost record: a unique-index probe into wl_model_units and an upsert
--   of a hot key per record. A cost record now appends its id to wl_cost_notes; the fold
--   adds the notes to wl_model_tallies and wl_model_units. (attempt_model_spend, 0024, is
--   not a tally: it decides how much a telemetry record or a final result adds, once, on
--   the write path, and is unchanged.)
-- - The stripe columns go: since 0017 only the fold writes the tallies (one writer, under
--   its lock), so every key has one row and nothing reads a stripe.
-- - The fold adds what the pending views say, read in the fold's own snapshot: the sums
--   are written once, in those views.
-- - The rebuild and the audit are written whole, without the renamed versions they called.

-- No fold while the tallies change shape.
SELECT pg_advisory_xact_lock(hashtext('wl_fold_read_summaries'));

-- The views that name a stripe column are dropped with the views over them
-- (v_queue_depth, v_cost_per_unit, v_rework, v_disposition_summary, v_stall_counts,
-- v_forecast), which are created again below with the same columns. Their comments and
-- their readers (roles made by wl_grant_reader) are kept here and given back at the end.
CREATE TABLE wl_0027_kept_views AS
SELECT c.relname::text AS view_name, obj_description(c.oid, 'pg_class') AS comment,
       ARRAY(SELECT DISTINCT r.rolname::text
             FROM aclexplode(c.relacl) AS acl JOIN pg_roles AS r ON r.oid = acl.grantee
             WHERE acl.privilege_type = 'SELECT' AND acl.grantee <> c.relowner) AS readers
FROM pg_class AS c
WHERE c.relkind = 'v' AND c.relnamespace = current_schema()::regnamespace
  AND c.relname IN ('v_queue_depth', 'v_cost_per_unit', 'v_rework', 'v_disposition_summary',
                    'v_stall_counts', 'v_forecast');
DROP VIEW wl_unit_tallies_now, wl_rework_tallies_now, wl_rework_days_now, wl_link_tallies_now
    CASCADE;
DROP VIEW wl_pending_unit_tallies, wl_pending_rework_tallies, wl_pending_rework_days,
          wl_pending_link_tallies;

-- One row per key. Emptied here; the rebuild at the end fills them from the tables.
TRUNCATE wl_unit_tallies, wl_rework_tallies, wl_rework_days, wl_link_tallies,
         wl_model_tallies, wl_model_units;
ALTER TABLE wl_unit_tallies DROP CONSTRAINT unit_tallies_key, DROP COLUMN stripe,
    ADD CONSTRAINT unit_tallies_key UNIQUE NULLS NOT DISTINCT (domain, state, disposition);
ALTER TABLE wl_rework_tallies DROP CONSTRAINT rework_tallies_key, DROP COLUMN stripe,
    ADD CONSTRAINT rework_tallies_key PRIMARY KEY (domain);
ALTER TABLE wl_rework_days DROP CONSTRAINT rework_days_key, DROP COLUMN stripe,
    ADD CONSTRAINT rework_days_key PRIMARY KEY (domain, day);
ALTER TABLE wl_link_tallies DROP CONSTRAINT link_tallies_key, DROP COLUMN stripe,
    ADD CONSTRAINT link_tallies_key PRIMARY KEY (disposition, domain);
ALTER TABLE wl_model_tallies DROP CONSTRAINT model_tallies_key, DROP COLUMN stripe,
    ADD CONSTRAINT model_tallies_key UNIQUE NULLS NOT DISTINCT (fleet, domain, model);
DROP FUNCTION wl_tally_stripe(integer);
COMMENT ON TABLE wl_unit_tallies IS
    'What the units of each (domain, state, disposition) add up to, as of the last fold '
    '(wl_fold_read_summaries()). Read through wl_unit_tallies_now (folded plus pending) by '
    'v_queue_depth, v_cost_per_unit, v_rework, v_disposition_summary.';

-- What the change rows not yet folded add to each tally, in the tallies' own columns.
-- The fold adds exactly these, read in its own snapshot: the one place the sums are written.
CREATE VIEW wl_pending_unit_tallies AS
SELECT domain, state, disposition, sum(sign)::bigint AS units,
       sum(sign * (attempts > 0)::integer)::bigint AS attempted_units,
       sum(sign * (attempts > 1)::integer)::bigint AS reworked_units,
       sum(sign * attempts)::bigint AS attempts, sum(sign * cost_cents)::bigint AS cost_cents,
       sum(sign * no_evidence::integer)::bigint AS units_without_evidence,
       min(disposed_at) FILTER (WHERE sign = 1) AS first_disposed_at,
       max(disposed_at) FILTER (WHERE sign = 1) AS last_disposed_at
FROM wl_pending_sides
GROUP BY domain, state, disposition;

CREATE VIEW wl_pending_rework_tallies AS
SELECT domain, sum(sign * superseded)::bigint AS superseded_attempts,
       sum(sign * released)::bigint AS released_attempts
FROM wl_pending_sides WHERE attempts > 1
GROUP BY domain
HAVING sum(sign * superseded) <> 0 OR sum(sign * released) <> 0;

CREATE VIEW wl_pending_rework_days AS
SELECT domain, date_trunc('day', disposed_at, 'UTC') AS day,
       sum(sign)::bigint AS attempted_units,
       sum(sign * (attempts > 1)::integer)::bigint AS reworked_units,
       sum(sign * attempts)::bigint AS attempts,
       sum(sign * superseded)::bigint AS superseded_attempts,
       sum(sign * released)::bigint AS released_attempts
FROM wl_pending_sides WHERE disposed_at IS NOT NULL AND attempts > 0
GROUP BY domain, date_trunc('day', disposed_at, 'UTC');

-- How the count of distinct links moves: a link new to its key adds one, a link whose
-- units come to 0 takes one away (wl_disposed_links as the reader's, or the fold's,
-- snapshot has it: before the fold's own upsert of the same links).
CREATE VIEW wl_pending_link_tallies AS
SELECT p.disposition, p.domain,
       sum(CASE WHEN coalesce(l.units, 0) = 0 AND p.delta > 0 THEN 1
                WHEN l.units > 0 AND l.units + p.delta = 0 THEN -1
                ELSE 0 END)::bigint AS links
FROM wl_pending_links AS p
LEFT JOIN wl_disposed_links AS l USING (disposition, domain, link)
GROUP BY p.disposition, p.domain;

-- The tallies as the tables say now: folded plus pending. Every view below reads these.
CREATE VIEW wl_unit_tallies_now AS
SELECT * FROM wl_unit_tallies UNION ALL SELECT * FROM wl_pending_unit_tallies;
CREATE VIEW wl_rework_tallies_now AS
SELECT * FROM wl_rework_tallies UNION ALL SELECT * FROM wl_pending_rework_tallies;
CREATE VIEW wl_rework_days_now AS
SELECT * FROM wl_rework_days UNION ALL SELECT * FROM wl_pending_rework_days;
CREATE VIEW wl_link_tallies_now AS
SELECT * FROM wl_link_tallies UNION ALL SELECT * FROM wl_pending_link_tallies;

-- The day notes' sums (0023's wl_pending_daily_tallies wrote them inline), so that the
-- fold adds the same ones.
CREATE VIEW wl_pending_day_notes AS
SELECT day, domain,
       count(*) FILTER (WHERE outcome = 'verified') AS verified,
       count(*) FILTER (WHERE outcome = 'split') AS split,
       count(*) FILTER (WHERE outcome = 'failed') AS failed,
       count(*) FILTER (WHERE outcome = 'abandoned') AS abandoned,
       count(*) FILTER (WHERE outcome = 'superseded') AS superseded,
       sum(cost_cents)::bigint AS cost_cents, sum(estimated_cents)::bigint AS estimated_cents
FROM wl_day_notes GROUP BY day, domain;
CREATE OR REPLACE VIEW wl_pending_daily_tallies AS
SELECT day, domain, migrated, dropped, deferred, dead, 0::bigint AS verified,
       0::bigint AS split, 0::bigint AS failed, 0::bigint AS abandoned, 0::bigint AS superseded,
       0::bigint AS cost_cents, 0::bigint AS estimated_cents, 0::bigint AS agents,
       NULL::bigint AS peak_live
FROM wl_pending_daily_disposed
UNION ALL
SELECT day, domain, 0, 0, 0, 0, verified, split, failed, abandoned, superseded, cost_cents,
       estimated_cents, 0, NULL
FROM wl_pending_day_notes
UNION ALL
SELECT day, domain, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, count(*), NULL
FROM wl_pending_daily_agents GROUP BY day, domain
UNION ALL
SELECT day, domain, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, peak_live FROM wl_pending_peaks;

-- ---------------------------------------------------------------------------------------
-- Per-model costs through notes and the fold.

-- A cost record's id, appended by its row trigger: no index, no key, like wl_unit_changes.
-- The note names only the record: the fold and the pending views read the record and its
-- unit's fleet and domain as they are then, so a unit moved by raw SQL before its notes
-- fold takes them along (wl_move_unit_costs moves only what is folded).
CREATE TABLE wl_cost_notes (
    record_id bigint NOT NULL
);
COMMENT ON TABLE wl_cost_notes IS
    'Appended by a trigger on cost_records: the records not yet added to wl_model_tallies; '
    'deleted as the fold adds them. v_cost_by_model adds the records still here.';

-- Each noted record with its unit's key, and whether its (key, model, unit) is new to
-- wl_model_units (then the unit counts once for that key and model).
CREATE VIEW wl_pending_cost_records AS
SELECT u.fleet, u.domain, r.model, r.unit_id, r.cost_cents, r.estimated, r.input_tokens,
       r.output_tokens, r.cache_read_tokens, r.cache_write_tokens,
       NOT EXISTS (SELECT 1 FROM wl_model_units AS m
                   WHERE (m.fleet, m.domain, m.unit_id) = (u.fleet, u.domain, r.unit_id)
                     AND m.model IS NOT DISTINCT FROM r.model) AS new_unit
FROM wl_cost_notes AS n
JOIN cost_records AS r ON r.id = n.record_id
JOIN work_units AS u ON u.id = r.unit_id;

-- What the notes add to each model tally, in its columns (token sums with how many records
-- carried each class, so a sum stays null where every record left it null).
CREATE VIEW wl_pending_model_tallies AS
SELECT fleet, domain, model, sum(cost_cents)::bigint AS cost_cents,
       coalesce(sum(cost_cents) FILTER (WHERE estimated), 0)::bigint AS estimated_cents,
       count(*) FILTER (WHERE estimated) AS estimated_records,
       coalesce(sum(input_tokens), 0)::bigint AS input_tokens,
       count(input_tokens) AS input_records,
       coalesce(sum(output_tokens), 0)::bigint AS output_tokens,
       count(output_tokens) AS output_records,
       coalesce(sum(cache_read_tokens), 0)::bigint AS cache_read_tokens,
       count(cache_read_tokens) AS cache_read_records,
       coalesce(sum(cache_write_tokens), 0)::bigint AS cache_write_tokens,
       count(cache_write_tokens) AS cache_write_records,
       count(*) AS records,
       count(DISTINCT unit_id) FILTER (WHERE new_unit) AS units
FROM wl_pending_cost_records
GROUP BY fleet, domain, model;

CREATE VIEW wl_model_tallies_now AS
SELECT * FROM wl_model_tallies UNION ALL SELECT * FROM wl_pending_model_tallies;

-- The same sums from every cost record: what the rebuild writes and the audit compares
-- (a full scan; 0014's wl_model_sums(NULL)).
CREATE VIEW wl_model_tallies_scan AS
SELECT u.fleet, u.domain, r.model, sum(r.cost_cents)::bigint AS cost_cents,
       coalesce(sum(r.cost_cents) FILTER (WHERE r.estimated), 0)::bigint AS estimated_cents,
       count(*) FILTER (WHERE r.estimated) AS estimated_records,
       coalesce(sum(r.input_tokens), 0)::bigint AS input_tokens,
       count(r.input_tokens) AS input_records,
       coalesce(sum(r.output_tokens), 0)::bigint AS output_tokens,
       count(r.output_tokens) AS output_records,
       coalesce(sum(r.cache_read_tokens), 0)::bigint AS cache_read_tokens,
       count(r.cache_read_tokens) AS cache_read_records,
       coalesce(sum(r.cache_write_tokens), 0)::bigint AS cache_write_tokens,
       count(r.cache_write_tokens) AS cache_write_records,
       count(*) AS records, count(DISTINCT r.unit_id) AS units
FROM cost_records AS r JOIN work_units AS u ON u.id = r.unit_id
GROUP BY u.fleet, u.domain, r.model;

-- Cost records are append-only: the row trigger notes the record, and the day's cents for
-- the program's course (0023). No upsert in the statement.
CREATE OR REPLACE FUNCTION wl_tally_cost_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wl_cost_notes VALUES (NEW.id);
    IF NEW.cost_cents > 0 THEN
        INSERT INTO wl_day_notes (day, domain, cost_cents, estimated_cents)
        SELECT wl_utc_day(NEW.created_at), u.domain, NEW.cost_cents,
               CASE WHEN NEW.estimated THEN NEW.cost_cents ELSE 0 END
        FROM work_units AS u WHERE u.id = NEW.unit_id;
    END IF;
    RETURN NULL;
END $$;

-- A unit moved to another fleet or domain (raw SQL: no write path does it) takes the sums
-- of its folded records out of the old key and into the new; its records still noted are
-- read under its new key when they fold. The fold's lock, so no fold adds notes meanwhile
-- (a fold under way commits first, and this statement then sees what it folded).
CREATE OR REPLACE FUNCTION wl_move_unit_costs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('wl_fold_read_summaries'));
    INSERT INTO wl_model_tallies AS t
    SELECT k.fleet, k.domain, s.model,
           k.sign * s.cost_cents, k.sign * s.estimated_cents, k.sign * s.estimated_records,
           k.sign * s.input_tokens, k.sign * s.input_records, k.sign * s.output_tokens,
           k.sign * s.output_records, k.sign * s.cache_read_tokens,
           k.sign * s.cache_read_records, k.sign * s.cache_write_tokens,
           k.sign * s.cache_write_records, k.sign * s.records, k.sign
    FROM (SELECT r.model, sum(r.cost_cents)::bigint AS cost_cents,
                 coalesce(sum(r.cost_cents) FILTER (WHERE r.estimated), 0)::bigint
                     AS estimated_cents,
                 count(*) FILTER (WHERE r.estimated) AS estimated_records,
                 coalesce(sum(r.input_tokens), 0)::bigint AS input_tokens,
                 count(r.input_tokens) AS input_records,
                 coalesce(sum(r.output_tokens), 0)::bigint AS output_tokens,
                 count(r.output_tokens) AS output_records,
                 coalesce(sum(r.cache_read_tokens), 0)::bigint AS cache_read_tokens,
                 count(r.cache_read_tokens) AS cache_read_records,
                 coalesce(sum(r.cache_write_tokens), 0)::bigint AS cache_write_tokens,
                 count(r.cache_write_tokens) AS cache_write_records,
                 count(*) AS records
          FROM cost_records AS r
          WHERE r.unit_id = NEW.id
            AND NOT EXISTS (SELECT 1 FROM wl_cost_notes AS n WHERE n.record_id = r.id)
          GROUP BY r.model) AS s
    CROSS JOIN (VALUES (OLD.fleet, OLD.domain, -1), (NEW.fleet, NEW.domain, 1))
        AS k (fleet, domain, sign)
    ORDER BY k.fleet, k.domain, s.model
    ON CONFLICT ON CONSTRAINT model_tallies_key DO UPDATE
    SET cost_cents = t.cost_cents + excluded.cost_cents,
        estimated_cents = t.estimated_cents + excluded.estimated_cents,
        estimated_records = t.estimated_records + excluded.estimated_records,
        input_tokens = t.input_tokens + excluded.input_tokens,
        input_records = t.input_records + excluded.input_records,
        output_tokens = t.output_tokens + excluded.output_tokens,
        output_records = t.output_records + excluded.output_records,
        cache_read_tokens = t.cache_read_tokens + excluded.cache_read_tokens,
        cache_read_records = t.cache_read_records + excluded.cache_read_records,
        cache_write_tokens = t.cache_write_tokens + excluded.cache_write_tokens,
        cache_write_records = t.cache_write_records + excluded.cache_write_records,
        records = t.records + excluded.records,
        units = t.units + excluded.units;
    UPDATE wl_model_units SET fleet = NEW.fleet, domain = NEW.domain WHERE unit_id = NEW.id;
    RETURN NULL;
END $$;
DROP FUNCTION wl_model_sums(uuid[]);

CREATE OR REPLACE VIEW v_cost_by_model WITH (security_barrier) AS
SELECT fleet, domain, model,
       sum(cost_cents)::bigint AS cost_cents,
       CASE WHEN sum(estimated_records) > 0 THEN sum(estimated_cents)::bigint END
           AS estimated_cents,
       CASE WHEN sum(input_records) > 0 THEN sum(input_tokens)::bigint END AS input_tokens,
       CASE WHEN sum(output_records) > 0 THEN sum(output_tokens)::bigint END AS output_tokens,
       CASE WHEN sum(cache_read_records) > 0 THEN sum(cache_read_tokens)::bigint END
           AS cache_read_tokens,
       CASE WHEN sum(cache_write_records) > 0 THEN sum(cache_write_tokens)::bigint END
           AS cache_write_tokens,
       sum(units)::bigint AS units,
       sum(records)::bigint AS records
FROM wl_model_tallies_now
GROUP BY fleet, domain, model
HAVING sum(records) <> 0
ORDER BY fleet, domain, model NULLS FIRST;
COMMENT ON VIEW v_cost_by_model IS
    'Cost records summed per fleet, domain and model (null: recorded without one): cents, '
    'the estimated part of them, each token class, and how many units and records. Read '
    'from wl_model_tallies (folded) plus the records noted since (wl_cost_notes).';

-- ---------------------------------------------------------------------------------------
-- The fold. Three statements, each in one snapshot: each deletes the rows it sees (change
-- rows, day notes, cost notes) and adds what the pending views say about exactly those,
-- read in the same snapshot (a data-modifying CTE's changes are not visible to the rest
-- of its statement, so the views see the rows and the tallies as before the fold). A change
-- that commits late is still there for the next fold. The keys of a disposed unit that left
-- its key (a raw edit) come back so their first and last disposal are looked up again.
-- Returns how many change rows it folded.
CREATE OR REPLACE FUNCTION wl_fold_read_summaries_locked() RETURNS bigint
    LANGUAGE plpgsql AS $$
DECLARE
    folded bigint;
    left_keys text[];
BEGIN
    WITH gone AS (
        DELETE FROM wl_unit_changes RETURNING 1
    ), units AS (
        INSERT INTO wl_unit_tallies AS t
        SELECT * FROM wl_pending_unit_tallies
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
        SELECT * FROM wl_pending_rework_tallies
        ORDER BY domain
        ON CONFLICT ON CONSTRAINT rework_tallies_key DO UPDATE
        SET superseded_attempts = t.superseded_attempts + excluded.superseded_attempts,
            released_attempts = t.released_attempts + excluded.released_attempts
    ), days AS (
        INSERT INTO wl_rework_days AS t
        SELECT * FROM wl_pending_rework_days
        ORDER BY domain, day
        ON CONFLICT ON CONSTRAINT rework_days_key DO UPDATE
        SET attempted_units = t.attempted_units + excluded.attempted_units,
            reworked_units = t.reworked_units + excluded.reworked_units,
            attempts = t.attempts + excluded.attempts,
            superseded_attempts = t.superseded_attempts + excluded.superseded_attempts,
            released_attempts = t.released_attempts + excluded.released_attempts
    ), links AS (
        INSERT INTO wl_disposed_links AS l
        SELECT * FROM wl_pending_links
        ORDER BY disposition, domain, link
        ON CONFLICT ON CONSTRAINT disposed_links_key DO UPDATE SET units = l.units + excluded.units
    ), link_counts AS (
        INSERT INTO wl_link_tallies AS t
        SELECT * FROM wl_pending_link_tallies WHERE links <> 0
        ORDER BY disposition, domain
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
    ), daily AS (
        -- The course (0023): each day's disposals, and each day's peak of the live count
        -- run forward through the change rows from the folded count (before this fold
        -- adds to it: the same snapshot).
        INSERT INTO wl_daily_tallies AS t (day, domain, migrated, dropped, deferred, dead,
                                           peak_live)
        SELECT day, domain, sum(migrated), sum(dropped), sum(deferred), sum(dead),
               max(peak_live)
        FROM (SELECT day, domain, migrated, dropped, deferred, dead, NULL::bigint AS peak_live
              FROM wl_pending_daily_disposed
              UNION ALL
              SELECT day, domain, 0, 0, 0, 0, peak_live FROM wl_pending_peaks) AS x
        GROUP BY day, domain
        ORDER BY day, domain
        ON CONFLICT ON CONSTRAINT daily_tallies_key DO UPDATE
        SET migrated = t.migrated + excluded.migrated, dropped = t.dropped + excluded.dropped,
            deferred = t.deferred + excluded.deferred, dead = t.dead + excluded.dead,
            peak_live = greatest(t.peak_live, excluded.peak_live)
        -- An idle fold (every second) rewrites nothing: today's live count is no news.
        WHERE (excluded.migrated, excluded.dropped, excluded.deferred, excluded.dead)
              <> (0, 0, 0, 0)
           OR excluded.peak_live > coalesce(t.peak_live, -1)
    )
    SELECT (SELECT count(*) FROM gone),
           (SELECT array_agg(DISTINCT format('%s/%s/%s', c.old_domain, c.old_state,
                                              c.old_disposition))
            FROM wl_unit_changes AS c
            WHERE c.old_disposed_at IS NOT NULL
              AND (c.old_domain, c.old_state, c.old_disposition)
                  IS DISTINCT FROM (c.new_domain, c.new_state, c.new_disposition))
    INTO folded, left_keys;
    -- The day notes, in a statement of their own (the one above upserts wl_daily_tallies
    -- too, and one statement may not touch a row twice). The agents are a set, not a sum:
    -- those of the notes and the running attempts' today (wl_running_agents_today) that
    -- the day has not counted yet.
    WITH notes AS (
        DELETE FROM wl_day_notes RETURNING 1
    ), agents AS (
        INSERT INTO wl_daily_agents
        SELECT DISTINCT n.day, s.domain, n.agent_id
        FROM (SELECT day, domain, agent_id FROM wl_day_notes WHERE agent_id IS NOT NULL
              UNION ALL
              SELECT day, domain, agent_id FROM wl_running_agents_today) AS n
        CROSS JOIN LATERAL (VALUES (n.domain), ('(all)')) AS s (domain)
        ORDER BY 1, 2, 3
        ON CONFLICT ON CONSTRAINT daily_agents_key DO NOTHING
        RETURNING day, domain
    )
    INSERT INTO wl_daily_tallies AS t (day, domain, verified, split, failed, abandoned,
                                       superseded, cost_cents, estimated_cents, agents)
    SELECT day, domain, sum(verified), sum(split), sum(failed), sum(abandoned),
           sum(superseded), sum(cost_cents), sum(estimated_cents), sum(agents)
    FROM (SELECT day, domain, verified, split, failed, abandoned, superseded, cost_cents,
                 estimated_cents, 0 AS agents
          FROM wl_pending_day_notes
          UNION ALL
          SELECT day, domain, 0, 0, 0, 0, 0, 0, 0, count(*) FROM agents GROUP BY day, domain) AS x
    GROUP BY day, domain
    ORDER BY day, domain
    ON CONFLICT ON CONSTRAINT daily_tallies_key DO UPDATE
    SET verified = t.verified + excluded.verified, split = t.split + excluded.split,
        failed = t.failed + excluded.failed, abandoned = t.abandoned + excluded.abandoned,
        superseded = t.superseded + excluded.superseded,
        cost_cents = t.cost_cents + excluded.cost_cents,
        estimated_cents = t.estimated_cents + excluded.estimated_cents,
        agents = t.agents + excluded.agents;
    -- The cost notes: the model tallies, and the units new to a (key, model).
    WITH notes AS (
        DELETE FROM wl_cost_notes RETURNING 1
    ), model_units AS (
        INSERT INTO wl_model_units
        SELECT DISTINCT fleet, domain, model, unit_id FROM wl_pending_cost_records
        WHERE new_unit
        ORDER BY 1, 2, 3, 4
    )
    INSERT INTO wl_model_tallies AS t
    SELECT * FROM wl_pending_model_tallies
    ORDER BY fleet, domain, model
    ON CONFLICT ON CONSTRAINT model_tallies_key DO UPDATE
    SET cost_cents = t.cost_cents + excluded.cost_cents,
        estimated_cents = t.estimated_cents + excluded.estimated_cents,
        estimated_records = t.estimated_records + excluded.estimated_records,
        input_tokens = t.input_tokens + excluded.input_tokens,
        input_records = t.input_records + excluded.input_records,
        output_tokens = t.output_tokens + excluded.output_tokens,
        output_records = t.output_records + excluded.output_records,
        cache_read_tokens = t.cache_read_tokens + excluded.cache_read_tokens,
        cache_read_records = t.cache_read_records + excluded.cache_read_records,
        cache_write_tokens = t.cache_write_tokens + excluded.cache_write_tokens,
        cache_write_records = t.cache_write_records + excluded.cache_write_records,
        records = t.records + excluded.records,
        units = t.units + excluded.units;
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

-- ---------------------------------------------------------------------------------------
-- The rebuild: every summary from the tables, writers and the fold held off meanwhile
-- (SHARE lets readers on). For a bulk load with triggers off, or a repair the audit asked
-- for. Peaks are not in the tables: the days already counted keep theirs, the others stay
-- null (a bulk load's days).
DROP FUNCTION wl_rebuild_read_summaries_0014();
DROP FUNCTION wl_rebuild_read_summaries_0012();
CREATE OR REPLACE FUNCTION wl_rebuild_read_summaries() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE work_units, work_unit_attempts, cost_records IN SHARE MODE;
    PERFORM pg_advisory_xact_lock(hashtext('wl_fold_read_summaries'));
    TRUNCATE wl_unit_changes, wl_day_notes, wl_cost_notes, wl_unit_tallies, wl_rework_tallies,
             wl_rework_days, wl_disposed_links, wl_link_tallies, wl_model_tallies,
             wl_model_units, wl_unit_ranks, wl_daily_agents;
    INSERT INTO wl_unit_tallies SELECT * FROM wl_unit_tallies_scan;
    INSERT INTO wl_rework_tallies SELECT * FROM wl_rework_tallies_scan;
    INSERT INTO wl_rework_days SELECT * FROM wl_rework_days_scan;
    INSERT INTO wl_disposed_links SELECT * FROM wl_disposed_links_scan;
    INSERT INTO wl_link_tallies
    SELECT disposition, domain, count(*) FROM wl_disposed_links GROUP BY disposition, domain;
    INSERT INTO wl_model_tallies SELECT * FROM wl_model_tallies_scan;
    INSERT INTO wl_model_units
    SELECT DISTINCT u.fleet, u.domain, r.model, r.unit_id
    FROM cost_records AS r JOIN work_units AS u ON u.id = r.unit_id;
    INSERT INTO wl_unit_ranks
    SELECT id, domain, external_ref, cost_cents, attempt_count FROM work_units
    WHERE cost_cents > 0 OR attempt_count > 1;
    DELETE FROM wl_daily_tallies WHERE peak_live IS NULL;
    UPDATE wl_daily_tallies
    SET migrated = 0, dropped = 0, deferred = 0, dead = 0, verified = 0, split = 0, failed = 0,
        abandoned = 0, superseded = 0, cost_cents = 0, estimated_cents = 0, agents = 0;
    INSERT INTO wl_daily_agents
    SELECT DISTINCT d::date, s.domain, a.agent_id
    FROM work_unit_attempts AS a
    JOIN work_units AS u ON u.id = a.unit_id
    CROSS JOIN generate_series(wl_utc_day(a.started_at)::timestamp,
                               wl_utc_day(coalesce(a.ended_at, now()))::timestamp,
                               interval '1 day') AS d
    CROSS JOIN LATERAL (VALUES (u.domain), ('(all)')) AS s (domain);
    INSERT INTO wl_daily_tallies AS t
    SELECT day, domain, migrated, dropped, deferred, dead, verified, split, failed, abandoned,
           superseded, cost_cents, estimated_cents, agents, NULL
    FROM wl_daily_scan()
    ON CONFLICT ON CONSTRAINT daily_tallies_key DO UPDATE
    SET migrated = excluded.migrated, dropped = excluded.dropped, deferred = excluded.deferred,
        dead = excluded.dead, verified = excluded.verified, split = excluded.split,
        failed = excluded.failed, abandoned = excluded.abandoned,
        superseded = excluded.superseded, cost_cents = excluded.cost_cents,
        estimated_cents = excluded.estimated_cents, agents = excluded.agents;
    ANALYZE wl_unit_tallies, wl_rework_tallies, wl_rework_days, wl_disposed_links,
            wl_link_tallies, wl_model_tallies, wl_model_units, wl_unit_ranks, wl_unit_changes,
            wl_daily_tallies, wl_daily_agents, wl_day_notes, wl_cost_notes;
END $$;

-- The audit: each summary as the views read it (folded plus pending) against a full scan
-- of the tables, in one snapshot; one row per differing key (empty when every summary is
-- exact). Run by `work-ledger audit`.
DROP FUNCTION wl_read_summary_drift_0014();
DROP FUNCTION wl_read_summary_drift_0012();
DROP FUNCTION wl_read_summary_drift_0017();
CREATE OR REPLACE FUNCTION wl_read_summary_drift()
    RETURNS TABLE (summary text, key text, kept text, actual text)
    LANGUAGE sql STABLE AS $$
    WITH kept_units AS (
        SELECT domain, state, disposition, sum(units)::bigint AS units,
               sum(attempted_units)::bigint AS attempted_units,
               sum(reworked_units)::bigint AS reworked_units, sum(attempts)::bigint AS attempts,
               sum(cost_cents)::bigint AS cost_cents,
               sum(units_without_evidence)::bigint AS units_without_evidence,
               min(first_disposed_at) AS first_disposed_at, max(last_disposed_at) AS last_disposed_at
        FROM wl_unit_tallies_now GROUP BY domain, state, disposition HAVING sum(units) <> 0
            OR sum(attempts) <> 0 OR sum(cost_cents) <> 0
    ), kept_rework AS (
        SELECT domain, sum(superseded_attempts)::bigint AS superseded_attempts,
               sum(released_attempts)::bigint AS released_attempts
        FROM wl_rework_tallies_now GROUP BY domain
        HAVING sum(superseded_attempts) <> 0 OR sum(released_attempts) <> 0
    ), kept_days AS (
        SELECT domain, day, sum(attempted_units)::bigint AS attempted_units,
               sum(reworked_units)::bigint AS reworked_units, sum(attempts)::bigint AS attempts,
               sum(superseded_attempts)::bigint AS superseded_attempts,
               sum(released_attempts)::bigint AS released_attempts
        FROM wl_rework_days_now GROUP BY domain, day HAVING sum(attempted_units) <> 0
            OR sum(attempts) <> 0
    ), kept_link_counts AS (
        SELECT disposition, domain, sum(links)::bigint AS links
        FROM wl_link_tallies_now GROUP BY disposition, domain HAVING sum(links) <> 0
    ), actual_link_counts AS (
        SELECT disposition, domain, count(*) AS links FROM wl_disposed_links_scan
        GROUP BY disposition, domain
    ), kept_models AS (
        SELECT fleet, domain, model,
               ARRAY[sum(cost_cents), sum(estimated_cents), sum(estimated_records),
                     sum(input_tokens), sum(input_records), sum(output_tokens),
                     sum(output_records), sum(cache_read_tokens), sum(cache_read_records),
                     sum(cache_write_tokens), sum(cache_write_records), sum(records),
                     sum(units)]::bigint[] AS sums
        FROM wl_model_tallies_now GROUP BY fleet, domain, model
        HAVING sum(records) <> 0 OR sum(cost_cents) <> 0 OR sum(units) <> 0
    ), actual_models AS (
        SELECT fleet, domain, model,
               ARRAY[cost_cents, estimated_cents, estimated_records, input_tokens,
                     input_records, output_tokens, output_records, cache_read_tokens,
                     cache_read_records, cache_write_tokens, cache_write_records, records,
                     units] AS sums
        FROM wl_model_tallies_scan
    )
    SELECT 'wl_unit_tallies', format('%s/%s/%s', coalesce(k.domain, a.domain),
                                     coalesce(k.state, a.state), coalesce(k.disposition, a.disposition)),
           (k.units, k.attempted_units, k.reworked_units, k.attempts, k.cost_cents,
            k.units_without_evidence, k.first_disposed_at, k.last_disposed_at)::text,
           (a.units, a.attempted_units, a.reworked_units, a.attempts, a.cost_cents,
            a.units_without_evidence, a.first_disposed_at, a.last_disposed_at)::text
    FROM kept_units AS k
    FULL JOIN wl_unit_tallies_scan AS a
           ON (a.domain, a.state) = (k.domain, k.state)
          AND a.disposition IS NOT DISTINCT FROM k.disposition
    WHERE (k.units, k.attempted_units, k.reworked_units, k.attempts, k.cost_cents,
           k.units_without_evidence, k.first_disposed_at, k.last_disposed_at)
          IS DISTINCT FROM (a.units, a.attempted_units, a.reworked_units, a.attempts, a.cost_cents,
                            a.units_without_evidence, a.first_disposed_at, a.last_disposed_at)
    UNION ALL
    SELECT 'wl_rework_tallies', coalesce(k.domain, a.domain),
           (k.superseded_attempts, k.released_attempts)::text,
           (a.superseded_attempts, a.released_attempts)::text
    FROM kept_rework AS k
    FULL JOIN (SELECT * FROM wl_rework_tallies_scan
               WHERE superseded_attempts <> 0 OR released_attempts <> 0) AS a
           ON a.domain = k.domain
    WHERE (k.superseded_attempts, k.released_attempts)
          IS DISTINCT FROM (a.superseded_attempts, a.released_attempts)
    UNION ALL
    SELECT 'wl_rework_days', format('%s/%s', coalesce(k.domain, a.domain), coalesce(k.day, a.day)),
           (k.attempted_units, k.reworked_units, k.attempts, k.superseded_attempts,
            k.released_attempts)::text,
           (a.attempted_units, a.reworked_units, a.attempts, a.superseded_attempts,
            a.released_attempts)::text
    FROM kept_days AS k
    FULL JOIN wl_rework_days_scan AS a ON (a.domain, a.day) = (k.domain, k.day)
    WHERE (k.attempted_units, k.reworked_units, k.attempts, k.superseded_attempts,
           k.released_attempts)
          IS DISTINCT FROM (a.attempted_units, a.reworked_units, a.attempts,
                            a.superseded_attempts, a.released_attempts)
    UNION ALL
    SELECT 'wl_disposed_links',
           format('%s/%s/%s', coalesce(k.disposition, a.disposition), coalesce(k.domain, a.domain),
                  coalesce(k.link, a.link)),
           k.units::text, a.units::text
    FROM wl_disposed_links_now AS k
    FULL JOIN wl_disposed_links_scan AS a
           ON (a.disposition, a.domain, a.link) = (k.disposition, k.domain, k.link)
    WHERE k.units IS DISTINCT FROM a.units
    UNION ALL
    SELECT 'wl_link_tallies', format('%s/%s', coalesce(k.disposition, a.disposition),
                                     coalesce(k.domain, a.domain)),
           k.links::text, a.links::text
    FROM kept_link_counts AS k
    FULL JOIN actual_link_counts AS a ON (a.disposition, a.domain) = (k.disposition, k.domain)
    WHERE k.links IS DISTINCT FROM a.links
    UNION ALL
    SELECT 'wl_model_tallies', format('%s/%s/%s', coalesce(k.fleet, a.fleet),
                                      coalesce(k.domain, a.domain), coalesce(k.model, a.model)),
           k.sums::text, a.sums::text
    FROM kept_models AS k
    FULL JOIN actual_models AS a
           ON (a.fleet, a.domain) = (k.fleet, k.domain) AND a.model IS NOT DISTINCT FROM k.model
    WHERE k.sums IS DISTINCT FROM a.sums
    UNION ALL
    SELECT * FROM wl_unit_ranks_drift()
    UNION ALL
    SELECT * FROM wl_daily_drift()
$$;

-- ---------------------------------------------------------------------------------------
-- The views dropped above, as 0017, 0023 and 0026 defined them (the same columns).
CREATE VIEW v_queue_depth WITH (security_barrier) AS
WITH depth AS (
    SELECT CASE WHEN grouping(domain) = 1 THEN 'total' ELSE 'domain' END AS scope,
           CASE WHEN grouping(domain) = 1 THEN '(all)' ELSE domain END AS domain,
           coalesce(sum(units) FILTER (WHERE state = 'ready'), 0)::bigint AS ready,
           coalesce(sum(units) FILTER (WHERE state = 'claimed'), 0)::bigint AS claimed,
           coalesce(sum(units) FILTER (WHERE state = 'in_progress'), 0)::bigint AS in_progress,
           coalesce(sum(units) FILTER (WHERE state = 'blocked'), 0)::bigint AS blocked,
           coalesce(sum(units) FILTER (WHERE state = 'verified'), 0)::bigint AS verified,
           coalesce(sum(units) FILTER (WHERE state = 'done'), 0)::bigint AS done,
           coalesce(sum(units) FILTER (WHERE state = 'abandoned'), 0)::bigint AS abandoned,
           coalesce(sum(units) FILTER (WHERE state NOT IN ('done', 'abandoned')), 0)::bigint
               AS open,
           coalesce(sum(units), 0)::bigint AS units,
           coalesce(sum(units) FILTER (WHERE state = 'waiting'), 0)::bigint AS waiting,
           grouping(domain) AS total
    FROM wl_unit_tallies_now
    GROUP BY GROUPING SETS ((domain), ())
    HAVING grouping(domain) = 1 OR sum(units) <> 0
)
SELECT d.scope, d.domain, d.ready, d.claimed, d.in_progress, d.blocked, d.verified, d.done,
       d.abandoned, d.open, d.units, d.waiting,
       d.claimed + d.in_progress AS live,
       (SELECT min(c.max_live) FROM controls AS c
        WHERE d.total = 0 AND c.domain = d.domain) AS max_live,
       coalesce((SELECT array_agg(c.fleet || coalesce('/' || c.domain, '')
                                  ORDER BY c.fleet, c.domain NULLS FIRST)
                 FROM controls AS c
                 WHERE c.paused AND (d.total = 1 OR c.domain = d.domain)),
                '{}') AS paused
FROM depth AS d
ORDER BY d.total, d.domain;
CREATE VIEW v_cost_per_unit WITH (security_barrier) AS
SELECT 'unit'::text AS scope, u.domain, u.id AS unit_id, u.external_ref, u.state,
       u.disposition, u.disposed_at,
       1::bigint AS units,
       u.attempt_count::bigint AS attempts,
       u.cost_cents,
       (u.disposition IS NOT DISTINCT FROM 'MIGRATED')::integer::bigint AS merged_units,
       CASE WHEN u.disposition = 'MIGRATED' THEN u.cost_cents ELSE 0 END AS merged_cost_cents,
       u.cost_cents::numeric AS cost_per_unit_cents,
       CASE WHEN u.disposition = 'MIGRATED' THEN u.cost_cents::numeric END
           AS cost_per_merged_unit_cents,
       CASE WHEN u.disposition = 'MIGRATED' THEN u.cost_cents::numeric END
           AS spend_per_merged_unit_cents
FROM work_units AS u
UNION ALL
SELECT g.scope, g.domain, NULL, NULL, NULL, NULL, NULL,
       g.units, g.attempts, g.cost_cents, g.merged_units, g.merged_cost_cents,
       round(g.cost_cents::numeric / nullif(g.units, 0), 2),
       round(g.merged_cost_cents::numeric / nullif(g.merged_units, 0), 2),
       round(g.cost_cents::numeric / nullif(g.merged_units, 0), 2)
FROM (
    SELECT CASE WHEN grouping(domain) = 1 THEN 'total' ELSE 'domain' END AS scope,
           CASE WHEN grouping(domain) = 1 THEN '(all)' ELSE domain END AS domain,
           coalesce(sum(units), 0)::bigint AS units,
           coalesce(sum(attempts), 0)::bigint AS attempts,
           coalesce(sum(cost_cents), 0)::bigint AS cost_cents,
           coalesce(sum(units) FILTER (WHERE disposition = 'MIGRATED'), 0)::bigint AS merged_units,
           coalesce(sum(cost_cents) FILTER (WHERE disposition = 'MIGRATED'), 0)::bigint
               AS merged_cost_cents
    FROM wl_unit_tallies_now
    GROUP BY GROUPING SETS ((domain), ())
    HAVING grouping(domain) = 1 OR sum(units) <> 0
) AS g;
CREATE VIEW v_rework WITH (security_barrier) AS
SELECT 'unit'::text AS scope, u.domain, date_trunc('day', u.disposed_at, 'UTC') AS day,
       u.id AS unit_id, u.external_ref, u.state, u.disposition,
       1::bigint AS attempted_units, 1::bigint AS reworked_units,
       u.attempt_count::bigint AS attempts, u.attempt_count::bigint - 1 AS extra_attempts,
       (SELECT count(*) FROM work_unit_attempts AS a
        WHERE a.unit_id = u.id AND a.attempt_no < u.attempt_count AND a.outcome = 'superseded')
           AS superseded_attempts,
       (SELECT count(*) FROM work_unit_attempts AS a
        WHERE a.unit_id = u.id AND a.attempt_no < u.attempt_count
          AND a.outcome IN ('failed', 'abandoned')) AS released_attempts,
       1.0000 AS rework_rate
FROM work_units AS u
WHERE u.attempt_count > 1
UNION ALL
SELECT g.scope, g.domain, NULL, NULL, NULL, NULL, NULL,
       g.attempted_units, g.reworked_units, g.attempts, g.attempts - g.attempted_units,
       coalesce(r.superseded_attempts, 0)::bigint, coalesce(r.released_attempts, 0)::bigint,
       round(g.reworked_units::numeric / nullif(g.attempted_units, 0), 4)
FROM (
    SELECT CASE WHEN grouping(domain) = 1 THEN 'total' ELSE 'domain' END AS scope,
           CASE WHEN grouping(domain) = 1 THEN '(all)' ELSE domain END AS domain,
           coalesce(sum(attempted_units), 0)::bigint AS attempted_units,
           coalesce(sum(reworked_units), 0)::bigint AS reworked_units,
           coalesce(sum(attempts), 0)::bigint AS attempts
    FROM wl_unit_tallies_now
    GROUP BY GROUPING SETS ((domain), ())
    HAVING grouping(domain) = 1 OR sum(attempted_units) <> 0
) AS g
LEFT JOIN (
    SELECT CASE WHEN grouping(domain) = 1 THEN '(all)' ELSE domain END AS domain,
           grouping(domain) AS all_domains,
           sum(superseded_attempts) AS superseded_attempts,
           sum(released_attempts) AS released_attempts
    FROM wl_rework_tallies_now
    GROUP BY GROUPING SETS ((domain), ())
) AS r ON r.domain = g.domain AND r.all_domains = (g.scope = 'total')::integer
UNION ALL
SELECT 'day', domain, day, NULL, NULL, NULL, NULL,
       sum(attempted_units)::bigint, sum(reworked_units)::bigint, sum(attempts)::bigint,
       (sum(attempts) - sum(attempted_units))::bigint,
       sum(superseded_attempts)::bigint, sum(released_attempts)::bigint,
       round(sum(reworked_units) / nullif(sum(attempted_units), 0), 4)
FROM wl_rework_days_now
GROUP BY domain, day
HAVING sum(attempted_units) <> 0;

CREATE VIEW v_disposition_summary WITH (security_barrier) AS
WITH per_domain AS (
    SELECT 'domain'::text AS scope, disposition, domain,
           sum(units)::bigint AS units, sum(attempts)::bigint AS attempts,
           sum(cost_cents)::bigint AS cost_cents,
           sum(units_without_evidence)::bigint AS units_without_evidence,
           min(first_disposed_at) AS first_disposed_at, max(last_disposed_at) AS last_disposed_at
    FROM wl_unit_tallies_now
    WHERE disposition IS NOT NULL
    GROUP BY disposition, domain
    HAVING sum(units) <> 0
), per_disposition AS (
    SELECT 'total'::text AS scope, k.disposition, '(all)'::text AS domain,
           coalesce(sum(d.units), 0)::bigint AS units,
           coalesce(sum(d.attempts), 0)::bigint AS attempts,
           coalesce(sum(d.cost_cents), 0)::bigint AS cost_cents,
           coalesce(sum(d.units_without_evidence), 0)::bigint AS units_without_evidence,
           min(d.first_disposed_at) AS first_disposed_at,
           max(d.last_disposed_at) AS last_disposed_at
    FROM unnest(enum_range(NULL::work_disposition)) AS k (disposition)
    LEFT JOIN per_domain AS d ON d.disposition = k.disposition
    GROUP BY k.disposition
)
SELECT s.scope, s.disposition, s.domain, s.units, s.attempts, s.cost_cents,
       round(s.cost_cents::numeric / nullif(s.units, 0), 2) AS cost_per_unit_cents,
       s.units_without_evidence,
       -- The first 20 links of the folded ones and the pending ones together: at most
       -- as many folded links as pending rows take away can drop out of the first 20.
       ARRAY(SELECT x.link
             FROM (SELECT f.link, f.units
                   FROM (SELECT l.link, l.units FROM wl_disposed_links AS l
                         WHERE l.disposition = s.disposition AND l.domain = s.domain
                         ORDER BY l.link
                         LIMIT 20 + (SELECT count(*) FROM wl_pending_links AS p
                                     WHERE p.disposition = s.disposition
                                       AND p.domain = s.domain AND p.delta < 0)) AS f
                   UNION ALL
                   SELECT p.link, p.delta FROM wl_pending_links AS p
                   WHERE p.disposition = s.disposition AND p.domain = s.domain) AS x
             GROUP BY x.link HAVING sum(x.units) > 0
             ORDER BY x.link LIMIT 20) AS evidence_urls,
       coalesce((SELECT sum(c.links) FROM wl_link_tallies_now AS c
                 WHERE c.disposition = s.disposition AND c.domain = s.domain), 0)::integer
           AS evidence_url_count,
       s.first_disposed_at, s.last_disposed_at
FROM (SELECT * FROM per_domain UNION ALL SELECT * FROM per_disposition) AS s;

CREATE VIEW v_stall_counts WITH (security_barrier) AS
WITH threshold AS (
    SELECT now() - make_interval(secs => (SELECT stall_seconds FROM wl_settings)) AS at
), leased AS (
    SELECT domain, sum(units) AS units FROM wl_unit_tallies_now
    WHERE state IN ('claimed', 'in_progress')
    GROUP BY domain
), heard AS (
    SELECT u.domain, count(*) AS units FROM work_units AS u
    WHERE u.state IN ('claimed', 'in_progress')
      AND u.last_heartbeat_at >= (SELECT at FROM threshold)
    GROUP BY u.domain
), unheard AS (
    SELECT u.domain, count(*) AS units FROM work_units AS u
    WHERE u.state IN ('claimed', 'in_progress') AND u.last_heartbeat_at IS NULL
    GROUP BY u.domain
)
SELECT l.domain,
       (l.units - coalesce(h.units, 0) - coalesce(n.units, 0))::bigint AS stalled_units
FROM leased AS l
LEFT JOIN heard AS h ON h.domain = l.domain
LEFT JOIN unheard AS n ON n.domain = l.domain
WHERE l.units - coalesce(h.units, 0) - coalesce(n.units, 0) > 0
  AND (SELECT at FROM threshold) IS NOT NULL;

CREATE VIEW v_forecast WITH (security_barrier) AS
WITH today AS (
    SELECT wl_utc_day(now()) AS d
), per_domain AS (
    SELECT domain, sum(units) FILTER (WHERE state NOT IN ('done', 'abandoned')) AS open_units,
           min(first_disposed_at) AS first_disposed_at
    FROM wl_unit_tallies_now GROUP BY domain HAVING sum(units) <> 0
), scopes AS (
    SELECT domain, coalesce(open_units, 0)::bigint AS open_units,
           wl_utc_day(first_disposed_at) AS first_day
    FROM per_domain
    UNION ALL
    SELECT '(all)', coalesce(sum(open_units), 0)::bigint, wl_utc_day(min(first_disposed_at))
    FROM per_domain
), window_days AS (
    -- The kept days of the window only: a range of the key.
    SELECT t.day, t.domain, sum(t.migrated + t.dropped + t.deferred + t.dead) AS disposed,
           sum(t.cost_cents) AS cost_cents
    FROM wl_daily_tallies_now AS t, today
    WHERE t.day >= today.d - 28 AND t.day < today.d AND t.domain <> '(all)'
    GROUP BY t.day, t.domain
), windowed AS (
    SELECT day, domain, disposed, cost_cents FROM window_days
    UNION ALL
    SELECT day, '(all)', sum(disposed), sum(cost_cents) FROM window_days GROUP BY day
), series AS (
    SELECT s.domain, g.day::date AS day, coalesce(w.disposed, 0) AS disposed,
           coalesce(w.cost_cents, 0) AS cost_cents
    FROM scopes AS s
    CROSS JOIN today
    CROSS JOIN LATERAL generate_series(greatest(today.d - 28, s.first_day)::timestamp,
                                       (today.d - 1)::timestamp, interval '1 day') AS g (day)
    LEFT JOIN windowed AS w ON (w.domain, w.day) = (s.domain, g.day::date)
), stats AS (
    SELECT domain, count(*) AS history_days,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY disposed) AS p50,
           percentile_cont(0.15) WITHIN GROUP (ORDER BY disposed) AS p15,
           sum(disposed) AS disposed, sum(cost_cents) AS cost_cents,
           sum(disposed) FILTER (WHERE day >= (SELECT d FROM today) - 7) AS disposed_7d
    FROM series GROUP BY domain
), figures AS (
    SELECT s.domain, s.open_units, s.first_day, (SELECT d FROM today) AS today,
           coalesce(x.history_days, 0) AS history_days,
           coalesce(x.disposed_7d, 0) AS disposed_7d, coalesce(x.disposed, 0) AS disposed_28d,
           coalesce(x.cost_cents, 0) AS cost_28d, x.p50, x.p15,
           coalesce(x.history_days, 0) >= 7 AS enough
    FROM scopes AS s LEFT JOIN stats AS x USING (domain)
), days AS (
    SELECT f.*,
           CASE WHEN enough AND p50 > 0 THEN ceil(open_units / p50)::integer END AS days_p50,
           CASE WHEN enough AND p15 > 0 THEN ceil(open_units / p15)::integer END AS days_p85
    FROM figures AS f
)
SELECT domain, open_units,
       round(disposed_7d / 7.0, 2) AS disposed_per_day_7d,
       round(disposed_28d / 28.0, 2) AS disposed_per_day_28d,
       disposed_7d::bigint AS disposed_7d, disposed_28d::bigint AS disposed_28d,
       cost_28d::bigint AS cost_28d_cents, history_days::integer AS history_days,
       CASE WHEN enough THEN p50 END AS p50_per_day,
       CASE WHEN enough THEN p15 END AS p15_per_day,
       days_p50, days_p85,
       today + days_p50 AS date_p50, today + days_p85 AS date_p85,
       CASE WHEN enough AND disposed_28d > 0
            THEN ceil(open_units * cost_28d::numeric / disposed_28d)::bigint END
           AS spend_p50_cents,
       CASE
           WHEN first_day IS NULL THEN
               'no unit disposed yet: the forecast needs 7 days of history from the first disposal'
           WHEN NOT enough THEN
               format('%s of 7 days of history since the first disposal on %s: %s more needed',
                      history_days, first_day, 7 - history_days)
           WHEN p50 = 0 THEN
               format('the median day of the last %s disposed nothing: no date at this pace',
                      history_days)
           WHEN p15 = 0 THEN
               format('the 15th percentile day of the last %s disposed nothing: no P85 date',
                      history_days)
           WHEN history_days < 28 THEN
               format('the %s days since the first disposal on %s', history_days, first_day)
           ELSE 'the last 28 days'
       END AS basis
FROM days;

DO $$
DECLARE
    kept record;
    reader text;
BEGIN
    FOR kept IN SELECT * FROM wl_0027_kept_views LOOP
        EXECUTE format('COMMENT ON VIEW %I IS %L', kept.view_name, kept.comment);
        FOREACH reader IN ARRAY kept.readers LOOP
            PERFORM wl_grant_views(reader, ARRAY[kept.view_name]);
        END LOOP;
    END LOOP;
END $$;
DROP TABLE wl_0027_kept_views;

SELECT wl_rebuild_read_summaries();
