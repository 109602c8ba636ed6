-- Reads. Lists are keyset pages: the cursor is the last row's sort key, never an offset.

-- name: find_unit
-- $1 an external_ref (a uuid-shaped path is taken as the unit's id before this).
SELECT u AS unit FROM work_units AS u WHERE u.external_ref = $1;

-- name: unit_with_history
-- $1 unit id: the unit, its attempts (oldest first) and its questions (oldest first).
SELECT u AS unit,
       coalesce((SELECT array_agg(a ORDER BY a.attempt_no)
                 FROM work_unit_attempts AS a WHERE a.unit_id = u.id), '{}') AS attempts,
       coalesce((SELECT array_agg(q ORDER BY q.created_at, q.id)
                 FROM blocking_questions AS q WHERE q.unit_id = u.id), '{}') AS questions
FROM work_units AS u WHERE u.id = $1;

-- name: unit_and_last_attempt
-- $1 unit id: what a refused write needs to explain itself.
SELECT u AS unit, a AS attempt
FROM work_units AS u
LEFT JOIN work_unit_attempts AS a ON a.unit_id = u.id AND a.attempt_no = u.attempt_count
WHERE u.id = $1;

-- name: attempt_and_unit
-- $1 attempt id.
SELECT u AS unit, a AS attempt
FROM work_unit_attempts AS a JOIN work_units AS u ON u.id = a.unit_id
WHERE a.id = $1;

-- name: unit_held_by
-- $1 agent: the unit it holds live, if any.
SELECT u AS unit FROM work_units AS u
WHERE u.claimed_by = $1 AND u.state IN ('claimed', 'in_progress');

-- name: list_units
-- Oldest first. $1 state, $2 domain, $3 fleet, $4 disposition (each null for any),
-- $5 cursor created_at, $6 cursor id (null for the first page), $7 limit.
SELECT u AS unit FROM work_units AS u
WHERE ($1::work_state IS NULL OR u.state = $1)
  AND ($2::text IS NULL OR u.domain = $2)
  AND ($3::text IS NULL OR u.fleet = $3)
  AND ($4::work_disposition IS NULL OR u.disposition = $4)
  -- No cursor starts before every unit: the comparison stays an index condition even in a
  -- cached generic plan, which an `IS NULL OR` would turn into a filter from the first row.
  -- UTC wall-clock time orders as created_at does; work_units_listing_idx (migration 0006).
  AND (u.created_at AT TIME ZONE 'UTC', u.id)
      > (coalesce($5::timestamptz, '-infinity') AT TIME ZONE 'UTC',
         coalesce($6::uuid, '00000000-0000-0000-0000-000000000000'))
ORDER BY u.created_at AT TIME ZONE 'UTC', u.id
LIMIT $7;

-- name: list_events
-- Newest first. $1 unit id or null (all units), $2 cursor id (null: first page), $3 limit.
-- Ids grow with time, so (created_at, id) order and id order agree within a unit; the
-- global page follows the (created_at desc, id desc) keyset index.
SELECT e.id, e.unit_id, e.attempt_id, e.event_type, e.from_state, e.to_state, e.agent_id,
       e.cost_delta_cents, e.detail, e.source_event_id, e.created_at
FROM work_unit_events AS e
WHERE ($1::uuid IS NULL OR e.unit_id = $1)
  AND ($2::bigint IS NULL
       OR (e.created_at, e.id) < (SELECT c.created_at, c.id FROM work_unit_events AS c WHERE c.id = $2))
ORDER BY e.created_at DESC, e.id DESC
LIMIT $3;

-- name: list_questions
-- Oldest first. $1 status, $2 assignee group (null for any), $3 cursor created_at,
-- $4 cursor id, $5 limit, $6 routed (true: has an external_task_id, false: has none,
-- null: either).
SELECT q AS question FROM blocking_questions AS q
WHERE ($1::question_status IS NULL OR q.status = $1)
  AND ($2::text IS NULL OR q.assignee_group_slug = $2)
  AND ($6::boolean IS NULL OR (q.external_task_id IS NOT NULL) = $6)
  AND ($3::timestamptz IS NULL OR (q.created_at, q.id) > ($3, $4::uuid))
ORDER BY q.created_at, q.id
LIMIT $5;

-- name: get_question
SELECT q AS question FROM blocking_questions AS q WHERE q.id = $1;
