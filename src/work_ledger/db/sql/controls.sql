-- The fleet's flow controls (DESIGN §13): caps, pause, ramp gate. The claim decides them
-- itself (wl_admit_unit and the claim statements' filters, 0022); these statements set
-- and read them. set_controls runs them in one transaction (service/controls.py).

-- name: lock_control
-- $1 fleet, $2 domain or null. The scope's control row, locked until the change commits.
SELECT c.* FROM controls AS c
WHERE c.fleet = $1 AND c.domain IS NOT DISTINCT FROM $2
FOR NO KEY UPDATE;

-- name: lock_units_for_a_new_control
-- Before a scope's first control row: waits for every write to units in flight and holds
-- off new ones until this commits, so no claim that could not see the new row commits
-- after it (a rare operator action). Conflicts with itself: creators go one at a time.
LOCK TABLE work_units IN SHARE ROW EXCLUSIVE MODE;

-- name: gate_figures
-- $1 fleet, $2 domain or null, $3 since (the cap's last change), $4 last_attempts: how
-- many attempts of the scope ended since, and how many of the last $4 of them ended
-- without verifying or splitting.
WITH ended AS (
    SELECT a.outcome, a.ended_at
    FROM work_unit_attempts AS a
    JOIN work_units AS u ON u.id = a.unit_id
    WHERE u.fleet = $1 AND ($2::text IS NULL OR u.domain = $2)
      AND a.ended_at IS NOT NULL AND a.ended_at >= $3
), last AS (
    SELECT outcome FROM ended ORDER BY ended_at DESC LIMIT $4
)
SELECT (SELECT count(*) FROM ended) AS ended_attempts,
       (SELECT count(*) FROM last) AS counted,
       (SELECT count(*) FROM last
        WHERE outcome IN ('failed', 'abandoned', 'superseded')) AS failed;

-- name: upsert_control
-- $1 fleet, $2 domain, $3 max_live, $4 paused, $5 pause_reason, $6 gate, $7 reason,
-- $8 acting principal, $9 whether max_live changed. Every field is written as decided.
INSERT INTO controls AS c (fleet, domain, max_live, paused, paused_since, pause_reason, gate,
                           reason, updated_by)
VALUES ($1, $2, $3, $4, CASE WHEN $4 THEN now() END, $5, $6::jsonb, $7, $8)
ON CONFLICT ON CONSTRAINT controls_scope_unique DO UPDATE
SET max_live = EXCLUDED.max_live,
    paused = EXCLUDED.paused,
    paused_since = CASE WHEN NOT EXCLUDED.paused THEN NULL
                        ELSE coalesce(c.paused_since, now()) END,
    pause_reason = CASE WHEN EXCLUDED.paused AND c.paused THEN c.pause_reason
                        ELSE EXCLUDED.pause_reason END,
    gate = EXCLUDED.gate,
    reason = EXCLUDED.reason,
    updated_by = EXCLUDED.updated_by,
    updated_at = now(),
    cap_changed_at = CASE WHEN $9 THEN now() ELSE c.cap_changed_at END
RETURNING c.fleet, c.domain;

-- name: append_control_event
-- $1 fleet, $2 domain, $3 actor, $4 before (json or null), $5 after (json), $6 reason,
-- $7 forced, $8 the gate's figures (json or null).
INSERT INTO control_events (fleet, domain, actor, before, after, reason, forced, gate_figures)
VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $7, $8::jsonb)
RETURNING id;

-- name: list_controls
-- $1 fleet or null, $2 domain or null (with a fleet: that one scope). Each scope with its
-- live and held counts now.
SELECT c.fleet, c.domain, c.max_live, n.live, n.held, c.paused, c.paused_since,
       c.pause_reason, c.paused AND n.held = 0 AS drained, c.gate, c.reason, c.updated_at
FROM controls AS c
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE u.state IN ('claimed', 'in_progress')) AS live,
           count(*) AS held
    FROM work_units AS u
    WHERE u.state IN ('claimed', 'in_progress', 'blocked') AND u.fleet = c.fleet
      AND (c.domain IS NULL OR u.domain = c.domain)
) AS n
WHERE ($1::text IS NULL OR c.fleet = $1)
  AND ($1::text IS NULL OR c.domain IS NOT DISTINCT FROM $2)
ORDER BY c.fleet, c.domain NULLS FIRST;

-- name: list_control_events
-- $1 before this id or null (keyset), $2 limit. Newest first.
SELECT e.id, e.fleet, e.domain, e.actor, e.before, e.after, e.reason, e.forced,
       e.gate_figures, e.created_at
FROM control_events AS e
WHERE $1::bigint IS NULL OR e.id < $1
ORDER BY e.id DESC
LIMIT $2;

-- name: closed_control_of
-- $1 fleet, $2 domain, $3 whether the unit is ready (a cap refuses only an admission):
-- the control that keeps a claim out of this scope now, the fleet's first.
SELECT c.fleet, c.domain, c.paused, c.pause_reason, c.max_live, n.live
FROM controls AS c
CROSS JOIN LATERAL (
    SELECT count(*) AS live FROM work_units AS u
    WHERE u.state IN ('claimed', 'in_progress') AND u.fleet = c.fleet
      AND (c.domain IS NULL OR u.domain = c.domain)
) AS n
WHERE c.fleet = $1 AND (c.domain IS NULL OR c.domain = $2)
  AND (c.paused OR ($3 AND c.max_live <= n.live))
ORDER BY c.paused DESC, c.domain NULLS FIRST;

-- name: key_holders_of
-- $1 unit: its keys another unit holds now, with that unit.
SELECT h.key, o.id, o.external_ref, o.state
FROM work_units AS u
JOIN held_keys AS h ON h.key = ANY (u.exclusive) AND h.unit_id <> u.id
JOIN work_units AS o ON o.id = h.unit_id
WHERE u.id = $1
ORDER BY h.key;
