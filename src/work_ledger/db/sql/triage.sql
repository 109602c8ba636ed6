-- Triage's writes: a blocking question routed into the human queue, once.

-- name: route_question
-- $1 question id, $2 external_task_id, $3 acting principal. Sets external_task_id on an
-- open, unrouted question and appends its `routed` event. No row: routed already (by
-- anyone, with any id), closed, or unknown; the caller looks once to say which. Two
-- routings of one question serialize on its row: the second re-reads it routed and
-- changes nothing.
WITH routed AS (
    UPDATE blocking_questions AS q
    SET external_task_id = $2
    WHERE q.id = $1 AND q.status = 'open' AND q.external_task_id IS NULL
    RETURNING q AS question
), event AS (
    INSERT INTO work_unit_events (unit_id, attempt_id, event_type, agent_id, detail)
    SELECT (r.question).unit_id, (r.question).attempt_id, 'routed', $3,
           jsonb_build_object('question_id', (r.question).id, 'external_task_id', $2::text,
                              'assignee_group_slug', (r.question).assignee_group_slug)
    FROM routed AS r
)
SELECT r.question FROM routed AS r;
