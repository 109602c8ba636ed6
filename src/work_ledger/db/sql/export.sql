-- Export for the long term (docs/export.md): one JSON object per row, made by PostgreSQL
-- (timestamps ISO 8601 with their UTC offset, jsonb as JSON, arrays as arrays), read in
-- one repeatable-read snapshot so the four files agree with each other.

-- name: export_units
SELECT row_to_json(r)::text FROM (
    SELECT id, external_ref, fleet, domain, state, disposition, disposed_at, workflow_id,
           claimed_by, lease_expires_at, last_heartbeat_at, attempt_count, cost_cents,
           evidence_urls, created_at, updated_at
    FROM work_units ORDER BY created_at, id
) AS r;

-- name: export_attempts
SELECT row_to_json(r)::text FROM (
    SELECT id, unit_id, attempt_no, agent_id, started_at, outcome, cost_cents, evidence_url,
           ended_at
    FROM work_unit_attempts ORDER BY unit_id, attempt_no
) AS r;

-- name: export_events
SELECT row_to_json(r)::text FROM (
    SELECT id, unit_id, attempt_id, event_type, from_state, to_state, agent_id,
           cost_delta_cents, detail, source_event_id, created_at
    FROM work_unit_events ORDER BY id
) AS r;

-- name: export_questions
SELECT row_to_json(r)::text FROM (
    SELECT id, unit_id, attempt_id, question, status, answer, assignee_group_slug,
           external_task_id, asked_by, answered_by, created_at, closed_at
    FROM blocking_questions ORDER BY created_at, id
) AS r;

-- name: ledger_exists
-- Restore refuses a database that already holds a ledger (DESIGN §10).
SELECT to_regclass('work_units') IS NOT NULL;
