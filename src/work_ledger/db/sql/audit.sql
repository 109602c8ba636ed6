-- name: audit_begin
-- The audit's transaction: read only, and without JIT. On a server built with LLVM a young
-- ledger (tables not yet analyzed) plans the replay above jit_above_cost, and compiling it
-- took 430 ms of a 460 ms audit (PostgreSQL 15, 20 units). SET LOCAL ends with the
-- transaction, also through a transaction pooler. Several commands: one round trip
-- (`Store.begin`).
BEGIN READ ONLY;
SET LOCAL jit = off;

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
), claims AS (
    -- Every claim (a ready unit claimed, or a lapsed one reclaimed) with what audit checks
    -- it against: its unit's scope and max_attempts.
    SELECT c.id, c.unit_id, c.created_at, c.event_type, u.fleet, u.domain, u.max_attempts
    FROM work_unit_events AS c JOIN work_units AS u ON u.id = c.unit_id
    WHERE c.event_type IN ('claimed', 'stale_reclaimed') AND c.to_state = 'claimed'
), counting AS (
    -- The attempt ends that count against the allowance (DESIGN §12).
    SELECT e.unit_id, e.id FROM work_unit_events AS e
    WHERE (e.event_type = 'released' AND e.detail ->> 'outcome' IN ('failed', 'abandoned'))
       OR e.event_type = 'stale_reclaimed'
       OR (e.event_type = 'disposed' AND (e.detail ->> 'ended_attempt')::boolean
           AND e.from_state <> 'blocked')
), violations AS (
    SELECT t.unit_id, 'event_chain_starts_registered' AS rule,
           format('first event %s is %s', t.id, t.event_type) AS detail
    FROM transitions AS t
    WHERE t.n = 1 AND (t.event_type <> 'registered' OR t.to_state NOT IN ('ready', 'waiting'))
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
    -- A blocked unit waits on its question; a waiting one may wait on the ledger's.
    WHERE CASE u.state WHEN 'blocked' THEN coalesce(o.n, 0) <> 1
                       WHEN 'waiting' THEN coalesce(o.n, 0) > 1
                       ELSE coalesce(o.n, 0) <> 0 END
    UNION ALL
    SELECT c.unit_id, 'claim_after_prerequisites_finished',
           format('claim event %s came before prerequisite %s finished or was waived',
                  c.id, p.external_ref)
    FROM claims AS c
    -- A split parent's requirements start with the split, after its earlier claims.
    JOIN unit_requirements AS r ON r.unit_id = c.unit_id AND r.created_at <= c.created_at
    JOIN work_units AS p ON p.id = r.prerequisite_id
    WHERE NOT EXISTS (
        SELECT 1 FROM work_unit_events AS d
        WHERE d.unit_id = r.prerequisite_id AND d.id < c.id AND d.event_type = 'disposed'
          AND (d.to_state = 'done' OR d.detail ->> 'disposition' = 'DROPPED'))
      AND NOT EXISTS (
        SELECT 1 FROM work_unit_events AS w
        WHERE w.unit_id = c.unit_id AND w.id < c.id AND w.event_type = 'waived'
          AND w.detail ->> 'prerequisite_id' = r.prerequisite_id::text)
    UNION ALL
    SELECT c.unit_id, 'attempts_within_allowance',
           format('claim event %s started an attempt after %s failed attempts, allowance %s',
                  c.id, f.n, a.allowed)
    FROM claims AS c
    CROSS JOIN LATERAL (SELECT count(*) AS n FROM counting AS k
                        WHERE k.unit_id = c.unit_id AND k.id <= c.id) AS f
    CROSS JOIN LATERAL (
        SELECT coalesce((SELECT (b.detail ->> 'attempts_allowed')::bigint
                         FROM work_unit_events AS b
                         WHERE b.unit_id = c.unit_id AND b.id < c.id
                           AND b.event_type = 'unblocked' AND b.from_state = 'waiting'
                         ORDER BY b.id DESC LIMIT 1), c.max_attempts) AS allowed) AS a
    WHERE f.n >= a.allowed
    UNION ALL
    -- Spend a claim could not have seen (READ COMMITTED: a cost record committing while the
    -- claim's statement ran) is given 5 seconds' grace; docs/work-shape.md. So is a cap
    -- raised in the 5 seconds after the claim's transaction began (its created_at): the
    -- claim statement reads the budget later than that, and may have read the raised cap.
    SELECT c.unit_id, 'claim_within_budget',
           format('claim event %s in fleet %s%s while %s of a %s cent cap was spent',
                  c.id, c.fleet, coalesce(', domain ' || cap.domain, ''), spent.cents,
                  cap.cap_cents)
    FROM claims AS c
    CROSS JOIN LATERAL (
        SELECT DISTINCT ON (k.domain) k.domain, k.cap_cents
        FROM budget_caps AS k
        WHERE k.fleet = c.fleet AND (k.domain IS NULL OR k.domain = c.domain)
          AND k.set_at <= c.created_at
        ORDER BY k.domain, k.set_at DESC, k.id DESC) AS in_force
    CROSS JOIN LATERAL (
        SELECT in_force.domain, greatest(in_force.cap_cents, max(k.cap_cents)) AS cap_cents
        FROM budget_caps AS k
        WHERE k.fleet = c.fleet AND k.domain IS NOT DISTINCT FROM in_force.domain
          AND k.set_at > c.created_at
          AND k.set_at <= c.created_at + interval '5 seconds') AS cap
    CROSS JOIN LATERAL (
        SELECT coalesce(sum(e.cost_delta_cents), 0) AS cents
        FROM work_unit_events AS e JOIN work_units AS s ON s.id = e.unit_id
        WHERE e.event_type = 'cost_recorded' AND s.fleet = c.fleet
          AND (cap.domain IS NULL OR s.domain = cap.domain)
          AND e.created_at < c.created_at - interval '5 seconds') AS spent
    WHERE spent.cents >= cap.cap_cents
    UNION ALL
    SELECT u.id, 'unit_disposition_matches_state',
           format('unit is %s with disposition %s', u.state, u.disposition)
    FROM work_units AS u
    WHERE NOT CASE u.state WHEN 'done' THEN u.disposition IS NOT DISTINCT FROM 'MIGRATED'
                           WHEN 'abandoned' THEN coalesce(u.disposition IN ('DROPPED', 'DEFERRED', 'DEAD'), false)
                           ELSE u.disposition IS NULL END
       OR (u.disposition IS NULL) <> (u.disposed_at IS NULL)
    UNION ALL
    -- A mark no pause holds would keep the unit out of pull-next's queue (0032). (A paused
    -- unit left unmarked is allowed: it only costs a claim the way past it.)
    SELECT u.id, 'unit_paused_mark_kept',
           format('unit is %s and marked in_paused_scope, which only a ready unit that a '
                  'pause holds may be (fleet %s, domain %s); pause its scope and resume it '
                  'with POST /controls to have the mark written anew', u.state, u.fleet, u.domain)
    FROM work_units AS u
    WHERE u.in_paused_scope
      AND (u.state <> 'ready'
           OR NOT EXISTS (SELECT FROM controls AS c
                          WHERE c.fleet = u.fleet AND (c.domain IS NULL OR c.domain = u.domain)
                            AND c.paused))
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
