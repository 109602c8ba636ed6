-- The shape of the work (DESIGN §12): splits, waived requirements, the answer to the
-- ledger's question at the attempt limit, and what a unit waits on. Each write is one
-- statement: it guards the state it expects, changes the rows and appends its events.

-- name: split_unit
-- in_progress → waiting, its children registered as its prerequisites. $1 unit, $2 holder
-- or null (privileged), $3 fenced attempt or null, $4 child refs, $5 child domains (null:
-- the parent's), $6 $7 $8 the children's own requirements as in register_units (requiring
-- child's ref, prerequisite ref or id as sent, that as a uuid or null), $9 reason or null,
-- $10 acting principal. Zero rows: the guard refused. A row with `unknown` set: that
-- prerequisite is neither registered nor a sibling, and nothing was written. A child ref
-- already registered fails the statement on unit_external_ref_unique: nothing is written.
-- $11 each child's exclusion keys as a JSON array, or null: the parent's.
WITH live AS (
    SELECT u.id, u.external_ref, u.fleet, u.domain, u.max_attempts, u.exclusive,
           a.id AS attempt_id
    FROM work_units AS u
    JOIN work_unit_attempts AS a ON a.unit_id = u.id AND a.outcome IS NULL
    WHERE u.id = $1 AND u.state = 'in_progress'
      AND ($2::text IS NULL OR u.claimed_by = $2)
      AND ($3::uuid IS NULL OR a.id = $3)
    FOR NO KEY UPDATE OF u, a
), input AS (
    SELECT c.external_ref, coalesce(c.domain, l.domain) AS domain, c.ord,
           CASE WHEN c.exclusive IS NULL THEN l.exclusive
                ELSE wl_keys_from_json(c.exclusive) END AS exclusive
    FROM unnest($4::text[], $5::text[], $11::text[])
         WITH ORDINALITY AS c (external_ref, domain, exclusive, ord)
    CROSS JOIN live AS l
), wanted AS (
    SELECT w.dependent, w.key, w.key_id
    FROM unnest($6::text[], $7::text[], $8::uuid[]) AS w (dependent, key, key_id)
), known AS (
    -- Share-locked, as in register_units: none finishes unseen before our commit.
    SELECT u.id, u.state, u.disposition, u.external_ref FROM work_units AS u
    WHERE u.external_ref = ANY ($7::text[]) OR u.id = ANY ($8::uuid[])
    ORDER BY u.id
    FOR SHARE
), resolved AS (
    SELECT w.dependent, w.key, k.id AS known_id,
           CASE WHEN k.id IS NOT NULL THEN NOT wl_is_finished(k.state, k.disposition)
                ELSE b.external_ref IS NOT NULL END AS unfinished,
           k.id IS NULL AND b.external_ref IS NULL AS unknown
    FROM wanted AS w
    LEFT JOIN known AS k ON k.external_ref = w.key OR k.id = w.key_id
    LEFT JOIN input AS b ON b.external_ref = w.key
), unknown AS (
    -- Only once the guard passed: a refused split says why it was refused instead.
    SELECT DISTINCT key FROM resolved WHERE unknown AND EXISTS (SELECT 1 FROM live)
), counted AS (
    SELECT dependent, count(DISTINCT coalesce(known_id::text, key)) FILTER (WHERE unfinished) AS n
    FROM resolved GROUP BY dependent
), inserted AS (
    INSERT INTO work_units (external_ref, fleet, domain, created_at, state, max_attempts,
                            attempts_allowed, unfinished_prerequisites, parent_id, exclusive)
    SELECT i.external_ref, l.fleet, i.domain,
           (SELECT clock_timestamp()) + make_interval(secs => i.ord / 1e6),
           CASE WHEN coalesce(c.n, 0) > 0 THEN 'waiting' ELSE 'ready' END::work_state,
           l.max_attempts, l.max_attempts, coalesce(c.n, 0), l.id, i.exclusive
    FROM input AS i CROSS JOIN live AS l
    LEFT JOIN counted AS c ON c.dependent = i.external_ref
    WHERE NOT EXISTS (SELECT 1 FROM unknown)
    ORDER BY i.external_ref
    RETURNING id, external_ref, state
), edges AS (
    INSERT INTO unit_requirements (unit_id, prerequisite_id)
    SELECT l.id, i.id FROM live AS l, inserted AS i
    UNION
    SELECT d.id, coalesce(r.known_id, p.id)
    FROM resolved AS r
    JOIN inserted AS d ON d.external_ref = r.dependent
    LEFT JOIN inserted AS p ON p.external_ref = r.key AND r.known_id IS NULL
    WHERE coalesce(r.known_id, p.id) IS NOT NULL
), parent AS (
    UPDATE work_units AS u
    SET state = 'waiting', claimed_by = NULL, lease_expires_at = NULL,
        unfinished_prerequisites = (SELECT count(*) FROM inserted)
    FROM live AS l
    WHERE u.id = l.id AND EXISTS (SELECT 1 FROM inserted)
    RETURNING u AS unit, l.attempt_id
), attempt AS (
    UPDATE work_unit_attempts AS a
    SET outcome = 'split', ended_at = now()
    FROM parent AS p
    WHERE a.id = p.attempt_id
), child_events AS (
    INSERT INTO work_unit_events (unit_id, event_type, to_state, agent_id, detail)
    SELECT i.id, 'registered', i.state, $10,
           jsonb_build_object('parent', l.external_ref, 'parent_id', l.id)
    FROM inserted AS i CROSS JOIN live AS l
), split_event AS (
    INSERT INTO work_unit_events
        (unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
    SELECT (p.unit).id, p.attempt_id, 'split', 'in_progress', 'waiting', $10,
           jsonb_strip_nulls(jsonb_build_object(
               'children', (SELECT jsonb_agg(external_ref ORDER BY ord) FROM input),
               'reason', $9::text, 'outcome', 'split'))
    FROM parent AS p
)
SELECT p.unit,
       (SELECT jsonb_agg(jsonb_build_object('id', n.id, 'external_ref', n.external_ref)
                         ORDER BY i.ord)
        FROM inserted AS n JOIN input AS i ON i.external_ref = n.external_ref) AS children,
       NULL::text AS unknown
FROM parent AS p
UNION ALL
SELECT NULL, NULL, key FROM unknown;

-- name: waive_requirement
-- $1 unit, $2 prerequisite, $3 reason or null, $4 acting principal. The requirement stops
-- holding the unit; if nothing else does, the unit becomes ready. The prerequisite is
-- share-locked: it cannot finish while we decide whether it still counted.
WITH edge AS (
    SELECT e.unit_id, e.prerequisite_id, p.external_ref AS prerequisite_ref, u.state AS old_state,
           NOT wl_is_finished(p.state, p.disposition) AS unfinished
    FROM unit_requirements AS e
    JOIN work_units AS u ON u.id = e.unit_id
    JOIN work_units AS p ON p.id = e.prerequisite_id
    WHERE e.unit_id = $1 AND e.prerequisite_id = $2 AND e.waived_at IS NULL
    FOR NO KEY UPDATE OF u, e
    FOR SHARE OF p
), waived AS (
    UPDATE unit_requirements AS e
    SET waived_at = now(), waived_by = $4, waive_reason = $3
    FROM edge
    WHERE e.unit_id = edge.unit_id AND e.prerequisite_id = edge.prerequisite_id
), unit AS (
    UPDATE work_units AS u
    SET unfinished_prerequisites = u.unfinished_prerequisites
            - CASE WHEN edge.unfinished THEN 1 ELSE 0 END,
        state = CASE WHEN edge.unfinished AND u.state = 'waiting' AND u.unfinished_prerequisites = 1
                     THEN 'ready' ELSE u.state END::work_state
    FROM edge
    WHERE u.id = edge.unit_id
    RETURNING u AS unit, edge.old_state, edge.prerequisite_id, edge.prerequisite_ref
), event AS (
    INSERT INTO work_unit_events (unit_id, event_type, from_state, to_state, agent_id, detail)
    SELECT (unit).id, 'waived',
           CASE WHEN (unit).state = 'ready' AND old_state = 'waiting' THEN 'waiting' END::work_state,
           CASE WHEN (unit).state = 'ready' AND old_state = 'waiting' THEN 'ready' END::work_state,
           $4,
           jsonb_strip_nulls(jsonb_build_object(
               'prerequisite', prerequisite_ref, 'prerequisite_id', prerequisite_id,
               'reason', $3::text))
    FROM unit
)
SELECT unit FROM unit;

-- name: answer_parked_unit
-- waiting → ready: answer the ledger's question on a unit parked at its attempt limit; it
-- may be attempted max_attempts times more. $1 unit, $2 question id or null (its open
-- one), $3 answer, $4 acting principal.
WITH open_question AS (
    SELECT q.id, u.id AS unit_id
    FROM blocking_questions AS q
    JOIN work_units AS u ON u.id = q.unit_id
    WHERE q.unit_id = $1 AND q.status = 'open' AND u.state = 'waiting'
      AND ($2::uuid IS NULL OR q.id = $2)
    FOR NO KEY UPDATE OF u, q
), question AS (
    UPDATE blocking_questions AS q
    SET status = 'answered', answer = $3, answered_by = $4, closed_at = now()
    FROM open_question AS o
    WHERE q.id = o.id
    RETURNING q AS question
), unit AS (
    UPDATE work_units AS u
    SET state = 'ready', attempts_allowed = u.failed_attempts + u.max_attempts
    FROM open_question AS o
    WHERE u.id = o.unit_id
    RETURNING u AS unit, o.id AS question_id
), event AS (
    INSERT INTO work_unit_events (unit_id, event_type, from_state, to_state, agent_id, detail)
    SELECT (unit).id, 'unblocked', 'waiting', 'ready', $4,
           jsonb_build_object('question_id', question_id, 'answered', true,
                              'attempts_allowed', (unit).attempts_allowed)
    FROM unit
)
SELECT unit.unit, q.question FROM unit, question AS q;

-- name: unit_shape
-- $1 unit id: its requirements, parent, children, what it waits on (empty unless
-- waiting), its subtree's cost, and per attempt its cost records summed by model.
SELECT
    (SELECT coalesce(jsonb_agg(jsonb_build_object(
                'id', p.id, 'external_ref', p.external_ref, 'state', p.state,
                'disposition', p.disposition) ORDER BY e.created_at, p.external_ref), '[]')
     FROM unit_requirements AS e JOIN work_units AS p ON p.id = e.prerequisite_id
     WHERE e.unit_id = u.id) AS requires,
    (SELECT jsonb_build_object('id', p.id, 'external_ref', p.external_ref)
     FROM work_units AS p WHERE p.id = u.parent_id) AS parent,
    (SELECT coalesce(jsonb_agg(jsonb_build_object(
                'id', c.id, 'external_ref', c.external_ref, 'state', c.state,
                'disposition', c.disposition) ORDER BY c.created_at, c.id), '[]')
     FROM work_units AS c WHERE c.parent_id = u.id) AS children,
    CASE WHEN u.state <> 'waiting' THEN '[]'::jsonb ELSE
        (SELECT coalesce(jsonb_agg(jsonb_build_object(
                    'kind', 'prerequisite',
                    'unit', jsonb_build_object('id', p.id, 'external_ref', p.external_ref,
                                               'state', p.state, 'disposition', p.disposition))
                    ORDER BY e.created_at, p.external_ref), '[]')
         FROM unit_requirements AS e JOIN work_units AS p ON p.id = e.prerequisite_id
         WHERE e.unit_id = u.id AND e.waived_at IS NULL
           AND NOT wl_is_finished(p.state, p.disposition))
        || (SELECT coalesce(jsonb_agg(jsonb_build_object('kind', 'answer', 'question_id', q.id)),
                            '[]')
            FROM blocking_questions AS q WHERE q.unit_id = u.id AND q.status = 'open')
    END AS waiting_on,
    (WITH RECURSIVE subtree (id, cost_cents) AS (
         SELECT s.id, s.cost_cents FROM work_units AS s WHERE s.id = $1
         UNION ALL
         SELECT c.id, c.cost_cents FROM work_units AS c JOIN subtree AS t ON c.parent_id = t.id
     ) SELECT sum(cost_cents)::bigint FROM subtree) AS subtree_cost_cents,
    (SELECT coalesce(jsonb_object_agg(m.attempt_id, m.models), '{}')
     FROM (SELECT r.attempt_id, jsonb_agg(jsonb_build_object(
                      'model', r.model, 'cost_cents', r.cost_cents,
                      'estimated_cents', r.estimated_cents, 'input_tokens', r.input_tokens,
                      'output_tokens', r.output_tokens, 'cache_read_tokens', r.cache_read_tokens,
                      'cache_write_tokens', r.cache_write_tokens) ORDER BY r.model NULLS FIRST)
                  AS models
           FROM (SELECT attempt_id, model, sum(cost_cents)::bigint AS cost_cents,
                        coalesce(sum(cost_cents) FILTER (WHERE estimated), 0)::bigint
                            AS estimated_cents,
                        coalesce(sum(input_tokens), 0)::bigint AS input_tokens,
                        coalesce(sum(output_tokens), 0)::bigint AS output_tokens,
                        coalesce(sum(cache_read_tokens), 0)::bigint AS cache_read_tokens,
                        coalesce(sum(cache_write_tokens), 0)::bigint AS cache_write_tokens
                 FROM cost_records WHERE unit_id = $1 GROUP BY attempt_id, model) AS r
           GROUP BY r.attempt_id) AS m) AS cost_by_model
FROM work_units AS u WHERE u.id = $1;

-- name: units_with_refs
-- $1 external_refs: those already registered (a split names the ones that are taken).
SELECT external_ref FROM work_units WHERE external_ref = ANY ($1::text[]) ORDER BY external_ref;

-- name: requirement_of
-- $1 unit, $2 prerequisite: whether the unit requires it, and whether that was waived.
SELECT e.waived_at IS NOT NULL AS waived
FROM unit_requirements AS e WHERE e.unit_id = $1 AND e.prerequisite_id = $2;
