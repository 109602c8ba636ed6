-- What a scrape and the report read beside the tallies (issue 32), without a scan of every
-- unit: the stall list from an index of leased units by last heartbeat (and the stalled
-- count per domain from that index alone: v_stall_counts), the per-unit rows of v_rework
-- a page at a time, and v_question_wait's group and total rows from the questions alone.

-- Only leased units are in it, and only the silent ones are read (last_heartbeat_at older
-- than the threshold): a scrape reads the stalled units, not the leased ones.
CREATE INDEX work_units_silent_idx ON work_units (last_heartbeat_at, id)
    INCLUDE (domain) WHERE state IN ('claimed', 'in_progress');

-- The threshold is a subquery (evaluated once) rather than a join, so the index range
-- starts at it; the view's order is the index's, so `LIMIT 20` reads 20 entries.
CREATE OR REPLACE VIEW v_stall_list WITH (security_barrier) AS
SELECT u.id AS unit_id, u.external_ref, u.fleet, u.domain, u.state,
       u.claimed_by AS holder, a.id AS attempt_id, u.attempt_count AS attempt_no,
       u.last_heartbeat_at, u.lease_expires_at,
       u.lease_expires_at < now() AS lease_expired,
       floor(extract(epoch FROM now() - u.last_heartbeat_at))::bigint AS stalled_seconds,
       (SELECT stall_seconds FROM wl_settings) AS stall_threshold_seconds
FROM work_units AS u
LEFT JOIN work_unit_attempts AS a ON a.unit_id = u.id AND a.attempt_no = u.attempt_count
WHERE u.state IN ('claimed', 'in_progress')
  AND u.last_heartbeat_at < now() - make_interval(secs => (SELECT stall_seconds FROM wl_settings))
ORDER BY u.last_heartbeat_at, u.id;

-- A stalled unit has not been written since its last heartbeat, so its page is all-visible
-- once vacuumed: the count reads the index alone.
CREATE VIEW v_stall_counts WITH (security_barrier) AS
SELECT u.domain, count(*) AS stalled_units
FROM work_units AS u
WHERE u.state IN ('claimed', 'in_progress')
  AND u.last_heartbeat_at < now() - make_interval(secs => (SELECT stall_seconds FROM wl_settings))
GROUP BY u.domain;
COMMENT ON VIEW v_stall_counts IS
    'How many units v_stall_list holds, per domain (domains with none are absent): what a '
    'scrape or a dashboard counts, from an index, without reading the units themselves.';

-- The reader role reads the new view too: grant-reader from now on, and every role
-- already made by it, now (as migration 0007 did for v_question_wait).
ALTER FUNCTION wl_grant_reader(text, text) RENAME TO wl_grant_reader_0012;
CREATE FUNCTION wl_grant_reader(role_name text, password_verifier text) RETURNS text[]
    LANGUAGE plpgsql AS $$
BEGIN
    RETURN wl_grant_reader_0012(role_name, password_verifier)
           || wl_grant_views(role_name, ARRAY['v_stall_counts']);
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
        PERFORM wl_grant_views(reader, ARRAY['v_stall_counts']);
    END LOOP;
END $$;

-- Scope unit counts each unit's earlier attempts in its own row (scalar subqueries), so
-- that `WHERE scope = 'unit' AND external_ref > $cursor ORDER BY external_ref LIMIT n`
-- walks the external_ref index and counts only the page's units.
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

-- The domain rows need each question's unit; the group and total rows do not, and read
-- the questions alone: a scrape (WHERE scope = 'group') never joins the units. The scope
-- of the first branch is a constant, so a filter on another scope drops that branch.
CREATE OR REPLACE VIEW v_question_wait WITH (security_barrier) AS
SELECT * FROM (
    SELECT 'domain'::text AS scope, u.domain, '(all)'::text AS assignee_group_slug,
           count(*) FILTER (WHERE q.status = 'open') AS open_questions,
           count(*) FILTER (WHERE q.status = 'open' AND q.external_task_id IS NULL)
               AS unrouted_questions,
           coalesce(floor(max(extract(epoch FROM now() - q.created_at)::float8)
                          FILTER (WHERE q.status = 'open')), 0)::bigint AS oldest_open_seconds,
           floor(percentile_cont(0.5) WITHIN GROUP
                     (ORDER BY extract(epoch FROM now() - q.created_at)::float8)
                 FILTER (WHERE q.status = 'open'))::bigint AS open_p50_seconds,
           count(*) FILTER (WHERE q.status = 'answered') AS answered_questions,
           round((percentile_cont(0.5) WITHIN GROUP
                      (ORDER BY extract(epoch FROM q.closed_at - q.created_at)::float8)
                  FILTER (WHERE q.status = 'answered'))::numeric, 1) AS answer_p50_seconds,
           round((percentile_cont(0.9) WITHIN GROUP
                      (ORDER BY extract(epoch FROM q.closed_at - q.created_at)::float8)
                  FILTER (WHERE q.status = 'answered'))::numeric, 1) AS answer_p90_seconds,
           count(*) FILTER (WHERE q.status = 'cancelled') AS cancelled_questions
    FROM blocking_questions AS q JOIN work_units AS u ON u.id = q.unit_id
    GROUP BY u.domain
    UNION ALL
    SELECT CASE WHEN grouping(q.assignee_group_slug) = 0 THEN 'group' ELSE 'total' END,
           '(all)',
           CASE WHEN grouping(q.assignee_group_slug) = 1 THEN '(all)'
                ELSE q.assignee_group_slug END,
           count(*) FILTER (WHERE q.status = 'open') AS open_questions,
           count(*) FILTER (WHERE q.status = 'open' AND q.external_task_id IS NULL)
               AS unrouted_questions,
           coalesce(floor(max(extract(epoch FROM now() - q.created_at)::float8)
                          FILTER (WHERE q.status = 'open')), 0)::bigint AS oldest_open_seconds,
           floor(percentile_cont(0.5) WITHIN GROUP
                     (ORDER BY extract(epoch FROM now() - q.created_at)::float8)
                 FILTER (WHERE q.status = 'open'))::bigint AS open_p50_seconds,
           count(*) FILTER (WHERE q.status = 'answered') AS answered_questions,
           round((percentile_cont(0.5) WITHIN GROUP
                      (ORDER BY extract(epoch FROM q.closed_at - q.created_at)::float8)
                  FILTER (WHERE q.status = 'answered'))::numeric, 1) AS answer_p50_seconds,
           round((percentile_cont(0.9) WITHIN GROUP
                      (ORDER BY extract(epoch FROM q.closed_at - q.created_at)::float8)
                  FILTER (WHERE q.status = 'answered'))::numeric, 1) AS answer_p90_seconds,
           count(*) FILTER (WHERE q.status = 'cancelled') AS cancelled_questions
    FROM blocking_questions AS q
    GROUP BY GROUPING SETS ((q.assignee_group_slug), ())
) AS w
ORDER BY scope = 'total', scope = 'group', domain, assignee_group_slug;
