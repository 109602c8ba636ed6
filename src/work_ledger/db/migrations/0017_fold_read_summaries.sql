-- The read summaries off the write path (issue 32): 0012's row trigger upserted one to five
-- tally rows in every statement that changed a unit (a fifth more PostgreSQL CPU per
-- unit's life, a fifth fewer lives per second at 64 agents). Now the trigger appends one
-- row per changed unit to wl_unit_changes (an insert, no index, no hot row), and
-- wl_fold_read_summaries() folds those rows into the tallies, set-based, on a schedule
-- (`serve` once a second when 1,000 change rows wait, and at least every 10 seconds).
--
-- Exactness: the views read the folded tallies plus the rows not yet folded (the wl_pending_*
-- views below: a few thousand rows at most between two folds), so every read is what the
-- tables say, whenever the last fold ran. The fold is one statement: it deletes the change
-- rows its snapshot sees and adds exactly those to the tallies, so no reader's snapshot
-- sees a change row both folded and pending, and a change that commits late (a lower
-- position committing after a higher one) is simply still in the table for the next fold:
-- no watermark to skip it.
--
-- Also kept by the fold: wl_unit_ranks, each unit's cost and attempts with indexes, so the
-- report's costliest and most-attempted units read 20 index entries (plus the pending
-- units) instead of sorting every unit; an index on work_units.cost_cents would have cost
-- the write path the HOT update of record_cost.

CREATE TABLE wl_unit_changes (
    unit_id         uuid NOT NULL,
    old_domain      text,
    old_state       work_state,
    old_disposition work_disposition,
    old_attempts    integer,
    old_cost_cents  bigint,
    old_no_evidence boolean,
    old_links       text[],
    old_disposed_at timestamptz,
    new_domain      text NOT NULL,
    new_state       work_state NOT NULL,
    new_disposition work_disposition,
    new_attempts    integer NOT NULL,
    new_cost_cents  bigint NOT NULL,
    new_no_evidence boolean NOT NULL,
    new_links       text[],
    new_disposed_at timestamptz
);
COMMENT ON TABLE wl_unit_changes IS
    'Appended by trigger, one row per unit change that moves a tally (old and new values; '
    'links only of disposed rows), deleted as wl_fold_read_summaries() folds them into the '
    'tallies. The views add the rows still here to the folded tallies.';

CREATE FUNCTION wl_note_unit_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wl_unit_changes
    VALUES (NEW.id, OLD.domain, OLD.state, OLD.disposition, OLD.attempt_count, OLD.cost_cents,
            cardinality(OLD.evidence_urls) = 0,
            CASE WHEN OLD.disposition IS NOT NULL THEN OLD.evidence_urls END, OLD.disposed_at,
            NEW.domain, NEW.state, NEW.disposition, NEW.attempt_count, NEW.cost_cents,
            cardinality(NEW.evidence_urls) = 0,
            CASE WHEN NEW.disposition IS NOT NULL THEN NEW.evidence_urls END, NEW.disposed_at);
    RETURN NULL;
END $$;

CREATE FUNCTION wl_note_units_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wl_unit_changes
    SELECT n.id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           n.domain, n.state, n.disposition, n.attempt_count, n.cost_cents,
           cardinality(n.evidence_urls) = 0,
           CASE WHEN n.disposition IS NOT NULL THEN n.evidence_urls END, n.disposed_at
    FROM new_units AS n;
    RETURN NULL;
END $$;

DROP TRIGGER read_summaries_on_update ON work_units;
DROP TRIGGER read_summaries_on_insert ON work_units;
DROP FUNCTION wl_tally_unit();
DROP FUNCTION wl_tally_units_inserted();
CREATE TRIGGER read_summaries_on_insert
    AFTER INSERT ON work_units REFERENCING NEW TABLE AS new_units
    FOR EACH STATEMENT EXECUTE FUNCTION wl_note_units_inserted();
CREATE TRIGGER read_summaries_on_update
    AFTER UPDATE ON work_units
    FOR EACH ROW
    WHEN ((OLD.domain, OLD.state, OLD.disposition, OLD.attempt_count, OLD.cost_cents,
           OLD.evidence_urls, OLD.disposed_at)
          IS DISTINCT FROM (NEW.domain, NEW.state, NEW.disposition, NEW.attempt_count,
                            NEW.cost_cents, NEW.evidence_urls, NEW.disposed_at))
    EXECUTE FUNCTION wl_note_unit_change();

-- Each change row as the unit's old side (sign -1, absent for a new unit) and new side (+1),
-- with the side's earlier attempts (numbered below its attempt count) by how they ended:
-- an attempt's outcome is final once a later one exists (attempt_outcome_final), so the
-- attempts table as it is now says what both sides count.
CREATE VIEW wl_pending_sides AS
SELECT c.unit_id, s.sign, s.domain, s.state, s.disposition, s.attempts, s.cost_cents,
       s.no_evidence, s.links, s.disposed_at,
       -- Only a side past its first attempt has earlier ones: no lookup for the others.
       CASE WHEN s.attempts > 1 THEN
           (SELECT count(*) FROM work_unit_attempts AS a
            WHERE a.unit_id = c.unit_id AND a.attempt_no < s.attempts
              AND a.outcome = 'superseded') ELSE 0 END AS superseded,
       CASE WHEN s.attempts > 1 THEN
           (SELECT count(*) FROM work_unit_attempts AS a
            WHERE a.unit_id = c.unit_id AND a.attempt_no < s.attempts
              AND a.outcome IN ('failed', 'abandoned')) ELSE 0 END AS released
FROM wl_unit_changes AS c
CROSS JOIN LATERAL (
    VALUES (-1, c.old_domain, c.old_state, c.old_disposition, c.old_attempts, c.old_cost_cents,
            c.old_no_evidence, c.old_links, c.old_disposed_at),
           (1, c.new_domain, c.new_state, c.new_disposition, c.new_attempts, c.new_cost_cents,
            c.new_no_evidence, c.new_links, c.new_disposed_at)
) AS s (sign, domain, state, disposition, attempts, cost_cents, no_evidence, links, disposed_at)
WHERE s.domain IS NOT NULL;

-- What the change rows not yet folded add to each tally, in the tallies' own columns.
CREATE VIEW wl_pending_unit_tallies AS
SELECT domain, state, disposition, 0::smallint AS stripe, sum(sign)::bigint AS units,
       sum(sign * (attempts > 0)::integer)::bigint AS attempted_units,
       sum(sign * (attempts > 1)::integer)::bigint AS reworked_units,
       sum(sign * attempts)::bigint AS attempts, sum(sign * cost_cents)::bigint AS cost_cents,
       sum(sign * no_evidence::integer)::bigint AS units_without_evidence,
       min(disposed_at) FILTER (WHERE sign = 1) AS first_disposed_at,
       max(disposed_at) FILTER (WHERE sign = 1) AS last_disposed_at
FROM wl_pending_sides
GROUP BY domain, state, disposition;

CREATE VIEW wl_pending_rework_tallies AS
SELECT domain, 0::smallint AS stripe, sum(sign * superseded)::bigint AS superseded_attempts,
       sum(sign * released)::bigint AS released_attempts
FROM wl_pending_sides WHERE attempts > 1
GROUP BY domain;

CREATE VIEW wl_pending_rework_days AS
SELECT domain, date_trunc('day', disposed_at, 'UTC') AS day, 0::smallint AS stripe,
       sum(sign)::bigint AS attempted_units,
       sum(sign * (attempts > 1)::integer)::bigint AS reworked_units,
       sum(sign * attempts)::bigint AS attempts,
       sum(sign * superseded)::bigint AS superseded_attempts,
       sum(sign * released)::bigint AS released_attempts
FROM wl_pending_sides WHERE disposed_at IS NOT NULL AND attempts > 0
GROUP BY domain, date_trunc('day', disposed_at, 'UTC');

-- Per disposition, domain (and '(all)') and link: how many units the pending rows add.
CREATE VIEW wl_pending_links AS
SELECT s.disposition, scope.domain, link, sum(s.sign)::bigint AS delta
FROM wl_pending_sides AS s
CROSS JOIN LATERAL unnest(s.links) AS link
CROSS JOIN LATERAL (VALUES (s.domain), ('(all)')) AS scope (domain)
WHERE s.disposition IS NOT NULL
GROUP BY s.disposition, scope.domain, link
HAVING sum(s.sign) <> 0;

-- How the count of distinct links moves: a link new to its key adds one, a link whose
-- units come to 0 takes one away.
CREATE VIEW wl_pending_link_tallies AS
SELECT p.disposition, p.domain, 0::smallint AS stripe,
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

-- Each unit's cost and attempts as of the last fold, for the top-20 lists.
CREATE TABLE wl_unit_ranks (
    unit_id      uuid PRIMARY KEY,
    domain       text NOT NULL,
    external_ref text NOT NULL,
    cost_cents   bigint NOT NULL,
    attempts     integer NOT NULL
);
CREATE INDEX wl_unit_ranks_cost_idx ON wl_unit_ranks (cost_cents DESC, external_ref)
    WHERE cost_cents > 0;
CREATE INDEX wl_unit_ranks_domain_cost_idx ON wl_unit_ranks (domain, cost_cents DESC, external_ref)
    WHERE cost_cents > 0;
CREATE INDEX wl_unit_ranks_attempts_idx ON wl_unit_ranks (attempts DESC, external_ref)
    WHERE attempts > 1;
CREATE INDEX wl_unit_ranks_domain_attempts_idx
    ON wl_unit_ranks (domain, attempts DESC, external_ref) WHERE attempts > 1;

-- The fold: one statement, one snapshot. It deletes the change rows it sees and adds what
-- they say (the pending views, read in the same snapshot) to the tallies; the keys of a
-- disposed unit that left its key (a raw edit) come back so their first and last
-- disposal are looked up again. One fold at a time (a transaction-level advisory lock;
-- a second caller returns 0 at once). Returns how many change rows it folded.
CREATE FUNCTION wl_fold_read_summaries_locked() RETURNS bigint LANGUAGE plpgsql AS $$
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
        INSERT INTO wl_unit_ranks AS r
        SELECT u.id, u.domain, u.external_ref, u.cost_cents, u.attempt_count
        FROM work_units AS u
        -- An array computed first: the units are read by their key, never a scan.
        WHERE u.id = ANY (ARRAY(SELECT DISTINCT unit_id FROM wl_unit_changes))
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
REVOKE EXECUTE ON FUNCTION wl_fold_read_summaries_locked() FROM PUBLIC;

-- min_rows: fold only when at least that many change rows wait (what each fold costs per
-- key it touches is then spread over that many changes); 0: whatever waits.
CREATE FUNCTION wl_fold_read_summaries(min_rows integer DEFAULT 0) RETURNS bigint
    LANGUAGE plpgsql AS $$
BEGIN
    IF min_rows > 0
       AND (SELECT count(*) FROM (SELECT FROM wl_unit_changes LIMIT min_rows) AS w) < min_rows THEN
        RETURN 0;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('wl_fold_read_summaries')) THEN
        RETURN 0;
    END IF;
    RETURN wl_fold_read_summaries_locked();
END $$;
REVOKE EXECUTE ON FUNCTION wl_fold_read_summaries(integer) FROM PUBLIC;

-- A disposed unit leaving its key (dispositions are final: only a raw edit moves its
-- domain) narrows that key's first and last disposal, which pending rows cannot say (they
-- only widen). Such a statement folds at once, in its own transaction (waiting for a fold
-- under way), and the fold looks the key up again. Named to fire after
-- read_summaries_on_update (AFTER triggers fire by name), so this row's change is folded.
CREATE FUNCTION wl_refold_disposed_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('wl_fold_read_summaries'));
    PERFORM wl_fold_read_summaries_locked();
    RETURN NULL;
END $$;
CREATE TRIGGER read_summaries_refold_disposed_move
    AFTER UPDATE ON work_units
    FOR EACH ROW
    WHEN (OLD.disposed_at IS NOT NULL
          AND (OLD.domain, OLD.state, OLD.disposition)
              IS DISTINCT FROM (NEW.domain, NEW.state, NEW.disposition))
    EXECUTE FUNCTION wl_refold_disposed_move();
CREATE INDEX wl_disposed_links_emptied_idx ON wl_disposed_links (disposition) WHERE units = 0;

-- The rebuild empties the change rows too (it counts from the tables, which include them),
-- and fills the ranks; the audit compares folded plus pending with the tables.
ALTER FUNCTION wl_rebuild_read_summaries() RENAME TO wl_rebuild_read_summaries_0014;
CREATE FUNCTION wl_rebuild_read_summaries() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE work_units, work_unit_attempts IN SHARE MODE;
    PERFORM pg_advisory_xact_lock(hashtext('wl_fold_read_summaries'));
    TRUNCATE wl_unit_changes, wl_unit_ranks;
    PERFORM wl_rebuild_read_summaries_0014();
    INSERT INTO wl_unit_ranks
    SELECT id, domain, external_ref, cost_cents, attempt_count FROM work_units;
    ANALYZE wl_unit_ranks, wl_unit_changes;
END $$;
REVOKE EXECUTE ON FUNCTION wl_rebuild_read_summaries() FROM PUBLIC;

-- The audit: folded plus pending (the *_now views) against full scans, in one snapshot,
-- as 0012's comparison did for the tallies alone; 0014's model tallies as they were.
CREATE VIEW wl_disposed_links_now AS
SELECT disposition, domain, link, sum(units)::bigint AS units
FROM (SELECT disposition, domain, link, units FROM wl_disposed_links
      UNION ALL SELECT disposition, domain, link, delta FROM wl_pending_links) AS l
GROUP BY disposition, domain, link
HAVING sum(units) <> 0;

CREATE FUNCTION wl_read_summary_drift_0017()
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
$$;
REVOKE EXECUTE ON FUNCTION wl_read_summary_drift_0017() FROM PUBLIC;

-- Ranks: a unit not in wl_unit_changes has the cost and attempts its rank row says.
CREATE FUNCTION wl_unit_ranks_drift()
    RETURNS TABLE (summary text, key text, kept text, actual text)
    LANGUAGE sql STABLE AS $$
    SELECT 'wl_unit_ranks', coalesce(u.external_ref, r.external_ref),
           (r.domain, r.cost_cents, r.attempts)::text,
           (u.domain, u.cost_cents, u.attempt_count)::text
    FROM work_units AS u
    FULL JOIN wl_unit_ranks AS r ON r.unit_id = u.id
    WHERE NOT EXISTS (SELECT 1 FROM wl_unit_changes AS c WHERE c.unit_id = coalesce(u.id, r.unit_id))
      AND (r.domain, r.external_ref, r.cost_cents, r.attempts)
          IS DISTINCT FROM (u.domain, u.external_ref, u.cost_cents, u.attempt_count)
$$;
REVOKE EXECUTE ON FUNCTION wl_unit_ranks_drift() FROM PUBLIC;

-- The model part of 0014's audit, unchanged, is what wl_read_summary_drift_0014() adds to
-- 0012's: taken from it by name.
ALTER FUNCTION wl_read_summary_drift() RENAME TO wl_read_summary_drift_0014;
CREATE FUNCTION wl_read_summary_drift()
    RETURNS TABLE (summary text, key text, kept text, actual text)
    LANGUAGE sql STABLE AS $$
    SELECT * FROM wl_read_summary_drift_0017()
    UNION ALL
    SELECT * FROM wl_read_summary_drift_0014() WHERE summary = 'wl_model_tallies'
    UNION ALL
    SELECT * FROM wl_unit_ranks_drift()
$$;
REVOKE EXECUTE ON FUNCTION wl_read_summary_drift() FROM PUBLIC;

-- The views, same columns as before, summary scopes from the *_now views.
CREATE OR REPLACE VIEW v_queue_depth WITH (security_barrier) AS
SELECT CASE WHEN grouping(domain) = 1 THEN 'total' ELSE 'domain' END AS scope,
       CASE WHEN grouping(domain) = 1 THEN '(all)' ELSE domain END AS domain,
       coalesce(sum(units) FILTER (WHERE state = 'ready'), 0)::bigint AS ready,
       coalesce(sum(units) FILTER (WHERE state = 'claimed'), 0)::bigint AS claimed,
       coalesce(sum(units) FILTER (WHERE state = 'in_progress'), 0)::bigint AS in_progress,
       coalesce(sum(units) FILTER (WHERE state = 'blocked'), 0)::bigint AS blocked,
       coalesce(sum(units) FILTER (WHERE state = 'verified'), 0)::bigint AS verified,
       coalesce(sum(units) FILTER (WHERE state = 'done'), 0)::bigint AS done,
       coalesce(sum(units) FILTER (WHERE state = 'abandoned'), 0)::bigint AS abandoned,
       coalesce(sum(units) FILTER (WHERE state NOT IN ('done', 'abandoned')), 0)::bigint AS open,
       coalesce(sum(units), 0)::bigint AS units,
       coalesce(sum(units) FILTER (WHERE state = 'waiting'), 0)::bigint AS waiting
FROM wl_unit_tallies_now
GROUP BY GROUPING SETS ((domain), ())
HAVING grouping(domain) = 1 OR sum(units) <> 0
ORDER BY grouping(domain), domain;
CREATE OR REPLACE VIEW v_cost_per_unit WITH (security_barrier) AS
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
CREATE OR REPLACE VIEW v_rework WITH (security_barrier) AS
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

CREATE OR REPLACE VIEW v_disposition_summary WITH (security_barrier) AS
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

-- The top-20 lists: each unit's cost and attempts as of the last fold, in the order of
-- their indexes (the order is the view's own, as v_stall_list's: `LIMIT n` on the view,
-- with or without `WHERE domain = ...`, reads n index entries), and the units changed
-- since. The first n by current values are among the first n + (changed units) of the
-- folded ranking and the changed units: the report reads those ids, then their rows as
-- they are now (work_ledger/db/sql/report.sql). Views, so the reader role reads them.
CREATE VIEW v_costliest_units WITH (security_barrier) AS
SELECT unit_id, domain, external_ref, cost_cents, attempts FROM wl_unit_ranks
WHERE cost_cents > 0
ORDER BY cost_cents DESC, external_ref;
COMMENT ON VIEW v_costliest_units IS
    'Units that cost anything, costliest first, as of the last fold of the read summaries '
    '(wl_fold_read_summaries()): LIMIT n reads n index entries. The units in '
    'v_changed_units may have changed since: read them as they are now.';
CREATE VIEW v_most_attempted_units WITH (security_barrier) AS
SELECT unit_id, domain, external_ref, cost_cents, attempts FROM wl_unit_ranks
WHERE attempts > 1
ORDER BY attempts DESC, external_ref;
COMMENT ON VIEW v_most_attempted_units IS
    'Units claimed more than once, most attempts first, as of the last fold of the read '
    'summaries: LIMIT n reads n index entries. The units in v_changed_units may have '
    'changed since: read them as they are now.';
CREATE VIEW v_changed_units WITH (security_barrier) AS
SELECT DISTINCT unit_id FROM wl_unit_changes;
COMMENT ON VIEW v_changed_units IS
    'The units changed since the last fold of the read summaries (a few thousand at most '
    'while serve runs): what v_costliest_units and v_most_attempted_units may not say yet.';

-- v_stall_counts without reading every stalled unit (a year's ledger can hold tens of
-- thousands, which 0013's index-only count read on every scrape): the leased units per
-- domain from the tallies, less those heard from within the threshold (a range of the
-- silent index as long as the live leases) and those never heard from (a partial index no
-- write path enters: a claim sets the heartbeat). The same snapshot as the tallies.
CREATE INDEX work_units_unheard_leases_idx ON work_units (domain)
    WHERE state IN ('claimed', 'in_progress') AND last_heartbeat_at IS NULL;
CREATE OR REPLACE VIEW v_stall_counts WITH (security_barrier) AS
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

-- What /metrics reads of the questions: per assignee group (every group that has had a
-- question, none open included), the open questions and the oldest one's age, as
-- v_question_wait's group rows say, from an index: the groups by a skip over it (one probe
-- per group), then each group's open range. v_question_wait's group rows aggregate every
-- question (percentiles of the answered ones included) on each read.
CREATE INDEX blocking_questions_group_idx
    ON blocking_questions (assignee_group_slug, status, created_at);
CREATE VIEW v_open_questions WITH (security_barrier) AS
WITH RECURSIVE groups (slug) AS (
    (SELECT q.assignee_group_slug FROM blocking_questions AS q
     ORDER BY q.assignee_group_slug LIMIT 1)
    UNION ALL
    SELECT (SELECT q.assignee_group_slug FROM blocking_questions AS q
            WHERE q.assignee_group_slug > g.slug ORDER BY q.assignee_group_slug LIMIT 1)
    FROM groups AS g WHERE g.slug IS NOT NULL
)
SELECT g.slug AS assignee_group_slug, o.open_questions,
       coalesce(floor(extract(epoch FROM now() - o.oldest)::float8), 0)::bigint
           AS oldest_open_seconds
FROM groups AS g
CROSS JOIN LATERAL (
    SELECT count(*) AS open_questions, min(q.created_at) AS oldest
    FROM blocking_questions AS q
    WHERE q.assignee_group_slug = g.slug AND q.status = 'open'
) AS o
WHERE g.slug IS NOT NULL;
COMMENT ON VIEW v_open_questions IS
    'Per assignee group (every group that has had a question): the open blocking questions '
    'and the age in seconds of the oldest (0 when none is open), as v_question_wait''s group '
    'rows say, read from an index. What /metrics reads.';

-- The reader role reads the new views too: grant-reader from now on, and every role already
-- made by it, now (as 0013 did for v_stall_counts).
ALTER FUNCTION wl_grant_reader(text, text) RENAME TO wl_grant_reader_0013;
CREATE FUNCTION wl_grant_reader(role_name text, password_verifier text) RETURNS text[]
    LANGUAGE plpgsql AS $$
BEGIN
    RETURN wl_grant_reader_0013(role_name, password_verifier)
           || wl_grant_views(role_name, ARRAY['v_costliest_units', 'v_most_attempted_units', 'v_changed_units',
                                             'v_open_questions']);
END $$;
REVOKE EXECUTE ON FUNCTION wl_grant_reader(text, text) FROM PUBLIC;

DO $$
DECLARE
    reader text;
BEGIN
    FOR reader IN
        SELECT DISTINCT r.rolname
        FROM pg_class AS c
        CROSS JOIN LATERAL aclexplode(c.relacl) AS acl
        JOIN pg_roles AS r ON r.oid = acl.grantee
        WHERE c.oid = 'v_queue_depth'::regclass AND acl.privilege_type = 'SELECT'
          AND acl.grantee <> c.relowner
    LOOP
        PERFORM wl_grant_views(reader, ARRAY['v_costliest_units', 'v_most_attempted_units', 'v_changed_units',
                                             'v_open_questions']);
    END LOOP;
END $$;

SELECT wl_rebuild_read_summaries();
