-- name: audit_ledger
-- Replays the event log against the tables and re-checks every invariant, set-based.
-- One row per violation: (unit id, external_ref, rule, detail). No rows: the ledger is sound.
-- A kept summary that differs from the tables is one row too, unit id null.
WITH transitions AS (
    SELECT e.unit_id, e.id, e.event_type, e.from_state, e.to_state,
           lag(e.to_state) OVER (PARTITION BY e.unit_id ORDER BY e.id) AS previous_state,
           row_number() OVER (PARTITION BY e.unit_id ORDER BY e.id) AS n,
           row_number() OVER (PARTITION BY e.unit_id ORDER BY e.id DESC) AS n_from_last
    FROM work_unit_events AS e
    WHERE e.to_state IS NOT NULL
), attempt_sums AS (
    SELECT a.unit_id, sum(a.cost_cents) AS cost, count(*) AS n, max(a.attempt_no) AS max_no,
           count(*) FILTER (WHERE a.outcome IS NULL) AS live,
           min(a.agent_id) FILTER (WHERE a.outcome IS NULL) AS live_agent
    FROM work_unit_attempts AS a GROUP BY a.unit_id
), event_sums AS (
    SELECT e.unit_id, sum(e.cost_delta_cents) AS cost
    FROM work_unit_events AS e GROUP BY e.unit_id
), open_questions AS (
    SELECT q.unit_id, count(*) AS n FROM blocking_questions AS q
    WHERE q.status = 'open' GROUP BY q.unit_id
), violations AS (
    SELECT t.unit_id, 'event_chain_starts_registered' AS rule,
           format('first event %s is %s', t.id, t.event_type) AS detail
    FROM transitions AS t WHERE t.n = 1 AND (t.event_type <> 'registered' OR t.to_state <> 'ready')
    UNION ALL
    SELECT t.unit_id, 'event_chain_continuous',
           format('event %s moves from %s but the previous event left %s',
                  t.id, t.from_state, t.previous_state)
    FROM transitions AS t WHERE t.n > 1 AND t.from_state IS DISTINCT FROM t.previous_state
    UNION ALL
    SELECT u.id, 'state_reproducible_from_events',
           format('unit is %s but its events end in %s', u.state, coalesce(t.to_state::text, 'nothing'))
    FROM work_units AS u
    LEFT JOIN transitions AS t ON t.unit_id = u.id AND t.n_from_last = 1
    WHERE t.to_state IS DISTINCT FROM u.state
    UNION ALL
    SELECT u.id, 'unit_cost_equals_attempt_costs',
           format('unit costs %s, attempts add up to %s, cost events to %s',
                  u.cost_cents, coalesce(s.cost, 0), coalesce(c.cost, 0))
    FROM work_units AS u
    LEFT JOIN attempt_sums AS s ON s.unit_id = u.id
    LEFT JOIN event_sums AS c ON c.unit_id = u.id
    WHERE u.cost_cents <> coalesce(s.cost, 0) OR u.cost_cents <> coalesce(c.cost, 0)
    UNION ALL
    SELECT u.id, 'attempt_numbers_contiguous',
           format('attempt_count %s, %s attempts numbered up to %s',
                  u.attempt_count, coalesce(s.n, 0), coalesce(s.max_no, 0))
    FROM work_units AS u LEFT JOIN attempt_sums AS s ON s.unit_id = u.id
    WHERE u.attempt_count <> coalesce(s.n, 0) OR coalesce(s.n, 0) <> coalesce(s.max_no, 0)
    UNION ALL
    SELECT u.id, 'live_attempt_iff_held',
           format('unit is %s held by %s with %s running attempts (agent %s)',
                  u.state, u.claimed_by, coalesce(s.live, 0), s.live_agent)
    FROM work_units AS u LEFT JOIN attempt_sums AS s ON s.unit_id = u.id
    WHERE CASE WHEN u.state IN ('claimed', 'in_progress', 'blocked')
               THEN coalesce(s.live, 0) <> 1 OR s.live_agent IS DISTINCT FROM u.claimed_by
               ELSE coalesce(s.live, 0) <> 0 END
    UNION ALL
    SELECT u.id, 'open_question_iff_blocked',
           format('unit is %s with %s open questions', u.state, coalesce(o.n, 0))
    FROM work_units AS u LEFT JOIN open_questions AS o ON o.unit_id = u.id
    WHERE (u.state = 'blocked') <> (coalesce(o.n, 0) = 1)
    UNION ALL
    SELECT u.id, 'unit_disposition_matches_state',
           format('unit is %s with disposition %s', u.state, u.disposition)
    FROM work_units AS u
    WHERE NOT CASE u.state WHEN 'done' THEN u.disposition IS NOT DISTINCT FROM 'MIGRATED'
                           WHEN 'abandoned' THEN coalesce(u.disposition IN ('DROPPED', 'DEFERRED', 'DEAD'), false)
                           ELSE u.disposition IS NULL END
       OR (u.disposition IS NULL) <> (u.disposed_at IS NULL)
)
SELECT v.unit_id, u.external_ref, v.rule, v.detail
FROM violations AS v JOIN work_units AS u ON u.id = v.unit_id
UNION ALL
-- The read side's kept summaries (migration 0012) against a scan of the tables; a row
-- names no unit. The repair: SELECT wl_rebuild_read_summaries().
SELECT NULL, '(summary)', 'read_summary_exact',
       format('%s %s keeps %s but the tables say %s; run SELECT wl_rebuild_read_summaries()',
              d.summary, d.key, coalesce(d.kept, 'nothing'), coalesce(d.actual, 'nothing'))
FROM wl_read_summary_drift() AS d
ORDER BY external_ref, rule;
