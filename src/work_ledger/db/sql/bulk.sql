-- Bulk operations (DESIGN §13): dispose or release every unit a filter matches, in one
-- statement each, so that a real run is one transaction and one round trip.
--
-- Both statements take the same first parameters, the filter and its bound:
-- $1 fleet, $2 domain or null, $3 states or null, $4 external_ref prefix or null,
-- $5 holder (claimed_by) or null, $6 limit. They lock up to limit + 1 matching units in id
-- order (one order for every bulk run: two never deadlock on each other), decide each unit
-- from the row they locked, and write only when `$dry` is false and no more than `limit`
-- units matched. A dry run decides the same way from the same locked rows, so its answer
-- is what the real run would do at that moment; it writes nothing.
-- Each row answered is one matched unit: `allowed` (it changes, or would), `to_state`.
-- More than `limit` rows back means the filter matched more: nothing was written.

-- name: bulk_dispose_units
-- $7 disposition, $8 the states it may leave (states_disposable_as), $9 reason,
-- $10 acting principal, $11 dry run, $12 operation id. Each disposed unit is closed as
-- dispose_unit closes one (as an operator: no holder, no fenced attempt) with its
-- ordinary `disposed` event, whose detail also carries `bulk` (operation and reason).
WITH matched AS (
    SELECT u.id, u.external_ref, u.state AS from_state, u.attempt_count
    FROM work_units AS u
    WHERE u.fleet = $1
      AND ($2::text IS NULL OR u.domain = $2)
      AND ($3::work_state[] IS NULL OR u.state = ANY ($3::work_state[]))
      AND ($4::text IS NULL OR starts_with(u.external_ref, $4))
      AND ($5::text IS NULL OR u.claimed_by = $5)
    ORDER BY u.id
    LIMIT $6::integer + 1
    FOR NO KEY UPDATE OF u
), plan AS (
    SELECT m.id, m.external_ref, m.from_state, a.id AS attempt_id, a.outcome,
           m.from_state = ANY ($8::work_state[]) AS allowed,
           CASE WHEN $7::work_disposition = 'MIGRATED' THEN 'done'
                ELSE 'abandoned' END::work_state AS to_state,
           NOT $11::boolean AND (SELECT count(*) FROM matched) <= $6::integer AS writing
    FROM matched AS m
    LEFT JOIN work_unit_attempts AS a ON a.unit_id = m.id AND a.attempt_no = m.attempt_count
), unit AS (
    UPDATE work_units AS u
    SET state = p.to_state, disposition = $7::work_disposition, disposed_at = now(),
        claimed_by = NULL, lease_expires_at = NULL,
        failed_attempts = u.failed_attempts + CASE WHEN p.attempt_id IS NOT NULL AND p.outcome IS NULL
                                                        AND p.from_state <> 'blocked' THEN 1 ELSE 0 END
    FROM plan AS p
    WHERE u.id = p.id AND p.allowed AND p.writing
    RETURNING u.id, u.state, p.from_state, p.attempt_id
), attempt AS (
    UPDATE work_unit_attempts AS a
    SET outcome = CASE WHEN t.from_state = 'blocked' THEN 'blocked'
                       ELSE 'abandoned' END::attempt_outcome,
        ended_at = now()
    FROM unit AS t
    WHERE a.id = t.attempt_id AND a.outcome IS NULL
    RETURNING a.unit_id
), cancelled AS (
    UPDATE blocking_questions AS q
    SET status = 'cancelled', closed_at = now(), answered_by = $10
    FROM unit AS t
    WHERE q.unit_id = t.id AND q.status = 'open'
    RETURNING q.id, q.unit_id
), event AS (
    INSERT INTO work_unit_events
        (unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
    SELECT t.id, t.attempt_id, 'disposed', t.from_state, t.state, $10,
           jsonb_strip_nulls(jsonb_build_object(
               'disposition', $7::work_disposition, 'reason', $9::text,
               'cancelled_question_ids', c.ids,
               'ended_attempt', e.unit_id IS NOT NULL,
               'bulk', jsonb_build_object('operation', $12::uuid, 'reason', $9::text)))
    -- Joins, not a subquery per unit: a CTE has no index, and 10,000 units each scanning
    -- the others' rows would be quadratic.
    FROM unit AS t
    LEFT JOIN attempt AS e ON e.unit_id = t.id
    LEFT JOIN (SELECT unit_id, array_agg(id) AS ids FROM cancelled GROUP BY unit_id) AS c
           ON c.unit_id = t.id
)
SELECT p.id, p.external_ref, p.from_state, p.to_state, p.allowed
FROM plan AS p
ORDER BY p.external_ref;

-- name: bulk_release_units
-- $7 reason, $8 acting principal, $9 dry run, $10 operation id. Each released unit's
-- attempt ends `abandoned`, as transition_unit ends an operator's release: the unit goes
-- back to ready, or parks in waiting with the ledger's question when that was its last
-- allowed attempt. Its ordinary `released` event's detail also carries `bulk`.
WITH matched AS (
    SELECT u.id, u.external_ref, u.state AS from_state,
           u.failed_attempts + 1 >= u.attempts_allowed AS last_attempt
    FROM work_units AS u
    WHERE u.fleet = $1
      AND ($2::text IS NULL OR u.domain = $2)
      AND ($3::work_state[] IS NULL OR u.state = ANY ($3::work_state[]))
      AND ($4::text IS NULL OR starts_with(u.external_ref, $4))
      AND ($5::text IS NULL OR u.claimed_by = $5)
    ORDER BY u.id
    LIMIT $6::integer + 1
    FOR NO KEY UPDATE OF u
), plan AS (
    SELECT m.id, m.external_ref, m.from_state, a.id AS attempt_id,
           m.from_state IN ('claimed', 'in_progress') AND a.id IS NOT NULL AS allowed,
           CASE WHEN m.last_attempt THEN 'waiting' ELSE 'ready' END::work_state AS to_state,
           NOT $9::boolean AND (SELECT count(*) FROM matched) <= $6::integer AS writing
    FROM matched AS m
    LEFT JOIN work_unit_attempts AS a ON a.unit_id = m.id AND a.outcome IS NULL
), unit AS (
    UPDATE work_units AS u
    SET state = p.to_state, failed_attempts = u.failed_attempts + 1,
        claimed_by = NULL, lease_expires_at = NULL
    FROM plan AS p
    WHERE u.id = p.id AND p.allowed AND p.writing
    RETURNING u.id, u.state, p.from_state, p.attempt_id
), attempt AS (
    UPDATE work_unit_attempts AS a
    SET outcome = 'abandoned', ended_at = now()
    FROM unit AS t
    WHERE a.id = t.attempt_id
    RETURNING a.id
), question AS (
    INSERT INTO blocking_questions (unit_id, attempt_id, question, asked_by)
    SELECT t.id, t.attempt_id,
           wl_attempt_limit_question(t.id, t.attempt_id, 'abandoned', $7::text), 'work-ledger'
    FROM unit AS t WHERE t.state = 'waiting'
    RETURNING id, unit_id
), event AS (
    INSERT INTO work_unit_events
        (unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
    SELECT t.id, t.attempt_id, 'released', t.from_state, t.state, $8,
           jsonb_strip_nulls(jsonb_build_object(
               'reason', $7::text, 'outcome', 'abandoned',
               'attempt_limit_reached', CASE WHEN t.state = 'waiting' THEN true END,
               'question_id', q.id,
               'bulk', jsonb_build_object('operation', $10::uuid, 'reason', $7::text)))
    FROM unit AS t
    LEFT JOIN question AS q ON q.unit_id = t.id
)
SELECT p.id, p.external_ref, p.from_state, p.to_state, p.allowed
FROM plan AS p
ORDER BY p.external_ref;

-- name: bulk_count_units
-- How many units the bulk filter matches ($1..$5 as above), in any state: the figure a
-- refusal for more matches than `limit` names.
SELECT count(*) AS matched
FROM work_units AS u
WHERE u.fleet = $1
  AND ($2::text IS NULL OR u.domain = $2)
  AND ($3::work_state[] IS NULL OR u.state = ANY ($3::work_state[]))
  AND ($4::text IS NULL OR starts_with(u.external_ref, $4))
  AND ($5::text IS NULL OR u.claimed_by = $5);
