-- Claude Code's telemetry and final result as cost (DESIGN §13, migration 0024).

-- name: record_telemetry
-- One OTLP batch's api_request records, in one statement. $1-$8 parallel arrays: attempt,
-- record identity, model (without a bracketed suffix), cost_usd, input, output, cache read
-- and cache write tokens; $9 the token's agent (its attempts and its sub-agents'), or null for
-- a collector's projector token (any attempt); $10 acting principal. A record of an unknown
-- or another agent's attempt is dropped; a record already seen adds nothing; the rest add to
-- their (attempt, model)'s telemetry sums, and what that raises the recorded figures by is
-- kept as one estimated cost record per pair. Units are locked in id order, as a cost
-- record locks its unit, so batches never deadlock with each other or with a claim.
WITH input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::numeric[], $5::bigint[],
                $6::bigint[], $7::bigint[], $8::bigint[])
        AS i (attempt_id, record_key, model, cost_usd, input_tokens, output_tokens,
              cache_read_tokens, cache_write_tokens)
), target AS (
    SELECT a.id AS attempt_id, a.unit_id
    FROM work_unit_attempts AS a
    JOIN work_units AS u ON u.id = a.unit_id
    WHERE a.id = ANY ($1::uuid[])
      AND ($9::text IS NULL OR a.agent_id = $9 OR starts_with(a.agent_id, $9 || '/'))
    ORDER BY u.id
    FOR NO KEY UPDATE OF u
), fresh AS (
    INSERT INTO telemetry_records AS r
        (attempt_id, record_key, model, cost_usd, input_tokens, output_tokens,
         cache_read_tokens, cache_write_tokens)
    SELECT DISTINCT ON (i.attempt_id, i.record_key)
           i.attempt_id, i.record_key, i.model, i.cost_usd, i.input_tokens, i.output_tokens,
           i.cache_read_tokens, i.cache_write_tokens
    FROM input AS i JOIN target AS t ON t.attempt_id = i.attempt_id
    ORDER BY i.attempt_id, i.record_key
    ON CONFLICT ON CONSTRAINT telemetry_record_once DO NOTHING
    RETURNING r.attempt_id, r.model, r.cost_usd, r.input_tokens, r.output_tokens,
              r.cache_read_tokens, r.cache_write_tokens
), spend AS (
    INSERT INTO attempt_model_spend AS s
        (attempt_id, model, telemetry_usd, telemetry_input_tokens, telemetry_output_tokens,
         telemetry_cache_read_tokens, telemetry_cache_write_tokens)
    SELECT attempt_id, model, sum(cost_usd), sum(input_tokens), sum(output_tokens),
           sum(cache_read_tokens), sum(cache_write_tokens)
    FROM fresh
    GROUP BY attempt_id, model
    ORDER BY attempt_id, model
    ON CONFLICT ON CONSTRAINT attempt_model_spend_key DO UPDATE
    SET telemetry_usd = s.telemetry_usd + excluded.telemetry_usd,
        telemetry_input_tokens = s.telemetry_input_tokens + excluded.telemetry_input_tokens,
        telemetry_output_tokens = s.telemetry_output_tokens + excluded.telemetry_output_tokens,
        telemetry_cache_read_tokens
            = s.telemetry_cache_read_tokens + excluded.telemetry_cache_read_tokens,
        telemetry_cache_write_tokens
            = s.telemetry_cache_write_tokens + excluded.telemetry_cache_write_tokens
    RETURNING s.attempt_id, s.model, s.delta_cents, s.delta_input_tokens,
              s.delta_output_tokens, s.delta_cache_read_tokens, s.delta_cache_write_tokens
), record AS (
    INSERT INTO cost_records AS c
        (attempt_id, unit_id, cost_cents, model, input_tokens, output_tokens,
         cache_read_tokens, cache_write_tokens, estimated, recorded_by)
    SELECT s.attempt_id, t.unit_id, s.delta_cents, s.model, s.delta_input_tokens,
           s.delta_output_tokens, s.delta_cache_read_tokens, s.delta_cache_write_tokens,
           true, $10
    FROM spend AS s JOIN target AS t ON t.attempt_id = s.attempt_id
    WHERE s.delta_cents + s.delta_input_tokens + s.delta_output_tokens
          + s.delta_cache_read_tokens + s.delta_cache_write_tokens > 0
    RETURNING c.id, c.attempt_id, c.unit_id, c.cost_cents, c.model, c.input_tokens,
              c.output_tokens, c.cache_read_tokens, c.cache_write_tokens
), attempt AS (
    UPDATE work_unit_attempts AS a
    SET cost_cents = a.cost_cents + r.cents
    FROM (SELECT attempt_id, sum(cost_cents) AS cents FROM record GROUP BY attempt_id) AS r
    WHERE a.id = r.attempt_id AND r.cents > 0
), unit AS (
    UPDATE work_units AS u
    SET cost_cents = u.cost_cents + r.cents
    FROM (SELECT unit_id, sum(cost_cents) AS cents FROM record GROUP BY unit_id) AS r
    WHERE u.id = r.unit_id AND r.cents > 0
), event AS (
    INSERT INTO work_unit_events (unit_id, attempt_id, event_type, agent_id, cost_delta_cents, detail)
    SELECT unit_id, attempt_id, 'cost_recorded', $10, cost_cents,
           jsonb_build_object(
               'model', model, 'input_tokens', input_tokens, 'output_tokens', output_tokens,
               'cache_read_tokens', cache_read_tokens, 'cache_write_tokens', cache_write_tokens,
               'estimated', true, 'source', 'telemetry', 'cost_record_id', id)
    FROM record
)
SELECT (SELECT count(*) FROM input AS i
        WHERE NOT EXISTS (SELECT 1 FROM target AS t WHERE t.attempt_id = i.attempt_id))
           AS dropped,
       (SELECT count(*) FROM fresh) AS counted,
       (SELECT coalesce(sum(cost_cents), 0) FROM record)::bigint AS cents;

-- name: record_result_cost
-- A session's final figures for one model (Claude Code's result, §12), recorded only above
-- what telemetry already recorded for it (and above an earlier result's). $1 attempt, $2 the
-- attempt's agent or null (privileged), $3 acting principal, $4 model (without a bracketed
-- suffix), $5 cents, $6-$9 input, output, cache read and cache write tokens. Locks the unit
-- first, as record_cost does; answers the unit and the attempt as record_cost does.
WITH target AS (
    SELECT a.unit_id, a.agent_id
    FROM work_unit_attempts AS a
    JOIN work_units AS u ON u.id = a.unit_id
    WHERE a.id = $1 AND ($2::text IS NULL OR a.agent_id = $2)
    FOR NO KEY UPDATE OF u
), spend AS (
    INSERT INTO attempt_model_spend AS s
        (attempt_id, model, result_cents, result_input_tokens, result_output_tokens,
         result_cache_read_tokens, result_cache_write_tokens)
    SELECT $1, $4, $5, $6, $7, $8, $9 FROM target
    ON CONFLICT ON CONSTRAINT attempt_model_spend_key DO UPDATE
    SET result_cents = greatest(s.result_cents, excluded.result_cents),
        result_input_tokens = greatest(s.result_input_tokens, excluded.result_input_tokens),
        result_output_tokens = greatest(s.result_output_tokens, excluded.result_output_tokens),
        result_cache_read_tokens
            = greatest(s.result_cache_read_tokens, excluded.result_cache_read_tokens),
        result_cache_write_tokens
            = greatest(s.result_cache_write_tokens, excluded.result_cache_write_tokens)
    RETURNING s.delta_cents, s.delta_input_tokens, s.delta_output_tokens,
              s.delta_cache_read_tokens, s.delta_cache_write_tokens
), record AS (
    INSERT INTO cost_records AS c
        (attempt_id, unit_id, cost_cents, model, input_tokens, output_tokens,
         cache_read_tokens, cache_write_tokens, estimated, recorded_by)
    SELECT $1, t.unit_id, s.delta_cents, $4, s.delta_input_tokens, s.delta_output_tokens,
           s.delta_cache_read_tokens, s.delta_cache_write_tokens, true, $3
    FROM spend AS s, target AS t
    WHERE s.delta_cents + s.delta_input_tokens + s.delta_output_tokens
          + s.delta_cache_read_tokens + s.delta_cache_write_tokens > 0
    RETURNING c.id, c.cost_cents, c.input_tokens, c.output_tokens, c.cache_read_tokens,
              c.cache_write_tokens
), attempt AS (
    UPDATE work_unit_attempts AS a
    SET cost_cents = a.cost_cents + coalesce((SELECT cost_cents FROM record), 0)
    FROM target
    WHERE a.id = $1
    RETURNING a AS attempt
), unit AS (
    UPDATE work_units AS u
    SET cost_cents = u.cost_cents + r.cost_cents
    FROM target AS t, record AS r
    WHERE u.id = t.unit_id AND r.cost_cents > 0
    RETURNING u AS unit
), event AS (
    INSERT INTO work_unit_events (unit_id, attempt_id, event_type, agent_id, cost_delta_cents, detail)
    SELECT t.unit_id, $1, 'cost_recorded', $3, r.cost_cents,
           jsonb_build_object(
               'model', $4::text, 'input_tokens', r.input_tokens,
               'output_tokens', r.output_tokens, 'cache_read_tokens', r.cache_read_tokens,
               'cache_write_tokens', r.cache_write_tokens, 'estimated', true,
               'source', 'result', 'cost_record_id', r.id)
    FROM target AS t, record AS r
)
SELECT coalesce((SELECT unit FROM unit), u) AS unit, attempt.attempt
FROM attempt, target AS t JOIN work_units AS u ON u.id = t.unit_id;
