-- The benchmark's own hand-written statements: the limits the ledger is measured against.
-- Loaded by work_ledger.db.queries.parse_named_sql, like the product's statements.

-- name: bare_create
-- A bare queue table: no attempts, no events, no triggers. Same partial-index idea as the
-- ledger's ready index.
CREATE TABLE bench_items (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    state      text NOT NULL DEFAULT 'ready',
    claimed_by text,
    claimed_at timestamptz
);
CREATE INDEX bench_items_ready_idx ON bench_items (id) WHERE state = 'ready';

-- name: bare_seed
-- $1 how many ready items.
INSERT INTO bench_items (state) SELECT 'ready' FROM generate_series(1, $1);

-- name: bare_claim
-- The raw-SQL limit: one statement, one row, oldest first. $1 worker.
UPDATE bench_items SET state = 'claimed', claimed_by = $1, claimed_at = now()
WHERE id = (SELECT id FROM bench_items WHERE state = 'ready'
            ORDER BY id FOR NO KEY UPDATE SKIP LOCKED LIMIT 1)
RETURNING id;

-- name: ledger_seed
-- $1 how many ready units, registered in created_at order (the product's DEFAULT
-- clock_timestamp()), each with its `registered` event as register_units writes it.
WITH units AS (
    INSERT INTO work_units (external_ref, fleet)
    SELECT 'bench-' || g, 'bench' FROM generate_series(1, $1) AS g
    RETURNING id
)
INSERT INTO work_unit_events (unit_id, event_type, to_state, agent_id)
SELECT id, 'registered', 'ready', 'bench' FROM units;

-- name: ledger_claim
-- The raw ledger-shaped claim, against the real schema (its triggers and constraints fire):
-- the oldest ready unit flips to claimed with a lease, its attempt row and its event row
-- are written in the same statement. No resume, no stale reclaim, no domain filter, no
-- controls or budgets asked; the queue's index (ready units no pause holds, 0032) walked.
-- $1 agent, $2 lease seconds.
WITH picked AS (
    SELECT id FROM work_units WHERE state = 'ready' AND NOT in_paused_scope
    ORDER BY created_at, id LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED
), claimed AS (
    UPDATE work_units AS u
    SET state = 'claimed', claimed_by = $1, attempt_count = u.attempt_count + 1,
        lease_expires_at = now() + make_interval(secs => $2), last_heartbeat_at = now()
    FROM picked AS p
    WHERE u.id = p.id
    RETURNING u.id, u.attempt_count
), attempt AS (
    INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id)
    SELECT id, attempt_count, $1 FROM claimed
    RETURNING id, unit_id
), event AS (
    INSERT INTO work_unit_events (unit_id, attempt_id, event_type, from_state, to_state, agent_id)
    SELECT unit_id, id, 'claimed', 'ready', 'claimed', $1 FROM attempt
)
SELECT unit_id, id AS attempt_id FROM attempt;

-- name: ledger_finish
-- The finish commit after a raw claim: claimed → in_progress (the holder starts), with
-- its event. $1 unit, $2 attempt, $3 agent.
WITH unit AS (
    UPDATE work_units SET state = 'in_progress'
    WHERE id = $1 AND state = 'claimed' AND claimed_by = $3
    RETURNING id
)
INSERT INTO work_unit_events (unit_id, attempt_id, event_type, from_state, to_state, agent_id)
SELECT id, $2, 'transitioned', 'claimed', 'in_progress', $3 FROM unit;

-- name: ledger_cost
-- Cost on an attempt and its unit, with its cost record and event. $1 attempt, $2 agent,
-- $3 cents.
WITH attempt AS (
    UPDATE work_unit_attempts SET cost_cents = cost_cents + $3 WHERE id = $1 RETURNING unit_id
), record AS (
    INSERT INTO cost_records (attempt_id, unit_id, cost_cents, recorded_by)
    SELECT $1, unit_id, $3, $2 FROM attempt
), unit AS (
    UPDATE work_units AS u SET cost_cents = u.cost_cents + $3
    FROM attempt AS a
    WHERE u.id = a.unit_id
    RETURNING u.id
)
INSERT INTO work_unit_events (unit_id, attempt_id, event_type, agent_id, cost_delta_cents)
SELECT id, $1, 'cost_recorded', $2, $3 FROM unit;

-- name: ledger_verify
-- in_progress → verified with an evidence link; the attempt ends verified. $1 unit,
-- $2 attempt, $3 agent, $4 evidence url.
WITH unit AS (
    UPDATE work_units
    SET state = 'verified', claimed_by = NULL, lease_expires_at = NULL,
        evidence_urls = array_append(evidence_urls, $4)
    WHERE id = $1 AND state = 'in_progress' AND claimed_by = $3
    RETURNING id
), attempt AS (
    UPDATE work_unit_attempts SET outcome = 'verified', ended_at = now(), evidence_url = $4
    WHERE id = $2 AND outcome IS NULL
    RETURNING id
)
INSERT INTO work_unit_events (unit_id, attempt_id, event_type, from_state, to_state, agent_id)
SELECT id, $2, 'transitioned', 'in_progress', 'verified', $3 FROM unit;

-- name: ledger_dispose
-- verified → done (MIGRATED), with its event. $1 unit, $2 attempt, $3 agent.
WITH unit AS (
    UPDATE work_units SET state = 'done', disposition = 'MIGRATED', disposed_at = now()
    WHERE id = $1 AND state = 'verified'
    RETURNING id
)
INSERT INTO work_unit_events (unit_id, attempt_id, event_type, from_state, to_state, agent_id)
SELECT id, $2, 'disposed', 'verified', 'done', $3 FROM unit;

-- name: ledger_controls_seed
-- Flow controls (DESIGN §13) beside a ledger_seed backlog, which none of them stops:
-- each seeded unit carries an exclusion key of its own (a claim takes it: a held_keys row
-- each); 200 other fleets with a cap of 10, every other one paused fleet-wide, and a
-- domain cap in each; and 1,000 ready units of 10 of those paused fleets, registered a day
-- before the backlog, so they are ahead of it in the queue and every pull-next skips them.
UPDATE work_units SET exclusive = ARRAY['module-' || external_ref] WHERE fleet = 'bench';
INSERT INTO controls (fleet, domain, max_live, paused, paused_since, pause_reason, reason,
                      updated_by)
SELECT 'other-' || i, d, 10, i % 2 = 0 AND d IS NULL,
       CASE WHEN i % 2 = 0 AND d IS NULL THEN now() END,
       CASE WHEN i % 2 = 0 AND d IS NULL THEN 'bench' END, 'bench', 'bench'
FROM generate_series(1, 200) AS i, (VALUES (NULL), ('orders')) AS s (d);
WITH units AS (
    INSERT INTO work_units (external_ref, fleet, created_at)
    SELECT 'paused-' || g, 'other-' || (2 * (g % 10 + 1)), now() - interval '1 day'
    FROM generate_series(1, 1000) AS g
    RETURNING id
)
INSERT INTO work_unit_events (unit_id, event_type, to_state, agent_id)
SELECT id, 'registered', 'ready', 'bench' FROM units;
ANALYZE work_units;

-- name: controls_keys_elsewhere
-- After ledger_controls_seed: the keys on other scopes, as issue 38's goal has them. The
-- backlog's units carry none; 100 units of the capped fleets that are not paused hold one
-- each (claimed, with their attempts), so held_keys is not empty.
UPDATE work_units SET exclusive = NULL WHERE fleet = 'bench';
INSERT INTO work_units (external_ref, fleet, exclusive)
SELECT 'holding-' || i, 'other-' || i, ARRAY['module-held-' || i]
FROM generate_series(1, 199, 2) AS i;
WITH claimed AS (
    UPDATE work_units AS u
    SET state = 'claimed', claimed_by = 'holder-' || u.external_ref, attempt_count = 1,
        lease_expires_at = now() + interval '1 day', last_heartbeat_at = now()
    WHERE u.external_ref LIKE 'holding-%'
    RETURNING u.id, u.claimed_by
)
INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id)
SELECT id, 1, claimed_by FROM claimed;
ANALYZE work_units;
