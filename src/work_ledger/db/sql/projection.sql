-- The Temporal projection (DESIGN §9) and the reconciliation report. The transitions
-- themselves reuse the guarded statements of units.sql; these statements only find and
-- lock the unit of a workflow, read what the projection already recorded for it, and
-- append the `projected` event that makes the delivery exactly-once.

-- name: projection_lock_unit
-- $1 workflow id. Every delivery for a unit takes this row lock first and keeps it to the
-- end of its transaction, so deliveries of one unit's events run one after the other.
SELECT u.id FROM work_units AS u WHERE u.workflow_id = $1 FOR NO KEY UPDATE;

-- name: projection_target
-- $1 unit id (locked above), $2 source_event_id. Read after the lock, so it sees every
-- delivery committed before ours: the unit, its live attempt, whether this event was
-- already recorded, and the newest projected event so far (the ordering key: occurred_at,
-- then the run's event id, then source_event_id by code point, as Python compares it).
-- A `noted` event (a Temporal event that is no lifecycle step) never counts as the newest:
-- a late start must still apply after an activity's events.
SELECT u AS unit, a AS attempt,
       EXISTS (SELECT 1 FROM work_unit_events AS d WHERE d.source_event_id = $2) AS seen,
       n.occurred_at AS newest_occurred_at, n.event_id AS newest_event_id,
       n.source_event_id AS newest_source_event_id
FROM work_units AS u
LEFT JOIN work_unit_attempts AS a ON a.unit_id = u.id AND a.outcome IS NULL
LEFT JOIN LATERAL (
    SELECT (e.detail ->> 'occurred_at')::timestamptz AS occurred_at,
           coalesce((e.detail ->> 'event_id')::bigint, 0) AS event_id,
           e.source_event_id COLLATE "C" AS source_event_id
    FROM work_unit_events AS e
    WHERE e.unit_id = u.id AND e.event_type = 'projected' AND e.source_event_id IS NOT NULL
      AND (e.detail ->> 'step') IS DISTINCT FROM 'noted'
    ORDER BY 1 DESC, 2 DESC, 3 DESC
    LIMIT 1
) AS n ON true
WHERE u.id = $1;

-- name: record_projected_event
-- $1 unit id, $2 source_event_id, $3 acting agent, $4 detail, $5 attempt id or null.
-- Zero rows: the event was recorded before (the caller rolls its transaction back).
-- from_state/to_state stay null: the transitions it caused are their own events.
INSERT INTO work_unit_events (unit_id, attempt_id, event_type, agent_id, detail, source_event_id)
VALUES ($1, $5, 'projected', $3, $4, $2)
ON CONFLICT (source_event_id) WHERE source_event_id IS NOT NULL DO NOTHING
RETURNING id;

-- name: reconcile_units
-- Every unit that carries a workflow id, for `work-ledger reconcile` (read-only).
SELECT u.id, u.external_ref, u.workflow_id, u.state, u.disposition, u.disposed_at,
       u.claimed_by, u.updated_at
FROM work_units AS u
WHERE u.workflow_id IS NOT NULL
ORDER BY u.workflow_id;

-- name: follow_checkpoint
-- $1 namespace. Where the follower's sweep of closed executions stands (no row: never ran).
SELECT c.swept_until FROM temporal_follow_checkpoints AS c WHERE c.namespace = $1;

-- name: follow_advance_checkpoint
-- $1 namespace, $2 the new high-water mark. Never moves it back (GREATEST here; the
-- trigger refuses a direct UPDATE that would).
INSERT INTO temporal_follow_checkpoints AS c (namespace, swept_until)
VALUES ($1, $2)
ON CONFLICT (namespace) DO UPDATE
SET swept_until = GREATEST(c.swept_until, EXCLUDED.swept_until), updated_at = now()
RETURNING c.swept_until;

-- name: follow_held_units
-- The workflows whose units the projection still holds (claimed, in_progress or blocked
-- by temporal:<workflow_id>): the follower describes each, strongly consistent, so a close
-- that visibility indexed late or outside the sweep's window is not missed.
SELECT u.workflow_id
FROM work_units AS u
WHERE u.state IN ('claimed', 'in_progress', 'blocked')
  AND u.workflow_id IS NOT NULL
  AND u.claimed_by = 'temporal:' || u.workflow_id
ORDER BY u.workflow_id;
