-- The views a dashboard polls, cheap at a year's scale (issue 32): v_queue_depth,
-- v_cost_per_unit, v_rework and v_disposition_summary read their summary scopes from
-- tallies kept by triggers on work_units, in the same statement as every change of a unit
-- (any write path, raw SQL included), instead of scanning a million units per refresh.
--
-- Exactness: a tally row holds what the units of its key add up to. A row trigger sees
-- every changed unit, old and new, takes the old row out of its keys and puts the new one
-- in (an upsert of deltas per key).
-- `audit` compares every tally with a full scan of the tables (wl_read_summary_drift), and
-- wl_rebuild_read_summaries() rebuilds them all from the tables (this migration runs it).
--
-- No hot row under 64 agents: each key is spread over stripes (the writing backend's pid
-- modulo 16, or 4 for the per-day keys), so concurrent claims in one domain mostly update
-- different rows; the views add the stripes up.

CREATE FUNCTION wl_tally_stripe(stripes integer) RETURNS smallint
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (pg_backend_pid() % stripes)::smallint;

-- Per domain, state and disposition: units, their attempts, cost and evidence.
-- first/last_disposed_at only widen: a disposition is final, so a disposed unit leaves its
-- key only by a raw edit of its domain, which the audit reports (rebuild to repair).
CREATE TABLE wl_unit_tallies (
    domain                 text NOT NULL,
    state                  work_state NOT NULL,
    disposition            work_disposition,
    stripe                 smallint NOT NULL,
    units                  bigint NOT NULL,
    attempted_units        bigint NOT NULL,
    reworked_units         bigint NOT NULL,
    attempts               bigint NOT NULL,
    cost_cents             bigint NOT NULL,
    units_without_evidence bigint NOT NULL,
    first_disposed_at      timestamptz,
    last_disposed_at       timestamptz,
    CONSTRAINT unit_tallies_key UNIQUE NULLS NOT DISTINCT (domain, state, disposition, stripe)
);

-- Per domain: the earlier attempts (those a later attempt followed) by how they ended.
CREATE TABLE wl_rework_tallies (
    domain              text NOT NULL,
    stripe              smallint NOT NULL,
    superseded_attempts bigint NOT NULL,
    released_attempts   bigint NOT NULL,
    CONSTRAINT rework_tallies_key PRIMARY KEY (domain, stripe)
);

-- Per domain and UTC day of disposal: the disposed units that were claimed at least once.
CREATE TABLE wl_rework_days (
    domain              text NOT NULL,
    day                 timestamptz NOT NULL,
    stripe              smallint NOT NULL,
    attempted_units     bigint NOT NULL,
    reworked_units      bigint NOT NULL,
    attempts            bigint NOT NULL,
    superseded_attempts bigint NOT NULL,
    released_attempts   bigint NOT NULL,
    CONSTRAINT rework_days_key PRIMARY KEY (domain, day, stripe)
);

-- Every distinct evidence link of disposed units, per disposition and domain (domain
-- '(all)': over every domain), with how many units carry it; and how many there are.
CREATE TABLE wl_disposed_links (
    disposition work_disposition NOT NULL,
    domain      text NOT NULL,
    link        text NOT NULL,
    units       bigint NOT NULL,
    -- No CHECK (units >= 0): an upsert's proposed row carries the delta, negative when a
    -- link leaves, and a CHECK would refuse it before the conflict is seen.
    CONSTRAINT disposed_links_key PRIMARY KEY (disposition, domain, link)
);
CREATE TABLE wl_link_tallies (
    disposition work_disposition NOT NULL,
    domain      text NOT NULL,
    stripe      smallint NOT NULL,
    links       bigint NOT NULL,
    CONSTRAINT link_tallies_key PRIMARY KEY (disposition, domain, stripe)
);

COMMENT ON TABLE wl_unit_tallies IS
    'Kept by trigger: what the units of each (domain, state, disposition) add up to, spread '
    'over stripes. Read through v_queue_depth, v_cost_per_unit, v_rework, v_disposition_summary.';

-- What each tally holds, computed from the tables: the rebuild writes these, the audit
-- compares the tallies with them. Full scans: for repair and audit, never for a dashboard.
CREATE VIEW wl_unit_tallies_scan AS
SELECT domain, state, disposition, count(*) AS units,
       count(*) FILTER (WHERE attempt_count > 0) AS attempted_units,
       count(*) FILTER (WHERE attempt_count > 1) AS reworked_units,
       coalesce(sum(attempt_count), 0)::bigint AS attempts,
       coalesce(sum(cost_cents), 0)::bigint AS cost_cents,
       count(*) FILTER (WHERE cardinality(evidence_urls) = 0) AS units_without_evidence,
       min(disposed_at) AS first_disposed_at, max(disposed_at) AS last_disposed_at
FROM work_units
GROUP BY domain, state, disposition;

CREATE VIEW wl_unit_earlier_attempts AS
SELECT u.id AS unit_id, u.domain, u.attempt_count, date_trunc('day', u.disposed_at, 'UTC') AS day,
       count(a.id) FILTER (WHERE a.outcome = 'superseded') AS superseded_attempts,
       count(a.id) FILTER (WHERE a.outcome IN ('failed', 'abandoned')) AS released_attempts
FROM work_units AS u
LEFT JOIN work_unit_attempts AS a ON a.unit_id = u.id AND a.attempt_no < u.attempt_count
WHERE u.attempt_count > 0
GROUP BY u.id;

CREATE VIEW wl_rework_tallies_scan AS
SELECT domain, sum(superseded_attempts)::bigint AS superseded_attempts,
       sum(released_attempts)::bigint AS released_attempts
FROM wl_unit_earlier_attempts WHERE attempt_count > 1
GROUP BY domain;

CREATE VIEW wl_rework_days_scan AS
SELECT domain, day, count(*) AS attempted_units,
       count(*) FILTER (WHERE attempt_count > 1) AS reworked_units,
       sum(attempt_count)::bigint AS attempts,
       sum(superseded_attempts)::bigint AS superseded_attempts,
       sum(released_attempts)::bigint AS released_attempts
FROM wl_unit_earlier_attempts WHERE day IS NOT NULL
GROUP BY domain, day;

CREATE VIEW wl_disposed_links_scan AS
SELECT u.disposition, scope.domain, link, count(*) AS units
FROM work_units AS u
CROSS JOIN LATERAL unnest(u.evidence_urls) AS link
CROSS JOIN LATERAL (VALUES (u.domain), ('(all)')) AS scope (domain)
WHERE u.disposition IS NOT NULL
GROUP BY u.disposition, scope.domain, link;

-- A unit's earlier attempts (numbered below `below`) by how they ended.
CREATE FUNCTION wl_earlier_attempts(unit uuid, below integer,
                                    OUT superseded integer, OUT released integer)
    LANGUAGE sql STABLE AS $$
    SELECT count(*) FILTER (WHERE outcome = 'superseded'),
           count(*) FILTER (WHERE outcome IN ('failed', 'abandoned'))
    FROM work_unit_attempts WHERE unit_id = unit AND attempt_no < below;
$$;

-- A changed unit leaves the keys of its old row (sign -1) and enters those of its new one
-- (+1): one upsert of deltas per tally table, the keys in one order for every writer (no
-- deadlock), this backend's stripe. On INSERT, OLD is null and only the new row counts.
-- The trigger's WHEN skips what changes nothing counted (a heartbeat). Row triggers AFTER
-- the statement see all of it: the claim's own supersede of the previous attempt included.
-- first/last_disposed_at only widen; a disposed unit leaving its key is looked up again.
CREATE FUNCTION wl_tally_unit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    old_superseded integer := 0;
    old_released integer := 0;
    new_superseded integer := 0;
    new_released integer := 0;
BEGIN
    INSERT INTO wl_unit_tallies AS t
    SELECT d.domain, d.state, d.disposition, wl_tally_stripe(16), sum(d.units),
           sum(d.attempted), sum(d.reworked), sum(d.attempts), sum(d.cost),
           sum(d.without_evidence), min(d.disposed), max(d.disposed)
    FROM (VALUES (OLD.domain, OLD.state, OLD.disposition, -1, -(OLD.attempt_count > 0)::integer,
                  -(OLD.attempt_count > 1)::integer, -OLD.attempt_count, -OLD.cost_cents,
                  -(cardinality(OLD.evidence_urls) = 0)::integer, NULL::timestamptz),
                 (NEW.domain, NEW.state, NEW.disposition, 1, (NEW.attempt_count > 0)::integer,
                  (NEW.attempt_count > 1)::integer, NEW.attempt_count, NEW.cost_cents,
                  (cardinality(NEW.evidence_urls) = 0)::integer, NEW.disposed_at))
         AS d (domain, state, disposition, units, attempted, reworked, attempts, cost,
               without_evidence, disposed)
    WHERE d.domain IS NOT NULL
    GROUP BY d.domain, d.state, d.disposition
    ORDER BY d.domain, d.state, d.disposition
    ON CONFLICT ON CONSTRAINT unit_tallies_key DO UPDATE
    SET units = t.units + excluded.units,
        attempted_units = t.attempted_units + excluded.attempted_units,
        reworked_units = t.reworked_units + excluded.reworked_units,
        attempts = t.attempts + excluded.attempts,
        cost_cents = t.cost_cents + excluded.cost_cents,
        units_without_evidence = t.units_without_evidence + excluded.units_without_evidence,
        first_disposed_at = least(t.first_disposed_at, excluded.first_disposed_at),
        last_disposed_at = greatest(t.last_disposed_at, excluded.last_disposed_at);
    IF TG_OP = 'INSERT' THEN
        RETURN NULL;
    END IF;
    IF OLD.disposed_at IS NOT NULL AND (OLD.domain, OLD.state, OLD.disposition)
                                       IS DISTINCT FROM (NEW.domain, NEW.state, NEW.disposition) THEN
        -- A raw edit of a disposed unit's domain (dispositions are final).
        UPDATE wl_unit_tallies AS t
        SET first_disposed_at = w.first_disposed_at, last_disposed_at = w.last_disposed_at
        FROM (SELECT min(u.disposed_at) AS first_disposed_at, max(u.disposed_at) AS last_disposed_at
              FROM work_units AS u
              WHERE (u.domain, u.state, u.disposition) = (OLD.domain, OLD.state, OLD.disposition)) AS w
        WHERE (t.domain, t.state, t.disposition) = (OLD.domain, OLD.state, OLD.disposition);
    END IF;
    -- Earlier attempts: an attempt's outcome is final once a later one exists
    -- (attempt_outcome_final), so the attempts table as it is now says what both the old
    -- and the new row count. Only units past their first attempt have any.
    IF (OLD.domain, OLD.attempt_count, OLD.disposed_at)
       IS DISTINCT FROM (NEW.domain, NEW.attempt_count, NEW.disposed_at)
       AND (greatest(OLD.attempt_count, NEW.attempt_count) > 1
            OR OLD.disposed_at IS NOT NULL OR NEW.disposed_at IS NOT NULL) THEN
        IF OLD.attempt_count > 1 THEN
            SELECT * INTO old_superseded, old_released
            FROM wl_earlier_attempts(OLD.id, OLD.attempt_count);
        END IF;
        IF NEW.attempt_count > 1 THEN
            SELECT * INTO new_superseded, new_released
            FROM wl_earlier_attempts(NEW.id, NEW.attempt_count);
        END IF;
        IF (old_superseded, old_released, new_superseded, new_released) <> (0, 0, 0, 0) THEN
            INSERT INTO wl_rework_tallies AS t
            SELECT d.domain, wl_tally_stripe(16), sum(d.superseded), sum(d.released)
            FROM (VALUES (OLD.domain, -old_superseded, -old_released),
                         (NEW.domain, new_superseded, new_released))
                 AS d (domain, superseded, released)
            GROUP BY d.domain
            ORDER BY d.domain
            ON CONFLICT ON CONSTRAINT rework_tallies_key DO UPDATE
            SET superseded_attempts = t.superseded_attempts + excluded.superseded_attempts,
                released_attempts = t.released_attempts + excluded.released_attempts;
        END IF;
        INSERT INTO wl_rework_days AS t
        SELECT d.domain, date_trunc('day', d.disposed, 'UTC'), wl_tally_stripe(4), sum(d.sign),
               sum(d.sign * (d.attempts > 1)::integer), sum(d.sign * d.attempts),
               sum(d.sign * d.superseded), sum(d.sign * d.released)
        FROM (VALUES (OLD.domain, OLD.disposed_at, -1, OLD.attempt_count, old_superseded,
                      old_released),
                     (NEW.domain, NEW.disposed_at, 1, NEW.attempt_count, new_superseded,
                      new_released))
             AS d (domain, disposed, sign, attempts, superseded, released)
        WHERE d.disposed IS NOT NULL AND d.attempts > 0
        GROUP BY d.domain, date_trunc('day', d.disposed, 'UTC')
        ORDER BY d.domain, date_trunc('day', d.disposed, 'UTC')
        ON CONFLICT ON CONSTRAINT rework_days_key DO UPDATE
        SET attempted_units = t.attempted_units + excluded.attempted_units,
            reworked_units = t.reworked_units + excluded.reworked_units,
            attempts = t.attempts + excluded.attempts,
            superseded_attempts = t.superseded_attempts + excluded.superseded_attempts,
            released_attempts = t.released_attempts + excluded.released_attempts;
    END IF;
    -- Evidence links of disposed units, per disposition and domain and over all: a link
    -- whose count comes to 0 is removed, and the distinct counts move by the links added
    -- and removed (a row left holding its delta had none before: no row stays at 0).
    IF (OLD.disposition IS NOT NULL OR NEW.disposition IS NOT NULL)
       AND (OLD.domain, OLD.disposition, OLD.evidence_urls)
           IS DISTINCT FROM (NEW.domain, NEW.disposition, NEW.evidence_urls) THEN
        WITH deltas AS (
            SELECT s.disposition, scope.domain, link, sum(s.sign) AS delta
            FROM (VALUES (OLD.disposition, OLD.domain, OLD.evidence_urls, -1),
                         (NEW.disposition, NEW.domain, NEW.evidence_urls, 1))
                 AS s (disposition, domain, links, sign)
            CROSS JOIN LATERAL unnest(s.links) AS link
            CROSS JOIN LATERAL (VALUES (s.domain), ('(all)')) AS scope (domain)
            WHERE s.disposition IS NOT NULL
            GROUP BY s.disposition, scope.domain, link
            HAVING sum(s.sign) <> 0
        ), kept AS (
            INSERT INTO wl_disposed_links AS l
            SELECT d.disposition, d.domain, d.link, d.delta FROM deltas AS d
            ORDER BY d.disposition, d.domain, d.link
            ON CONFLICT ON CONSTRAINT disposed_links_key DO UPDATE SET units = l.units + excluded.units
            RETURNING l.disposition, l.domain, l.link, l.units
        )
        INSERT INTO wl_link_tallies AS t
        SELECT k.disposition, k.domain, wl_tally_stripe(16),
               count(*) FILTER (WHERE k.units = d.delta AND d.delta > 0)
               - count(*) FILTER (WHERE k.units = 0)
        FROM kept AS k JOIN deltas AS d USING (disposition, domain, link)
        GROUP BY k.disposition, k.domain
        HAVING count(*) FILTER (WHERE k.units = d.delta AND d.delta > 0)
               <> count(*) FILTER (WHERE k.units = 0)
        ORDER BY k.disposition, k.domain
        ON CONFLICT ON CONSTRAINT link_tallies_key DO UPDATE SET links = t.links + excluded.links;
        IF OLD.disposition IS NOT NULL THEN
            DELETE FROM wl_disposed_links AS l
            USING unnest(OLD.evidence_urls) AS e (url),
                  (VALUES (OLD.domain), ('(all)')) AS scope (domain)
            WHERE l.units = 0
              AND (l.disposition, l.domain, l.link) = (OLD.disposition, scope.domain, e.url);
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER read_summaries_on_insert
    AFTER INSERT ON work_units
    FOR EACH ROW EXECUTE FUNCTION wl_tally_unit();
CREATE TRIGGER read_summaries_on_update
    AFTER UPDATE ON work_units
    FOR EACH ROW
    WHEN ((OLD.domain, OLD.state, OLD.disposition, OLD.attempt_count, OLD.cost_cents,
           OLD.evidence_urls, OLD.disposed_at)
          IS DISTINCT FROM (NEW.domain, NEW.state, NEW.disposition, NEW.attempt_count,
                            NEW.cost_cents, NEW.evidence_urls, NEW.disposed_at))
    EXECUTE FUNCTION wl_tally_unit();

-- Every tally from the tables, stripe 0, writers held off meanwhile (SHARE lets readers
-- on). For this migration, a bulk load with triggers off, or a repair the audit asked for.
CREATE FUNCTION wl_rebuild_read_summaries() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE work_units, work_unit_attempts IN SHARE MODE;
    TRUNCATE wl_unit_tallies, wl_rework_tallies, wl_rework_days, wl_disposed_links,
             wl_link_tallies;
    INSERT INTO wl_unit_tallies
    SELECT domain, state, disposition, 0, units, attempted_units, reworked_units, attempts,
           cost_cents, units_without_evidence, first_disposed_at, last_disposed_at
    FROM wl_unit_tallies_scan;
    INSERT INTO wl_rework_tallies
    SELECT domain, 0, superseded_attempts, released_attempts FROM wl_rework_tallies_scan;
    INSERT INTO wl_rework_days
    SELECT domain, day, 0, attempted_units, reworked_units, attempts, superseded_attempts,
           released_attempts
    FROM wl_rework_days_scan;
    INSERT INTO wl_disposed_links SELECT disposition, domain, link, units FROM wl_disposed_links_scan;
    INSERT INTO wl_link_tallies
    SELECT disposition, domain, 0, count(*) FROM wl_disposed_links GROUP BY disposition, domain;
    ANALYZE wl_unit_tallies, wl_rework_tallies, wl_rework_days, wl_disposed_links,
            wl_link_tallies;
END $$;
REVOKE EXECUTE ON FUNCTION wl_rebuild_read_summaries() FROM PUBLIC;

-- Where a tally differs from what the tables say: one row per differing key (empty when
-- every summary is exact). A full scan of the ledger, run by `work-ledger audit`.
CREATE FUNCTION wl_read_summary_drift()
    RETURNS TABLE (summary text, key text, kept text, actual text)
    LANGUAGE sql STABLE AS $$
    WITH kept_units AS (
        SELECT domain, state, disposition, sum(units)::bigint AS units,
               sum(attempted_units)::bigint AS attempted_units,
               sum(reworked_units)::bigint AS reworked_units, sum(attempts)::bigint AS attempts,
               sum(cost_cents)::bigint AS cost_cents,
               sum(units_without_evidence)::bigint AS units_without_evidence,
               min(first_disposed_at) AS first_disposed_at, max(last_disposed_at) AS last_disposed_at
        FROM wl_unit_tallies GROUP BY domain, state, disposition HAVING sum(units) <> 0
            OR sum(attempts) <> 0 OR sum(cost_cents) <> 0
    ), kept_rework AS (
        SELECT domain, sum(superseded_attempts)::bigint AS superseded_attempts,
               sum(released_attempts)::bigint AS released_attempts
        FROM wl_rework_tallies GROUP BY domain
        HAVING sum(superseded_attempts) <> 0 OR sum(released_attempts) <> 0
    ), kept_days AS (
        SELECT domain, day, sum(attempted_units)::bigint AS attempted_units,
               sum(reworked_units)::bigint AS reworked_units, sum(attempts)::bigint AS attempts,
               sum(superseded_attempts)::bigint AS superseded_attempts,
               sum(released_attempts)::bigint AS released_attempts
        FROM wl_rework_days GROUP BY domain, day HAVING sum(attempted_units) <> 0
            OR sum(attempts) <> 0
    ), kept_link_counts AS (
        SELECT disposition, domain, sum(links)::bigint AS links
        FROM wl_link_tallies GROUP BY disposition, domain HAVING sum(links) <> 0
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
    FROM wl_disposed_links AS k
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
REVOKE EXECUTE ON FUNCTION wl_read_summary_drift() FROM PUBLIC;

-- The views, same columns as before (migration 0004), summary scopes from the tallies.
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
FROM wl_unit_tallies
GROUP BY GROUPING SETS ((domain), ())
HAVING grouping(domain) = 1 OR sum(units) <> 0
ORDER BY grouping(domain), domain;
COMMENT ON VIEW v_queue_depth IS
    'How many units are in each state, per domain (scope domain) and over all domains '
    '(scope total, always present). open = not yet done or abandoned; waiting = registered '
    'but held by a prerequisite or by the ledger''s question at the attempt limit. Read '
    'from wl_unit_tallies, kept exact by trigger in the statement that changes a unit.';

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
    FROM wl_unit_tallies
    GROUP BY GROUPING SETS ((domain), ())
    HAVING grouping(domain) = 1 OR sum(units) <> 0
) AS g;
COMMENT ON VIEW v_cost_per_unit IS
    'What each unit cost (scope unit: its attempts and cents; page it by external_ref), and per '
    'domain and in total: cost_per_unit_cents (all spend / units), cost_per_merged_unit_cents '
    '(what a MIGRATED unit cost on average) and spend_per_merged_unit_cents (all spend, wasted '
    'attempts and dropped units included, divided by the MIGRATED units). Cents; null when '
    'nothing is merged yet. Domain and total rows read wl_unit_tallies (kept by trigger).';

-- Scope unit looks up each unit's earlier attempts on its own, so a page of units
-- (WHERE scope = 'unit' AND external_ref > $cursor ORDER BY external_ref LIMIT n) reads
-- only that page; the other scopes read the tallies.
CREATE OR REPLACE VIEW v_rework WITH (security_barrier) AS
SELECT 'unit'::text AS scope, u.domain, date_trunc('day', u.disposed_at, 'UTC') AS day,
       u.id AS unit_id, u.external_ref, u.state, u.disposition,
       1::bigint AS attempted_units, 1::bigint AS reworked_units,
       u.attempt_count::bigint AS attempts, u.attempt_count::bigint - 1 AS extra_attempts,
       e.superseded_attempts, e.released_attempts, 1.0000 AS rework_rate
FROM work_units AS u
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE a.outcome = 'superseded') AS superseded_attempts,
           count(*) FILTER (WHERE a.outcome IN ('failed', 'abandoned')) AS released_attempts
    FROM work_unit_attempts AS a
    WHERE a.unit_id = u.id AND a.attempt_no < u.attempt_count
) AS e
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
    FROM wl_unit_tallies
    GROUP BY GROUPING SETS ((domain), ())
    HAVING grouping(domain) = 1 OR sum(attempted_units) <> 0
) AS g
LEFT JOIN (
    SELECT CASE WHEN grouping(domain) = 1 THEN '(all)' ELSE domain END AS domain,
           grouping(domain) AS all_domains,
           sum(superseded_attempts) AS superseded_attempts,
           sum(released_attempts) AS released_attempts
    FROM wl_rework_tallies
    GROUP BY GROUPING SETS ((domain), ())
) AS r ON r.domain = g.domain AND r.all_domains = (g.scope = 'total')::integer
UNION ALL
SELECT 'day', domain, day, NULL, NULL, NULL, NULL,
       sum(attempted_units)::bigint, sum(reworked_units)::bigint, sum(attempts)::bigint,
       (sum(attempts) - sum(attempted_units))::bigint,
       sum(superseded_attempts)::bigint, sum(released_attempts)::bigint,
       round(sum(reworked_units) / nullif(sum(attempted_units), 0), 4)
FROM wl_rework_days
GROUP BY domain, day
HAVING sum(attempted_units) <> 0;
COMMENT ON VIEW v_rework IS
    'Which units needed more than one attempt (scope unit; page it by external_ref), and the '
    'rework rate = reworked_units / attempted_units per domain and in total (units claimed at '
    'least once), and per domain per UTC day of disposal (scope day, closed units only: the '
    'rate over time). superseded_attempts were lost to a lapsed lease (stale reclaim); '
    'released_attempts ended failed or abandoned before a later attempt. Domain, total and '
    'day rows read tallies kept by trigger (wl_unit_tallies, wl_rework_tallies, wl_rework_days).';

CREATE OR REPLACE VIEW v_disposition_summary WITH (security_barrier) AS
WITH per_domain AS (
    SELECT 'domain'::text AS scope, disposition, domain,
           sum(units)::bigint AS units, sum(attempts)::bigint AS attempts,
           sum(cost_cents)::bigint AS cost_cents,
           sum(units_without_evidence)::bigint AS units_without_evidence,
           min(first_disposed_at) AS first_disposed_at, max(last_disposed_at) AS last_disposed_at
    FROM wl_unit_tallies
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
       ARRAY(SELECT l.link FROM wl_disposed_links AS l
             WHERE l.disposition = s.disposition AND l.domain = s.domain
             ORDER BY l.link LIMIT 20) AS evidence_urls,
       coalesce((SELECT sum(c.links) FROM wl_link_tallies AS c
                 WHERE c.disposition = s.disposition AND c.domain = s.domain), 0)::integer
           AS evidence_url_count,
       s.first_disposed_at, s.last_disposed_at
FROM (SELECT * FROM per_domain UNION ALL SELECT * FROM per_disposition) AS s;
COMMENT ON VIEW v_disposition_summary IS
    'The kill-gate table: per disposition (MIGRATED, DROPPED, DEFERRED, DEAD), per domain and '
    'in total (scope total lists all four, zero or not): how many units, their attempts and '
    'cost, how many carry no evidence, how many distinct evidence links (evidence_url_count) '
    'and the first 20 of them, sorted (evidence_urls). Read '
    'from tallies kept by trigger in the statement that changes a unit.';

SELECT wl_rebuild_read_summaries();
