-- The read side (DESIGN §8): five views that humans read (Grafana, psql, `work-ledger
-- report`), the stall threshold they need, and the function that makes a read-only role.
--
-- Views run with their owner's rights (security_invoker is off), so a reader role granted
-- SELECT on a view needs no right on the tables under it. security_barrier stops a
-- reader's own functions from being pushed below a view's filters to peek at hidden rows.
--
-- Rows that summarise a set of units carry `scope`: 'unit' (one unit), 'domain' (one
-- domain), 'total' (every domain; domain is '(all)'), or 'day' (one domain on one UTC
-- day). Filter on scope; the views have one shape each so that one query reads them.

-- Settings the views read. One row, written at start by `work-ledger serve` from WL_*
-- (WL_STALL_SECONDS), so that Grafana and psql see the threshold the fleet runs with.
CREATE TABLE wl_settings (
    singleton     boolean PRIMARY KEY DEFAULT true,
    stall_seconds integer NOT NULL DEFAULT 300,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT settings_single_row CHECK (singleton),
    CONSTRAINT settings_stall_seconds_positive CHECK (stall_seconds BETWEEN 1 AND 604800)
);
INSERT INTO wl_settings DEFAULT VALUES;
COMMENT ON TABLE wl_settings IS
    'One row of settings that the views read; stall_seconds is WL_STALL_SECONDS, written at start.';

CREATE VIEW v_queue_depth WITH (security_barrier) AS
SELECT CASE WHEN grouping(domain) = 1 THEN 'total' ELSE 'domain' END AS scope,
       CASE WHEN grouping(domain) = 1 THEN '(all)' ELSE domain END AS domain,
       count(*) FILTER (WHERE state = 'ready') AS ready,
       count(*) FILTER (WHERE state = 'claimed') AS claimed,
       count(*) FILTER (WHERE state = 'in_progress') AS in_progress,
       count(*) FILTER (WHERE state = 'blocked') AS blocked,
       count(*) FILTER (WHERE state = 'verified') AS verified,
       count(*) FILTER (WHERE state = 'done') AS done,
       count(*) FILTER (WHERE state = 'abandoned') AS abandoned,
       count(*) FILTER (WHERE state NOT IN ('done', 'abandoned')) AS open,
       count(*) AS units
FROM work_units
GROUP BY GROUPING SETS ((domain), ())
ORDER BY grouping(domain), domain;
COMMENT ON VIEW v_queue_depth IS
    'How many units are in each state, per domain (scope domain) and over all domains '
    '(scope total, always present). open = not yet done or abandoned.';

CREATE VIEW v_stall_list WITH (security_barrier) AS
SELECT u.id AS unit_id, u.external_ref, u.fleet, u.domain, u.state,
       u.claimed_by AS holder, a.id AS attempt_id, u.attempt_count AS attempt_no,
       u.last_heartbeat_at, u.lease_expires_at,
       u.lease_expires_at < now() AS lease_expired,
       floor(extract(epoch FROM now() - u.last_heartbeat_at))::bigint AS stalled_seconds,
       s.stall_seconds AS stall_threshold_seconds
FROM work_units AS u
CROSS JOIN wl_settings AS s
LEFT JOIN work_unit_attempts AS a ON a.unit_id = u.id AND a.attempt_no = u.attempt_count
WHERE u.state IN ('claimed', 'in_progress')
  AND u.last_heartbeat_at < now() - make_interval(secs => s.stall_seconds)
ORDER BY u.last_heartbeat_at, u.id;
COMMENT ON VIEW v_stall_list IS
    'Which leased units (claimed, in_progress) have not heard from their holder for longer '
    'than the stall threshold (wl_settings.stall_seconds = WL_STALL_SECONDS): holder, attempt, '
    'last heartbeat, lease expiry, and stalled_seconds since the last heartbeat. A blocked '
    'unit waits on a human, not its agent, so it never stalls.';

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
           count(*) AS units,
           coalesce(sum(attempt_count), 0)::bigint AS attempts,
           coalesce(sum(cost_cents), 0)::bigint AS cost_cents,
           count(*) FILTER (WHERE disposition = 'MIGRATED') AS merged_units,
           coalesce(sum(cost_cents) FILTER (WHERE disposition = 'MIGRATED'), 0)::bigint
               AS merged_cost_cents
    FROM work_units
    GROUP BY GROUPING SETS ((domain), ())
) AS g;
COMMENT ON VIEW v_cost_per_unit IS
    'What each unit cost (scope unit: its attempts and cents), and per domain and in total: '
    'cost_per_unit_cents (all spend / units), cost_per_merged_unit_cents (what a MIGRATED unit '
    'cost on average) and spend_per_merged_unit_cents (all spend, wasted attempts and dropped '
    'units included, divided by the MIGRATED units). Cents; null when nothing is merged yet.';

-- An earlier attempt exists only when a later one does, so only units with more than one
-- attempt have attempts to look at: one grouped pass over those, not a lookup per unit.
CREATE VIEW v_rework WITH (security_barrier) AS
WITH earlier AS (
    SELECT a.unit_id,
           count(*) FILTER (WHERE a.outcome = 'superseded') AS superseded_attempts,
           count(*) FILTER (WHERE a.outcome IN ('failed', 'abandoned')) AS released_attempts
    FROM work_unit_attempts AS a
    JOIN work_units AS u ON u.id = a.unit_id
    WHERE u.attempt_count > 1 AND a.attempt_no < u.attempt_count
    GROUP BY a.unit_id
), units AS (
    SELECT u.id, u.domain, u.external_ref, u.state, u.disposition,
           date_trunc('day', u.disposed_at, 'UTC') AS day,
           u.attempt_count,
           (u.attempt_count > 1)::integer AS reworked,
           coalesce(e.superseded_attempts, 0) AS superseded_attempts,
           coalesce(e.released_attempts, 0) AS released_attempts
    FROM work_units AS u
    LEFT JOIN earlier AS e ON e.unit_id = u.id
    WHERE u.attempt_count > 0
), sets AS (
    SELECT 'unit'::text AS scope, domain, day, id AS unit_id, external_ref, state, disposition,
           1::bigint AS attempted_units, reworked::bigint AS reworked_units,
           attempt_count::bigint AS attempts, superseded_attempts, released_attempts
    FROM units WHERE reworked = 1
    UNION ALL
    SELECT CASE WHEN grouping(domain) = 1 THEN 'total' ELSE 'domain' END,
           CASE WHEN grouping(domain) = 1 THEN '(all)' ELSE domain END,
           NULL, NULL, NULL, NULL, NULL,
           count(*), coalesce(sum(reworked), 0), coalesce(sum(attempt_count), 0),
           coalesce(sum(superseded_attempts), 0), coalesce(sum(released_attempts), 0)
    FROM units
    GROUP BY GROUPING SETS ((domain), ())
    UNION ALL
    SELECT 'day', domain, day, NULL, NULL, NULL, NULL,
           count(*), sum(reworked), sum(attempt_count),
           sum(superseded_attempts), sum(released_attempts)
    FROM units WHERE day IS NOT NULL
    GROUP BY domain, day
)
SELECT scope, domain, day, unit_id, external_ref, state, disposition,
       attempted_units, reworked_units, attempts,
       attempts - attempted_units AS extra_attempts,
       superseded_attempts::bigint, released_attempts::bigint,
       round(reworked_units::numeric / nullif(attempted_units, 0), 4) AS rework_rate
FROM sets;
COMMENT ON VIEW v_rework IS
    'Which units needed more than one attempt (scope unit), and the rework rate = reworked_units '
    '/ attempted_units per domain and in total (units claimed at least once), and per domain '
    'per UTC day of disposal (scope day, closed units only: the rate over time). '
    'superseded_attempts were lost to a lapsed lease (stale reclaim); released_attempts ended '
    'failed or abandoned before a later attempt.';

CREATE VIEW v_disposition_summary WITH (security_barrier) AS
WITH disposed AS (
    SELECT u.domain, u.disposition, u.attempt_count, u.cost_cents, u.evidence_urls,
           u.disposed_at
    FROM work_units AS u
    WHERE u.disposition IS NOT NULL
), links AS (
    SELECT d.disposition, CASE WHEN grouping(d.domain) = 1 THEN NULL ELSE d.domain END AS domain,
           array_agg(DISTINCT link ORDER BY link) AS links
    FROM disposed AS d, unnest(d.evidence_urls) AS link
    GROUP BY GROUPING SETS ((d.disposition, d.domain), (d.disposition))
), per_domain AS (
    SELECT 'domain'::text AS scope, d.disposition, d.domain,
           count(*) AS units,
           sum(d.attempt_count)::bigint AS attempts,
           sum(d.cost_cents)::bigint AS cost_cents,
           count(*) FILTER (WHERE cardinality(d.evidence_urls) = 0) AS units_without_evidence,
           min(d.disposed_at) AS first_disposed_at,
           max(d.disposed_at) AS last_disposed_at
    FROM disposed AS d
    GROUP BY d.disposition, d.domain
), per_disposition AS (
    SELECT 'total'::text AS scope, k.disposition, '(all)'::text AS domain,
           count(d.disposition) AS units,
           coalesce(sum(d.attempt_count), 0)::bigint AS attempts,
           coalesce(sum(d.cost_cents), 0)::bigint AS cost_cents,
           count(d.disposition) FILTER (WHERE cardinality(d.evidence_urls) = 0)
               AS units_without_evidence,
           min(d.disposed_at) AS first_disposed_at,
           max(d.disposed_at) AS last_disposed_at
    FROM unnest(enum_range(NULL::work_disposition)) AS k (disposition)
    LEFT JOIN disposed AS d ON d.disposition = k.disposition
    GROUP BY k.disposition
)
SELECT s.scope, s.disposition, s.domain, s.units, s.attempts, s.cost_cents,
       round(s.cost_cents::numeric / nullif(s.units, 0), 2) AS cost_per_unit_cents,
       s.units_without_evidence, coalesce(l.links, '{}') AS evidence_urls,
       cardinality(coalesce(l.links, '{}')) AS evidence_url_count,
       s.first_disposed_at, s.last_disposed_at
FROM (SELECT * FROM per_domain UNION ALL SELECT * FROM per_disposition) AS s
LEFT JOIN links AS l
       ON l.disposition = s.disposition
      AND l.domain IS NOT DISTINCT FROM CASE WHEN s.scope = 'total' THEN NULL ELSE s.domain END;
COMMENT ON VIEW v_disposition_summary IS
    'The kill-gate table: per disposition (MIGRATED, DROPPED, DEFERRED, DEAD), per domain and '
    'in total (scope total lists all four, zero or not): how many units, their attempts and '
    'cost, how many carry no evidence, and every distinct evidence link, sorted.';

-- Makes `role_name` a LOGIN role that may SELECT the five views and nothing else
-- (`work-ledger grant-reader`). Runs with the caller's rights: it needs CREATEROLE.
-- The password arrives as a SCRAM-SHA-256 verifier, never in clear.
CREATE FUNCTION wl_grant_reader(role_name text, password_verifier text) RETURNS text[]
    LANGUAGE plpgsql AS $$
DECLARE
    views constant text[] := ARRAY['v_queue_depth', 'v_stall_list', 'v_cost_per_unit',
                                   'v_rework', 'v_disposition_summary'];
    existing pg_roles;
    memberships text;
    view_name text;
BEGIN
    IF role_name IN (current_user, session_user) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            CONSTRAINT = 'reader_role_not_ledger_owner',
            MESSAGE = format('role %s is the role the ledger itself runs as; making it read-only '
                             'would lock the ledger out of its own tables', role_name),
            HINT = 'choose a new role name for the reader, e.g. ledger_reader';
    END IF;
    SELECT * INTO existing FROM pg_roles WHERE rolname = role_name;
    IF FOUND THEN
        SELECT string_agg(g.rolname, ', ' ORDER BY g.rolname) INTO memberships
        FROM pg_auth_members AS m JOIN pg_roles AS g ON g.oid = m.roleid
        WHERE m.member = existing.oid;
        IF existing.rolsuper OR existing.rolcreaterole OR existing.rolcreatedb
           OR existing.rolreplication OR existing.rolbypassrls OR memberships IS NOT NULL
           OR EXISTS (SELECT 1 FROM pg_class WHERE relowner = existing.oid) THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                CONSTRAINT = 'reader_role_sees_only_views',
                MESSAGE = format('role %s already has rights beyond reading the views '
                                 '(superuser, createrole, createdb, replication, bypassrls, '
                                 'owned tables, or membership in: %s)',
                                 role_name, coalesce(memberships, 'none')),
                HINT = 'choose a new role name for the reader; an existing powerful role is '
                       'never turned into a reader';
        END IF;
        EXECUTE format('ALTER ROLE %I WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE '
                       'NOREPLICATION NOBYPASSRLS PASSWORD %L', role_name, password_verifier);
    ELSE
        EXECUTE format('CREATE ROLE %I WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE '
                       'NOREPLICATION NOBYPASSRLS PASSWORD %L', role_name, password_verifier);
    END IF;
    EXECUTE format('ALTER ROLE %I SET default_transaction_read_only = on', role_name);
    EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', role_name, '30s');
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), role_name);
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA public FROM %I', role_name);
    EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM %I', role_name);
    EXECUTE format('REVOKE CREATE ON SCHEMA public FROM %I', role_name);
    EXECUTE format('GRANT USAGE ON SCHEMA public TO %I', role_name);
    FOREACH view_name IN ARRAY views LOOP
        EXECUTE format('GRANT SELECT ON %I TO %I', view_name, role_name);
    END LOOP;
    RETURN views;
END $$;
REVOKE EXECUTE ON FUNCTION wl_grant_reader(text, text) FROM PUBLIC;
