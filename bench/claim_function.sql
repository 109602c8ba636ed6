-- Not the product's: a candidate measured by bench/ablate.py ("claim as a PL/pgSQL function").
-- The same claim as claim_unit (db/sql/units.sql), but each way of picking is its own small
-- statement and only the one a call needs runs (resume first, then a named unit, or a
-- lapsed lease, then the oldest ready unit); superseding is skipped for a ready unit. Still
-- one round trip: SELECT * FROM wl_claim($1, $2, $3, $4).
CREATE FUNCTION wl_claim(p_agent text, p_domain text, p_lease integer, p_unit uuid)
RETURNS TABLE (unit work_units, attempt work_unit_attempts, resumed boolean, from_state work_state)
LANGUAGE plpgsql AS $fn$
DECLARE
    held work_units;
    live work_unit_attempts;
    pick_id uuid;
    pick_state work_state;
    pick_holder text;
BEGIN
    UPDATE work_units AS u
    SET lease_expires_at = greatest(u.lease_expires_at, now() + make_interval(secs => p_lease)),
        last_heartbeat_at = now()
    WHERE u.claimed_by = p_agent AND u.state IN ('claimed', 'in_progress')
      AND (p_unit IS NULL OR u.id = p_unit)
    RETURNING u.* INTO held;
    IF FOUND THEN
        SELECT a.* INTO live FROM work_unit_attempts AS a
        WHERE a.unit_id = held.id AND a.outcome IS NULL;
        INSERT INTO work_unit_events (unit_id, attempt_id, event_type, agent_id, detail)
        VALUES (held.id, live.id, 'heartbeat', p_agent,
                jsonb_build_object('resumed', true, 'lease_expires_at', held.lease_expires_at));
        RETURN QUERY SELECT held, live, true, held.state;
        RETURN;
    END IF;
    IF p_unit IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM work_units AS w
                   WHERE w.claimed_by = p_agent AND w.state IN ('claimed', 'in_progress')) THEN
            RETURN;
        END IF;
        SELECT w.id, w.state, w.claimed_by INTO pick_id, pick_state, pick_holder
        FROM work_units AS w
        WHERE w.id = p_unit AND (w.state = 'ready' OR w.lease_expires_at < now())
        FOR NO KEY UPDATE SKIP LOCKED;
    ELSE
        SELECT w.id, w.state, w.claimed_by INTO pick_id, pick_state, pick_holder
        FROM work_units AS w
        WHERE w.lease_expires_at < now() AND (p_domain IS NULL OR w.domain = p_domain)
        ORDER BY w.lease_expires_at LIMIT 1
        FOR NO KEY UPDATE SKIP LOCKED;
        IF pick_id IS NULL AND p_domain IS NULL THEN
            SELECT w.id, w.state, w.claimed_by INTO pick_id, pick_state, pick_holder
            FROM work_units AS w WHERE w.state = 'ready'
            ORDER BY w.created_at, w.id LIMIT 1
            FOR NO KEY UPDATE SKIP LOCKED;
        ELSIF pick_id IS NULL THEN
            SELECT w.id, w.state, w.claimed_by INTO pick_id, pick_state, pick_holder
            FROM work_units AS w WHERE w.domain = p_domain AND w.state = 'ready'
            ORDER BY w.domain, w.created_at, w.id LIMIT 1
            FOR NO KEY UPDATE SKIP LOCKED;
        END IF;
    END IF;
    IF pick_id IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH claimed AS (
        UPDATE work_units AS u
        SET state = 'claimed', claimed_by = p_agent, attempt_count = u.attempt_count + 1,
            lease_expires_at = now() + make_interval(secs => p_lease), last_heartbeat_at = now()
        WHERE u.id = pick_id
        RETURNING u AS unit
    ), superseded AS (
        UPDATE work_unit_attempts AS a
        SET outcome = 'superseded', ended_at = now()
        WHERE pick_state <> 'ready' AND a.unit_id = pick_id AND a.outcome IS NULL
        RETURNING a.id
    ), new_attempt AS (
        INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id)
        SELECT (c.unit).id, (c.unit).attempt_count, p_agent
        FROM claimed AS c, (SELECT array_agg(id) AS ids FROM superseded) AS s
        RETURNING work_unit_attempts AS attempt, (SELECT array_agg(id) FROM superseded) AS superseded_ids
    ), event AS (
        INSERT INTO work_unit_events (unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
        SELECT (c.unit).id, (a.attempt).id,
               CASE WHEN pick_state = 'ready' THEN 'claimed' ELSE 'stale_reclaimed' END::work_event_type,
               pick_state, 'claimed', p_agent,
               CASE WHEN pick_state = 'ready' THEN '{}'::jsonb
                    ELSE jsonb_build_object('previous_agent', pick_holder,
                                            'superseded_attempt_id', a.superseded_ids[1]) END
        FROM claimed AS c, new_attempt AS a
    )
    SELECT c.unit, a.attempt, false, pick_state FROM claimed AS c, new_attempt AS a;
END
$fn$;
