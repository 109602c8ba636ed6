-- Writes to units, run by the API's service and by the Temporal projection alike. Each
-- statement is one round trip that guards the state it expects, changes the unit, its
-- attempt and its questions, and appends the event, so it needs no transaction of its own:
-- alone it commits by itself; under an Idempotency-Key it runs in the transaction that
-- holds the key (service/keyed.py), the projection's in the delivery's. Zero rows back
-- means the guard refused; the caller then looks once to say why.

-- name: register_units
-- $1 refs, $2 fleets, $3 domains, $4 workflow ids, $6 max_attempts (parallel arrays),
-- $5 acting principal; requirements as parallel arrays too: $7 the requiring unit's ref,
-- $8 the prerequisite's ref or id as sent, $9 that as a uuid when it is one (else null).
-- A unit with an unfinished prerequisite is registered waiting. A prerequisite named that
-- is neither registered nor in the batch writes nothing and comes back as `unknown`.
-- $10 each unit's exclusion keys as a JSON array (sorted, distinct) or null for none.
WITH input AS (
    SELECT i.external_ref, i.fleet, i.domain, i.workflow_id, i.max_attempts, i.ord,
           wl_keys_from_json(i.exclusive) AS exclusive
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $6::integer[], $10::text[])
         WITH ORDINALITY AS i (external_ref, fleet, domain, workflow_id, max_attempts,
                               exclusive, ord)
), wanted AS (
    SELECT w.dependent, w.key, w.key_id
    FROM unnest($7::text[], $8::text[], $9::uuid[]) AS w (dependent, key, key_id)
), known AS (
    -- Share-locked: a prerequisite cannot finish unseen between this look and our commit
    -- (its finishing waits for us, then lowers the counters of the dependents we add).
    SELECT u.id, u.external_ref, u.state, u.disposition FROM work_units AS u
    WHERE u.external_ref = ANY ($8::text[]) OR u.id = ANY ($9::uuid[])
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
    SELECT DISTINCT key FROM resolved WHERE unknown
), counted AS (
    SELECT dependent, count(DISTINCT coalesce(known_id::text, key)) FILTER (WHERE unfinished) AS n
    FROM resolved GROUP BY dependent
), inserted AS (
    -- Rows go in in external_ref order, so that overlapping batches take their keys in one
    -- order and cannot deadlock; created_at (one clock reading + ord microseconds) keeps
    -- the batch's own order in the ready queue.
    INSERT INTO work_units (external_ref, fleet, domain, workflow_id, created_at, state,
                            max_attempts, attempts_allowed, unfinished_prerequisites,
                            exclusive)
    SELECT i.external_ref, i.fleet, i.domain, i.workflow_id,
           (SELECT clock_timestamp()) + make_interval(secs => i.ord / 1e6),
           CASE WHEN coalesce(c.n, 0) > 0 THEN 'waiting' ELSE 'ready' END::work_state,
           i.max_attempts, i.max_attempts, coalesce(c.n, 0), i.exclusive
    FROM input AS i LEFT JOIN counted AS c ON c.dependent = i.external_ref
    WHERE NOT EXISTS (SELECT 1 FROM unknown)
    ORDER BY i.external_ref
    ON CONFLICT (external_ref) DO NOTHING
    RETURNING id, external_ref, state
), edges AS (
    -- Only a unit created now gets requirements: re-registering changes nothing.
    INSERT INTO unit_requirements (unit_id, prerequisite_id)
    SELECT DISTINCT d.id, coalesce(r.known_id, p.id)
    FROM resolved AS r
    JOIN inserted AS d ON d.external_ref = r.dependent
    LEFT JOIN inserted AS p ON p.external_ref = r.key AND r.known_id IS NULL
    WHERE coalesce(r.known_id, p.id) IS NOT NULL
), registered AS (
    INSERT INTO work_unit_events (unit_id, event_type, to_state, agent_id)
    SELECT id, 'registered', state, $5 FROM inserted
)
-- A ref neither inserted here nor seen at the start: a concurrent batch registered it
-- meanwhile, after our reading; the statement refuses itself whole (0018), to be run again.
SELECT coalesce(n.id, u.id, wl_refuse_raced_registration(i.external_ref)) AS id,
       i.external_ref, n.id IS NOT NULL AS created, NULL::text AS unknown, i.ord
FROM input AS i
LEFT JOIN inserted AS n ON n.external_ref = i.external_ref
LEFT JOIN work_units AS u ON u.external_ref = i.external_ref
WHERE NOT EXISTS (SELECT 1 FROM unknown)
UNION ALL
SELECT NULL, NULL, false, key, 0 FROM unknown
ORDER BY ord;

-- name: claim_next_unit
-- Pull-next as most calls need it: $1 agent, $2 domain or null, $3 lease seconds. When the
-- agent holds no live claim and no lease has lapsed (in the domain asked), the oldest ready
-- unit is claimed, as claim_unit would claim it, with half its plan. Otherwise nothing is
-- claimed and one row says `full`: resume and reclaim come first, so claim_unit must run.
-- A unit whose fleet's or domain's budget is spent is skipped (wl_spent_budgets, 0020).
-- The budgets are asked once, of the oldest ready unit this statement could lock (`head`),
-- after locking it: a filter in the scan would ask them of every unit that SKIP LOCKED
-- then skips, one per claim in flight. Only when the head's scope is closed does a second
-- scan look past it (`past_closed`: a function, so that this statement's generic plan is
-- kept, 0025 says why), asking each scope once, not each unit (0028). The head stays
-- locked until this commits.
-- Flow controls (0022) are asked the same way: a paused or capped scope
-- (wl_closed_controls) or a key another unit holds (wl_held_keys_of) skips the unit, from
-- this statement's snapshot. The admission trigger decides exactly, and a claim that lost
-- a race to it is refused whole and run again by the service. A paused scope's ready units
-- are not even met: they are marked out of the queue's indexes (in_paused_scope, 0032).
WITH full_claim AS (
    SELECT EXISTS (SELECT 1 FROM work_units
                   WHERE claimed_by = $1 AND state IN ('claimed', 'in_progress'))
        OR EXISTS (SELECT 1 FROM work_units
                   WHERE lease_expires_at < now() AND ($2::text IS NULL OR domain = $2)) AS needed
), fresh AS (
    SELECT id, fleet, domain, exclusive FROM work_units
    WHERE $2::text IS NULL AND state = 'ready' AND NOT in_paused_scope
      AND NOT (SELECT needed FROM full_claim)
    ORDER BY created_at, id
    LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED
), fresh_in_domain AS (
    SELECT id, fleet, domain, exclusive FROM work_units
    WHERE $2::text IS NOT NULL AND domain = $2 AND state = 'ready' AND NOT in_paused_scope
      AND NOT (SELECT needed FROM full_claim)
    ORDER BY domain, created_at, id
    LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED
), head AS (
    SELECT * FROM fresh UNION ALL SELECT * FROM fresh_in_domain
), head_open AS (
    SELECT h.id FROM head AS h WHERE NOT EXISTS (SELECT FROM wl_spent_budgets(h.fleet, h.domain))
      AND NOT EXISTS (SELECT FROM wl_closed_controls(h.fleet, h.domain))
      AND (h.exclusive IS NULL OR NOT EXISTS (SELECT FROM wl_held_keys_of(h.exclusive)))
), past_closed AS (
    -- The head's scope is closed: the oldest open unit past it (wl_next_open_unit, 0028).
    SELECT wl_next_open_unit($2) AS id
    WHERE EXISTS (SELECT 1 FROM head) AND NOT EXISTS (SELECT 1 FROM head_open)
), claimed AS (
    UPDATE work_units AS u
    SET state = 'claimed', claimed_by = $1, attempt_count = u.attempt_count + 1,
        lease_expires_at = now() + make_interval(secs => $3), last_heartbeat_at = now()
    -- The scalar lookup keeps even a cached generic plan on the primary key.
    WHERE u.id = (SELECT id FROM head_open UNION ALL SELECT id FROM past_closed)
    RETURNING u AS unit
), attempt AS (
    INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id)
    SELECT (c.unit).id, (c.unit).attempt_count, $1 FROM claimed AS c
    RETURNING work_unit_attempts AS attempt
), event AS (
    INSERT INTO work_unit_events (unit_id, attempt_id, event_type, from_state, to_state, agent_id)
    SELECT (a.attempt).unit_id, (a.attempt).id, 'claimed', 'ready', 'claimed', $1
    FROM attempt AS a
)
SELECT c.unit, a.attempt, false AS resumed, false AS full
FROM claimed AS c, attempt AS a
UNION ALL
SELECT NULL, NULL, false, true FROM full_claim WHERE needed;

-- name: claim_unit
-- $1 agent, $2 domain or null, $3 lease seconds, $4 unit id for a named claim or null.
-- An agent already holding a live claim gets it back (resumed). Otherwise the oldest
-- lapsed lease is reclaimed first (its agent is presumed dead), then the oldest ready unit.
-- Each way of picking is its own CTE, switched on or off by a parameter test alone, so
-- that even a generic (cached) plan walks the right index: the primary key for a named
-- claim, the ready indexes in queue order for pull-next, the lease index for reclaims.
-- Nothing is claimed anew in a scope whose budget is spent (stale reclaims included). A
-- lapsed unit whose next attempt would pass its allowance is parked instead (waiting,
-- its attempt superseded, the ledger's question opened), and the claim goes on to the
-- next claimable unit. A named claim of one parks it and claims nothing.
-- Nothing is claimed in a paused scope (stale reclaims included), nor anew in a scope at
-- its cap, nor a unit one of whose exclusion keys another unit holds (0022).
WITH held AS (
    SELECT id FROM work_units
    WHERE claimed_by = $1 AND state IN ('claimed', 'in_progress')
), named AS (
    SELECT id, state, claimed_by FROM work_units
    WHERE id = $4
      AND (state = 'ready' OR (state IN ('claimed', 'in_progress') AND lease_expires_at < now()
                               AND failed_attempts + 1 < attempts_allowed))
      AND NOT EXISTS (SELECT 1 FROM held)
      AND NOT EXISTS (SELECT FROM wl_spent_budgets(fleet, domain))
      -- A stale reclaim is refused by a pause only, a ready unit by a cap too.
      AND NOT EXISTS (SELECT FROM wl_closed_controls(fleet, domain) AS c
                      WHERE state = 'ready' OR c.paused)
      AND NOT EXISTS (SELECT FROM wl_held_keys_of(exclusive) AS k WHERE k.unit_id <> id)
    FOR NO KEY UPDATE SKIP LOCKED
), lapsed AS (
    SELECT id, state, claimed_by FROM work_units
    -- A lease is set exactly while claimed or in_progress (unit_lease_iff_leased): naming
    -- those states here would let a plan walk one_live_claim_per_agent instead.
    WHERE $4::uuid IS NULL AND lease_expires_at < now()
      AND ($2::text IS NULL OR domain = $2) AND failed_attempts + 1 < attempts_allowed
      AND NOT EXISTS (SELECT 1 FROM held)
      AND NOT EXISTS (SELECT FROM wl_spent_budgets(fleet, domain))
      AND NOT EXISTS (SELECT FROM wl_closed_controls(fleet, domain) AS c WHERE c.paused)
    ORDER BY lease_expires_at
    LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED
), fresh AS (
    -- The oldest ready unit of an open scope with its keys free, locked
    -- (wl_next_open_unit, 0028: it skips a closed scope without reading its units), asked
    -- only when nothing is held or lapsed.
    SELECT id, state, claimed_by FROM work_units
    WHERE id = (SELECT wl_next_open_unit($2)
                WHERE $4::uuid IS NULL AND NOT EXISTS (SELECT 1 FROM held)
                  AND NOT EXISTS (SELECT 1 FROM lapsed))
), park_named AS (
    SELECT id, state, claimed_by FROM work_units
    WHERE id = $4 AND lease_expires_at < now() AND failed_attempts + 1 >= attempts_allowed
      AND NOT EXISTS (SELECT 1 FROM held)
    FOR NO KEY UPDATE SKIP LOCKED
), park_lapsed AS (
    SELECT id, state, claimed_by FROM work_units
    WHERE $4::uuid IS NULL AND lease_expires_at < now()
      AND ($2::text IS NULL OR domain = $2) AND failed_attempts + 1 >= attempts_allowed
      AND NOT EXISTS (SELECT 1 FROM held)
    ORDER BY lease_expires_at
    LIMIT 16
    FOR NO KEY UPDATE SKIP LOCKED
), parked AS (
    UPDATE work_units AS u
    SET state = 'waiting', claimed_by = NULL, lease_expires_at = NULL,
        failed_attempts = u.failed_attempts + 1
    FROM (SELECT * FROM park_named UNION ALL SELECT * FROM park_lapsed) AS p
    WHERE u.id = p.id
    RETURNING u.id, p.state AS from_state, p.claimed_by AS previous_agent
), parked_attempt AS (
    UPDATE work_unit_attempts AS a
    SET outcome = 'superseded', ended_at = now()
    FROM parked AS p
    WHERE a.unit_id = p.id AND a.outcome IS NULL
    RETURNING a.id, a.unit_id
), parked_question AS (
    INSERT INTO blocking_questions (unit_id, attempt_id, question, asked_by)
    SELECT p.unit_id, p.id,
           wl_attempt_limit_question(p.unit_id, p.id, 'superseded', 'its lease lapsed'),
           'work-ledger'
    FROM parked_attempt AS p
    RETURNING id, unit_id, attempt_id
), parked_event AS (
    INSERT INTO work_unit_events (unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
    SELECT p.id, q.attempt_id, 'stale_reclaimed', p.from_state, 'waiting', $1,
           jsonb_build_object('previous_agent', p.previous_agent,
                              'superseded_attempt_id', q.attempt_id,
                              'attempt_limit_reached', true, 'question_id', q.id)
    FROM parked AS p JOIN parked_question AS q ON q.unit_id = p.id
), picked AS (
    SELECT * FROM named
    UNION ALL SELECT * FROM lapsed
    UNION ALL SELECT * FROM fresh
), claimed AS (
    UPDATE work_units AS u
    SET state = 'claimed', claimed_by = $1, attempt_count = u.attempt_count + 1,
        lease_expires_at = now() + make_interval(secs => $3), last_heartbeat_at = now(),
        failed_attempts = u.failed_attempts + CASE WHEN p.state = 'ready' THEN 0 ELSE 1 END
    FROM picked AS p
    -- The scalar lookup keeps even a cached generic plan on the primary key.
    WHERE u.id = (SELECT id FROM picked) AND u.id = p.id
    RETURNING u AS unit, p.state AS from_state, p.claimed_by AS previous_agent
), superseded AS (
    -- A scalar lookup, not a join: a plan cached while few attempts were running would
    -- otherwise scan every running attempt for the one claimed unit.
    UPDATE work_unit_attempts AS a
    SET outcome = 'superseded', ended_at = now()
    WHERE a.unit_id = (SELECT (c.unit).id FROM claimed AS c) AND a.outcome IS NULL
    RETURNING a.id
), attempt AS (
    -- Reading `superseded` first makes the old attempt end before the new one starts.
    INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id)
    SELECT (c.unit).id, (c.unit).attempt_count, $1
    FROM claimed AS c, (SELECT array_agg(id) AS ids FROM superseded) AS s
    RETURNING work_unit_attempts AS attempt, (SELECT array_agg(id) FROM superseded) AS superseded_ids
), event AS (
    INSERT INTO work_unit_events (unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
    SELECT (c.unit).id, (a.attempt).id,
           CASE WHEN c.from_state = 'ready' THEN 'claimed' ELSE 'stale_reclaimed' END::work_event_type,
           c.from_state, 'claimed', $1,
           CASE WHEN c.from_state = 'ready' THEN '{}'::jsonb
                ELSE jsonb_build_object('previous_agent', c.previous_agent,
                                        'superseded_attempt_id', a.superseded_ids[1]) END
    FROM claimed AS c, attempt AS a
), resumed AS (
    -- Asking again is a sign of life: the held claim's lease is renewed, never shortened.
    UPDATE work_units AS u
    SET lease_expires_at = greatest(u.lease_expires_at, now() + make_interval(secs => $3)),
        last_heartbeat_at = now()
    WHERE u.claimed_by = $1 AND u.state IN ('claimed', 'in_progress')
      AND ($4::uuid IS NULL OR u.id = $4)
    RETURNING u AS unit
), resumed_attempt AS (
    SELECT r.unit, t AS attempt
    FROM resumed AS r, work_unit_attempts AS t
    WHERE t.unit_id = (SELECT (unit).id FROM resumed) AND t.outcome IS NULL
), resumed_event AS (
    INSERT INTO work_unit_events (unit_id, attempt_id, event_type, agent_id, detail)
    SELECT (unit).id, (attempt).id, 'heartbeat', $1,
           jsonb_build_object('resumed', true, 'lease_expires_at', (unit).lease_expires_at)
    FROM resumed_attempt
)
SELECT c.unit, a.attempt, false AS resumed, c.from_state
FROM claimed AS c, attempt AS a
UNION ALL
SELECT unit, attempt, true, (unit).state FROM resumed_attempt;

-- name: heartbeat_attempt
-- $1 attempt id, $2 holder or null (privileged), $3 lease seconds. A blocked unit's lease
-- stays paused; its heartbeat only proves the holder is alive.
WITH live AS (
    SELECT u.id AS unit_id, a.id AS attempt_id
    FROM work_unit_attempts AS a
    JOIN work_units AS u ON u.id = a.unit_id
    WHERE a.id = $1 AND a.outcome IS NULL
      AND u.state IN ('claimed', 'in_progress', 'blocked')
      AND ($2::text IS NULL OR u.claimed_by = $2)
    FOR NO KEY UPDATE OF u, a
), unit AS (
    UPDATE work_units AS u
    SET last_heartbeat_at = now(),
        lease_expires_at = CASE WHEN u.state = 'blocked' THEN NULL
                                ELSE now() + make_interval(secs => $3) END
    FROM live
    WHERE u.id = live.unit_id
    RETURNING u AS unit
), event AS (
    INSERT INTO work_unit_events (unit_id, attempt_id, event_type, agent_id, detail)
    SELECT (unit).id, $1, 'heartbeat', (unit).claimed_by,
           jsonb_build_object('lease_expires_at', (unit).lease_expires_at)
    FROM unit
)
SELECT unit.unit, a AS attempt
FROM unit JOIN work_unit_attempts AS a ON a.id = $1;

-- name: start_unit
-- claimed → in_progress, the step every claim is followed by. $1 unit, $2 the states it
-- may leave (claimed: a parameter, so that no cached plan can take the partial index of
-- live claims for a lookup by id), $3 holder or null (privileged), $4 fenced attempt or
-- null, $5 acting principal. One UPDATE and no lock taken before it: the live attempt is
-- the one numbered as the unit's attempt count, so if a reclaim, a release or another
-- start changes the unit first, the join re-checked on its new row refuses (zero rows).
WITH unit AS (
    UPDATE work_units AS u
    -- Starting is a sign of life: the lease restarts at the length last granted.
    SET state = 'in_progress', last_heartbeat_at = now(),
        lease_expires_at = greatest(u.lease_expires_at,
                                    now() + (u.lease_expires_at - u.last_heartbeat_at))
    FROM work_unit_attempts AS a
    WHERE u.id = $1 AND u.state = ANY ($2::work_state[])
      AND ($3::text IS NULL OR u.claimed_by = $3)
      AND a.unit_id = u.id AND a.attempt_no = u.attempt_count AND a.outcome IS NULL
      AND ($4::uuid IS NULL OR a.id = $4)
    RETURNING u AS unit, a AS attempt
), event AS (
    INSERT INTO work_unit_events
        (unit_id, attempt_id, event_type, from_state, to_state, agent_id)
    SELECT (unit).id, (attempt).id, 'transitioned', 'claimed', 'in_progress', $5 FROM unit
)
SELECT unit, attempt FROM unit;

-- name: transition_unit
-- Release (claimed|in_progress → ready, its attempt ending failed or abandoned), for the
-- API and the Temporal projection; both start with start_unit and verify with verify_unit.
-- It can make any move of the map's held states: $1 unit, $2 target state, $3 states it may leave,
-- $4 holder or null (privileged), $5 fenced attempt or null, $6 evidence url or null,
-- $7 outcome that ends the attempt (null keeps it running), $8 event type, $9 detail,
-- $10 acting principal. A release that ends the unit's last allowed attempt parks it in
-- waiting with the ledger's question; the event says so (to_state waiting).
WITH live AS (
    SELECT u.id AS unit_id, u.state AS from_state, a.id AS attempt_id
    FROM work_units AS u
    JOIN work_unit_attempts AS a ON a.unit_id = u.id AND a.outcome IS NULL
    WHERE u.id = $1 AND u.state = ANY ($3::work_state[])
      AND ($4::text IS NULL OR u.claimed_by = $4)
      AND ($5::uuid IS NULL OR a.id = $5)
    FOR NO KEY UPDATE OF u, a
), unit AS (
    UPDATE work_units AS u
    -- A release that ends the last allowed attempt parks the unit instead (0011).
    SET state = CASE WHEN $2::work_state = 'ready' AND $7::attempt_outcome IN ('failed', 'abandoned')
                          AND u.failed_attempts + 1 >= u.attempts_allowed
                     THEN 'waiting' ELSE $2::work_state END,
        failed_attempts = u.failed_attempts
            + CASE WHEN $7::attempt_outcome IN ('failed', 'abandoned') THEN 1 ELSE 0 END,
        claimed_by = CASE WHEN $2::work_state IN ('ready', 'verified') THEN NULL ELSE u.claimed_by END,
        -- Starting is a sign of life: the lease restarts at the length last granted.
        lease_expires_at = CASE
            WHEN $2::work_state IN ('ready', 'verified') THEN NULL
            WHEN $2::work_state = 'in_progress'
                THEN greatest(u.lease_expires_at,
                              now() + (u.lease_expires_at - u.last_heartbeat_at))
            ELSE u.lease_expires_at END,
        last_heartbeat_at = CASE WHEN $2::work_state = 'in_progress' THEN now()
                                 ELSE u.last_heartbeat_at END,
        evidence_urls = CASE WHEN $6::text IS NULL THEN u.evidence_urls
                             ELSE array_append(u.evidence_urls, $6) END
    FROM live
    WHERE u.id = live.unit_id
    RETURNING u AS unit, live.from_state, live.attempt_id, live.unit_id
), attempt AS (
    UPDATE work_unit_attempts AS a
    SET outcome = $7, ended_at = now(), evidence_url = coalesce($6, a.evidence_url)
    FROM unit
    WHERE a.id = unit.attempt_id AND $7::attempt_outcome IS NOT NULL
    RETURNING a AS attempt
), question AS (
    INSERT INTO blocking_questions (unit_id, attempt_id, question, asked_by)
    SELECT unit_id, attempt_id,
           wl_attempt_limit_question(unit_id, attempt_id, $7, $9::jsonb ->> 'reason'),
           'work-ledger'
    FROM unit WHERE (unit).state = 'waiting'
    RETURNING id
), event AS (
    INSERT INTO work_unit_events
        (unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
    SELECT unit_id, attempt_id, $8, from_state, (unit).state, $10,
           $9::jsonb || jsonb_strip_nulls(jsonb_build_object(
               'outcome', $7::attempt_outcome, 'evidence_url', $6::text,
               'attempt_limit_reached', CASE WHEN (unit).state = 'waiting' THEN true END,
               'question_id', (SELECT id FROM question)))
    FROM unit
)
SELECT unit.unit, coalesce((SELECT attempt FROM attempt), a) AS attempt
FROM unit JOIN work_unit_attempts AS a ON a.id = unit.attempt_id;

-- name: verify_unit
-- in_progress → verified with an evidence link; the attempt ends verified. transition_unit
-- could do this too; this statement does only it (a seventh less of PostgreSQL's CPU than
-- transition_unit's lock and CASE per column, docs/data-model.md#the-claim).
-- $1 unit, $2 the states it may leave ({in_progress}: a parameter, as in start_unit), $3
-- holder or null (privileged), $4 fenced attempt or null, $5 evidence url, $6 event detail,
-- $7 acting principal. As start_unit, one UPDATE and no lock taken before it: the live
-- attempt is the one numbered as the unit's attempt count, and whatever ends or replaces it
-- changes the unit row first, so the join re-checked on the unit's new row refuses.
WITH unit AS (
    UPDATE work_units AS u
    SET state = 'verified', claimed_by = NULL, lease_expires_at = NULL,
        evidence_urls = array_append(u.evidence_urls, $5)
    FROM work_unit_attempts AS a
    WHERE u.id = $1 AND u.state = ANY ($2::work_state[])
      AND ($3::text IS NULL OR u.claimed_by = $3)
      AND a.unit_id = u.id AND a.attempt_no = u.attempt_count AND a.outcome IS NULL
      AND ($4::uuid IS NULL OR a.id = $4)
    RETURNING u AS unit, a.id AS attempt_id
), attempt AS (
    UPDATE work_unit_attempts AS a
    SET outcome = 'verified', ended_at = now(), evidence_url = $5
    FROM unit
    WHERE a.id = unit.attempt_id
    RETURNING a AS attempt
), event AS (
    INSERT INTO work_unit_events
        (unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
    SELECT (unit).id, attempt_id, 'transitioned', 'in_progress', 'verified', $7,
           $6::jsonb || jsonb_build_object('outcome', 'verified', 'evidence_url', $5::text)
    FROM unit
)
SELECT unit.unit, attempt.attempt FROM unit, attempt;

-- name: block_unit
-- in_progress → blocked with a question; the lease pauses. $1 unit, $2 holder or null,
-- $3 fenced attempt or null, $4 question, $5 assignee group, $6 acting principal.
WITH live AS (
    SELECT u.id AS unit_id, a.id AS attempt_id
    FROM work_units AS u
    JOIN work_unit_attempts AS a ON a.unit_id = u.id AND a.outcome IS NULL
    WHERE u.id = $1 AND u.state = 'in_progress'
      AND ($2::text IS NULL OR u.claimed_by = $2)
      AND ($3::uuid IS NULL OR a.id = $3)
    FOR NO KEY UPDATE OF u, a
), unit AS (
    UPDATE work_units AS u
    SET state = 'blocked', lease_expires_at = NULL
    FROM live
    WHERE u.id = live.unit_id
    RETURNING u AS unit, live.attempt_id
), question AS (
    INSERT INTO blocking_questions (unit_id, attempt_id, question, assignee_group_slug, asked_by)
    SELECT (unit).id, attempt_id, $4, $5, $6 FROM unit
    RETURNING blocking_questions AS question
), event AS (
    INSERT INTO work_unit_events
        (unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
    SELECT (unit).id, attempt_id, 'blocked', 'in_progress', 'blocked', $6,
           jsonb_build_object('question_id', (q.question).id, 'question', $4::text)
    FROM unit, question AS q
)
SELECT unit.unit, q.question FROM unit, question AS q;

-- name: resume_blocked_unit
-- blocked → in_progress, closing its open question: answered (unblock) or cancelled.
-- $1 unit or null, $2 question id or null (the unit's open one), $3 answer or null (cancel),
-- $4 acting principal, $5 lease seconds, $6 reason or null.
WITH open_question AS (
    SELECT q.id, q.attempt_id, u.id AS unit_id
    FROM blocking_questions AS q
    JOIN work_units AS u ON u.id = q.unit_id
    WHERE q.status = 'open' AND u.state = 'blocked'
      AND ($1::uuid IS NULL OR q.unit_id = $1) AND ($2::uuid IS NULL OR q.id = $2)
      AND coalesce($1, $2) IS NOT NULL
    FOR NO KEY UPDATE OF u, q
), question AS (
    UPDATE blocking_questions AS q
    SET status = CASE WHEN $3::text IS NULL THEN 'cancelled' ELSE 'answered' END::question_status,
        answer = $3, answered_by = $4, closed_at = now()
    FROM open_question AS o
    WHERE q.id = o.id
    RETURNING q AS question
), unit AS (
    UPDATE work_units AS u
    SET state = 'in_progress', lease_expires_at = now() + make_interval(secs => $5),
        last_heartbeat_at = now()
    FROM open_question AS o
    WHERE u.id = o.unit_id
    RETURNING u AS unit, o.attempt_id, o.id AS question_id
), event AS (
    INSERT INTO work_unit_events
        (unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
    SELECT (unit).id, attempt_id, 'unblocked', 'blocked', 'in_progress', $4,
           jsonb_strip_nulls(jsonb_build_object(
               'question_id', question_id, 'answered', $3::text IS NOT NULL, 'reason', $6::text))
    FROM unit
)
SELECT unit.unit, q.question FROM unit, question AS q;

-- name: record_cost
-- $1 attempt, $2 cents (>= 0), $3 the attempt's agent or null (privileged), $4 acting
-- principal, $5 model or null, $6-$9 input, output, cache read and cache write tokens (each
-- null when not sent), $10 estimated. The record is kept (cost_records); the attempt's and
-- the unit's cost grow by its cents. The unit row is locked first, as every other write
-- does, so cost never deadlocks with a claim.
WITH target AS (
    SELECT a.unit_id, a.agent_id
    FROM work_unit_attempts AS a
    JOIN work_units AS u ON u.id = a.unit_id
    WHERE a.id = $1 AND ($3::text IS NULL OR a.agent_id = $3)
    FOR NO KEY UPDATE OF u
), record AS (
    INSERT INTO cost_records (attempt_id, unit_id, cost_cents, model, input_tokens, output_tokens,
                              cache_read_tokens, cache_write_tokens, estimated, recorded_by)
    SELECT $1, unit_id, $2, $5, $6, $7, $8, $9, $10, $4 FROM target
    RETURNING id
), attempt AS (
    UPDATE work_unit_attempts AS a
    SET cost_cents = a.cost_cents + $2
    FROM target
    WHERE a.id = $1
    RETURNING a AS attempt
), unit AS (
    UPDATE work_units AS u
    SET cost_cents = u.cost_cents + $2
    FROM target AS t
    WHERE u.id = t.unit_id AND $2::bigint > 0
    RETURNING u AS unit
), event AS (
    INSERT INTO work_unit_events (unit_id, attempt_id, event_type, agent_id, cost_delta_cents, detail)
    SELECT unit_id, $1, 'cost_recorded', $4, $2,
           jsonb_strip_nulls(jsonb_build_object(
               'model', $5::text, 'input_tokens', $6::bigint, 'output_tokens', $7::bigint,
               'cache_read_tokens', $8::bigint, 'cache_write_tokens', $9::bigint,
               'estimated', CASE WHEN $10::boolean THEN true END,
               'cost_record_id', (SELECT id FROM record)))
    FROM target
)
SELECT coalesce((SELECT unit FROM unit), u) AS unit, attempt.attempt
FROM attempt, target AS t JOIN work_units AS u ON u.id = t.unit_id;

-- name: dispose_unit
-- Close a unit for good. $1 unit, $2 disposition, $3 states it may leave with it,
-- $4 holder or null (privileged), $5 fenced attempt or null, $6 evidence url or null,
-- $7 reason or null, $8 acting principal. A still-running attempt ends `blocked` when
-- the unit was blocked, `abandoned` otherwise.
-- An agent may dispose only a unit it holds, or the unit its own attempt verified.
WITH target AS (
    SELECT u.id AS unit_id, u.state AS from_state, a.id AS attempt_id, a.outcome
    FROM work_units AS u
    LEFT JOIN work_unit_attempts AS a ON a.unit_id = u.id AND a.attempt_no = u.attempt_count
    WHERE u.id = $1 AND u.state = ANY ($3::work_state[])
      AND ($4::text IS NULL OR (a.agent_id = $4 AND (a.outcome IS NULL OR a.outcome = 'verified')))
      AND ($5::uuid IS NULL OR (a.id = $5 AND (a.outcome IS NULL OR a.outcome = 'verified')))
    FOR NO KEY UPDATE OF u
), unit AS (
    UPDATE work_units AS u
    SET state = CASE WHEN $2::work_disposition = 'MIGRATED' THEN 'done' ELSE 'abandoned' END::work_state,
        disposition = $2::work_disposition, disposed_at = now(), claimed_by = NULL, lease_expires_at = NULL,
        failed_attempts = u.failed_attempts + CASE WHEN t.attempt_id IS NOT NULL AND t.outcome IS NULL
                                                        AND t.from_state <> 'blocked' THEN 1 ELSE 0 END,
        evidence_urls = CASE WHEN $6::text IS NULL THEN u.evidence_urls
                             ELSE array_append(u.evidence_urls, $6) END
    FROM target AS t
    WHERE u.id = t.unit_id
    RETURNING u AS unit, t.from_state, t.attempt_id
), attempt AS (
    UPDATE work_unit_attempts AS a
    SET outcome = CASE WHEN t.from_state = 'blocked' THEN 'blocked'
                       ELSE 'abandoned' END::attempt_outcome,
        ended_at = now()
    FROM target AS t
    WHERE a.id = t.attempt_id AND a.outcome IS NULL
    RETURNING a.id
), cancelled AS (
    UPDATE blocking_questions AS q
    SET status = 'cancelled', closed_at = now(), answered_by = $8
    FROM target AS t
    WHERE q.unit_id = t.unit_id AND q.status = 'open'
    RETURNING q.id
), event AS (
    INSERT INTO work_unit_events
        (unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
    SELECT (unit).id, attempt_id, 'disposed', from_state, (unit).state, $8,
           jsonb_strip_nulls(jsonb_build_object(
               'disposition', $2::work_disposition, 'evidence_url', $6::text, 'reason', $7::text,
               'cancelled_question_ids', (SELECT array_agg(id) FROM cancelled),
               'ended_attempt', (SELECT count(*) FROM attempt) > 0))
    FROM unit
)
SELECT unit FROM unit;

-- name: dispose_verified_unit
-- verified → done, MIGRATED: dispose_unit's commonest case, doing only what it needs (a
-- quarter less of PostgreSQL's CPU, bench/RESULTS.md). A verified unit's last attempt has ended verified
-- and it has no open question (only a blocked unit has one), so nothing else closes; the
-- event says what dispose_unit's would. $1 unit, $2 holder or null (privileged): only the
-- agent whose attempt verified it, $3 fenced attempt or null, $4 evidence url or null,
-- $5 reason or null, $6 acting principal.
WITH unit AS (
    UPDATE work_units AS u
    SET state = 'done', disposition = 'MIGRATED', disposed_at = now(), claimed_by = NULL,
        lease_expires_at = NULL,
        evidence_urls = CASE WHEN $4::text IS NULL THEN u.evidence_urls
                             ELSE array_append(u.evidence_urls, $4) END
    FROM work_unit_attempts AS a
    WHERE u.id = $1 AND u.state = 'verified'
      AND a.unit_id = u.id AND a.attempt_no = u.attempt_count
      AND ($2::text IS NULL OR (a.agent_id = $2 AND a.outcome = 'verified'))
      AND ($3::uuid IS NULL OR (a.id = $3 AND a.outcome = 'verified'))
    RETURNING u AS unit, a.id AS attempt_id
), event AS (
    INSERT INTO work_unit_events
        (unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
    SELECT (unit).id, attempt_id, 'disposed', 'verified', 'done', $6,
           jsonb_strip_nulls(jsonb_build_object(
               'disposition', 'MIGRATED', 'evidence_url', $4::text, 'reason', $5::text,
               'ended_attempt', false))
    FROM unit
)
SELECT unit FROM unit;

-- name: heartbeat_agents
-- $1 agent ids, $2 lease seconds: renew every live lease these agents hold (the agents a
-- `serve` replica sees alive over MCP). One row each at most (one_live_claim_per_agent);
-- a blocked unit's lease stays paused, so it is left alone.
WITH unit AS (
    UPDATE work_units AS u
    SET last_heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => $2)
    WHERE u.claimed_by = ANY ($1::text[]) AND u.state IN ('claimed', 'in_progress')
    RETURNING u.id, u.claimed_by, u.lease_expires_at, u.attempt_count
), event AS (
    INSERT INTO work_unit_events (unit_id, attempt_id, event_type, agent_id, detail)
    SELECT unit.id, a.id, 'heartbeat', unit.claimed_by,
           jsonb_build_object('lease_expires_at', unit.lease_expires_at)
    FROM unit
    JOIN work_unit_attempts AS a ON a.unit_id = unit.id AND a.attempt_no = unit.attempt_count
)
SELECT id AS unit_id, claimed_by FROM unit;
