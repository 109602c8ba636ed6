-- DESIGN §12: the shape of the work (prerequisites, splits, `waiting`) and its money
-- (attempt limits, budgets, cost records by model and tokens). Every rule is decided by
-- the database in the statement that changes the rows, with no sweeper: readiness by a
-- counter on the dependent that the finishing statement itself lowers, the attempt limit
-- by the claim's own guard, budgets by the claim's own filter.

-- -- units: the new columns (appended: domain.model.Unit reads them by position) ---------
ALTER TABLE work_units
    ADD COLUMN parent_id uuid REFERENCES work_units (id),
    ADD COLUMN max_attempts integer NOT NULL DEFAULT 5,
    ADD COLUMN attempts_allowed integer NOT NULL DEFAULT 5,
    ADD COLUMN failed_attempts integer NOT NULL DEFAULT 0,
    -- How many of its prerequisites are neither finished nor waived: kept by the writes
    -- (register, split, waive) and by the finishing of a prerequisite (a trigger below),
    -- recounted at commit by unit_prerequisites_counted.
    ADD COLUMN unfinished_prerequisites integer NOT NULL DEFAULT 0;

-- Units that already failed keep at least one attempt more under the new limit.
UPDATE work_units AS u
SET failed_attempts = f.n, attempts_allowed = greatest(u.max_attempts, f.n + 1)
FROM (SELECT unit_id, count(*)::integer AS n FROM work_unit_attempts
      WHERE outcome IN ('failed', 'abandoned', 'superseded') GROUP BY unit_id) AS f
WHERE f.unit_id = u.id;

ALTER TABLE work_units
    ADD CONSTRAINT unit_max_attempts_bounded CHECK (max_attempts BETWEEN 1 AND 100),
    ADD CONSTRAINT unit_attempts_within_allowance CHECK (
        failed_attempts >= 0 AND failed_attempts <= attempts_allowed),
    ADD CONSTRAINT unit_prerequisites_not_negative CHECK (unfinished_prerequisites >= 0),
    -- No ready (or claimed, ...) unit with an unfinished prerequisite.
    ADD CONSTRAINT unit_ready_only_when_prerequisites_finished CHECK (
        unfinished_prerequisites = 0 OR state IN ('waiting', 'abandoned'));

CREATE INDEX work_units_parent_idx ON work_units (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX work_units_waiting_idx ON work_units (created_at, id) WHERE state = 'waiting';

-- Finished: done, or abandoned DROPPED (not needed after all). DEFERRED and DEAD never finish.
CREATE FUNCTION wl_is_finished(state work_state, disposition work_disposition) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN state = 'done' OR (state = 'abandoned' AND disposition IS NOT DISTINCT FROM 'DROPPED');

-- The allowed map of DESIGN §4 and §12; work_ledger.domain.model.TRANSITIONS mirrors it.
CREATE OR REPLACE FUNCTION wl_next_states(from_state work_state) RETURNS work_state[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE from_state
        WHEN 'ready' THEN ARRAY['claimed', 'abandoned']::work_state[]
        WHEN 'waiting' THEN ARRAY['ready', 'abandoned']::work_state[]
        WHEN 'claimed' THEN ARRAY['in_progress', 'ready', 'claimed', 'waiting']::work_state[]
        WHEN 'in_progress' THEN
            ARRAY['ready', 'claimed', 'blocked', 'verified', 'abandoned', 'waiting']::work_state[]
        WHEN 'blocked' THEN ARRAY['in_progress', 'abandoned']::work_state[]
        WHEN 'verified' THEN ARRAY['done']::work_state[]
        ELSE ARRAY[]::work_state[]
    END;

CREATE OR REPLACE FUNCTION wl_abandon_dispositions(from_state work_state) RETURNS work_disposition[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE from_state
        WHEN 'ready' THEN ARRAY['DROPPED', 'DEFERRED', 'DEAD']::work_disposition[]
        WHEN 'waiting' THEN ARRAY['DROPPED', 'DEFERRED', 'DEAD']::work_disposition[]
        WHEN 'in_progress' THEN ARRAY['DROPPED', 'DEAD']::work_disposition[]
        WHEN 'blocked' THEN ARRAY['DEFERRED', 'DEAD']::work_disposition[]
        ELSE ARRAY[]::work_disposition[]
    END;

-- 0002's guard, with registration as waiting and the attempt limit: a new attempt starts
-- only while the unit's failed attempts are below its allowance.
CREATE OR REPLACE FUNCTION wl_guard_unit_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state NOT IN ('ready', 'waiting') OR NEW.attempt_count <> 0 OR NEW.cost_cents <> 0
           OR NEW.failed_attempts <> 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'check_violation',
                CONSTRAINT = 'unit_registered_ready',
                MESSAGE = format('unit %s must be registered ready (or waiting), with no '
                                 'attempts and no cost', NEW.external_ref),
                HINT = 'register the unit, then claim it';
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.disposed_at IS NOT NULL AND (NEW.disposition IS DISTINCT FROM OLD.disposition
                                        OR NEW.disposed_at IS DISTINCT FROM OLD.disposed_at) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'unit_disposition_final',
            MESSAGE = format('unit %s was disposed %s at %s; a disposition never changes',
                             OLD.external_ref, OLD.disposition, OLD.disposed_at),
            HINT = 'nothing further can be done to this unit';
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state AND NOT NEW.state = ANY (wl_next_states(OLD.state)) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'unit_state_transition_allowed',
            MESSAGE = format('unit %s cannot move from %s to %s', OLD.external_ref, OLD.state, NEW.state),
            HINT = format('allowed from %s: %s', OLD.state,
                          coalesce(nullif(array_to_string(wl_next_states(OLD.state), ', '), ''),
                                   'nothing (terminal)'));
    END IF;
    IF NEW.state = 'abandoned' AND OLD.state <> 'abandoned'
       AND NOT NEW.disposition = ANY (wl_abandon_dispositions(OLD.state)) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'unit_disposition_allowed_from_state',
            MESSAGE = format('unit %s cannot be disposed %s from %s',
                             OLD.external_ref, NEW.disposition, OLD.state),
            HINT = format('dispositions allowed from %s: %s', OLD.state,
                          array_to_string(wl_abandon_dispositions(OLD.state), ', '));
    END IF;
    IF NEW.parent_id IS DISTINCT FROM OLD.parent_id OR NEW.max_attempts <> OLD.max_attempts
       OR NEW.failed_attempts < OLD.failed_attempts THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'unit_shape_fixed',
            MESSAGE = format('unit %s: its parent and max_attempts are fixed at registration, '
                             'and its failed attempts only grow', OLD.external_ref),
            HINT = 'answer the ledger''s question (unblock) to allow more attempts';
    END IF;
    IF NEW.attempts_allowed <> OLD.attempts_allowed
       AND NOT (OLD.state = 'waiting' AND NEW.state = 'ready'
                AND NEW.attempts_allowed = NEW.failed_attempts + NEW.max_attempts) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'unit_allowance_by_answer',
            MESSAGE = format('unit %s: its attempt allowance grows only when the ledger''s '
                             'question is answered, to failed_attempts + max_attempts',
                             OLD.external_ref),
            HINT = 'POST /units/{unit}/unblock with an answer';
    END IF;
    IF NEW.attempt_count <> OLD.attempt_count THEN
        -- A new attempt starts only by a claim: of a ready unit, or of a lapsed lease.
        IF NEW.state <> 'claimed' OR NEW.attempt_count <> OLD.attempt_count + 1
           OR (OLD.state <> 'ready' AND OLD.lease_expires_at > now()) THEN
            RAISE EXCEPTION USING ERRCODE = 'check_violation',
                CONSTRAINT = 'unit_claimed_only_when_claimable',
                MESSAGE = format('unit %s (%s, lease until %s) cannot start attempt %s',
                                 OLD.external_ref, OLD.state, OLD.lease_expires_at,
                                 NEW.attempt_count),
                HINT = 'claim a ready unit, or one whose lease has expired';
        END IF;
        IF NEW.failed_attempts >= NEW.attempts_allowed THEN
            RAISE EXCEPTION USING ERRCODE = 'check_violation',
                CONSTRAINT = 'attempt_limit_reached',
                MESSAGE = format('unit %s has used %s of its %s allowed attempts; it cannot '
                                 'start attempt %s', OLD.external_ref, NEW.failed_attempts,
                                 NEW.attempts_allowed, NEW.attempt_count),
                HINT = 'answer the ledger''s question on it to allow more, or dispose it';
        END IF;
    ELSIF NEW.claimed_by IS DISTINCT FROM OLD.claimed_by AND NEW.claimed_by IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'unit_holder_changes_only_by_claim',
            MESSAGE = format('unit %s is held by %s; it can pass to %s only through a new claim',
                             OLD.external_ref, OLD.claimed_by, NEW.claimed_by),
            HINT = 'release the unit, then claim it';
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END $$;

-- -- prerequisites ------------------------------------------------------------------------
CREATE TABLE unit_requirements (
    unit_id         uuid NOT NULL REFERENCES work_units (id),
    prerequisite_id uuid NOT NULL REFERENCES work_units (id),
    created_at      timestamptz NOT NULL DEFAULT now(),
    waived_at       timestamptz,
    waived_by       text,
    waive_reason    text,
    CONSTRAINT requirement_unique PRIMARY KEY (unit_id, prerequisite_id),
    CONSTRAINT prerequisite_cycle CHECK (unit_id <> prerequisite_id),
    CONSTRAINT requirement_waived_by_someone CHECK ((waived_at IS NULL) = (waived_by IS NULL)),
    CONSTRAINT requirement_reason_bounded CHECK (length(waive_reason) <= 2000)
);
CREATE INDEX unit_requirements_prerequisite_idx ON unit_requirements (prerequisite_id, unit_id);

-- A requirement is never removed; its only change is being waived, once.
CREATE FUNCTION wl_guard_requirement_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.waived_at IS NOT NULL OR NEW.unit_id <> OLD.unit_id
       OR NEW.prerequisite_id <> OLD.prerequisite_id OR NEW.created_at <> OLD.created_at THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'requirement_waived_once',
            MESSAGE = format('the requirement of unit %s on %s can only be waived, once',
                             OLD.unit_id, OLD.prerequisite_id),
            HINT = 'GET /units/{unit} lists its requirements';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER requirement_waived_once BEFORE UPDATE ON unit_requirements
    FOR EACH ROW EXECUTE FUNCTION wl_guard_requirement_change();
CREATE TRIGGER requirements_never_deleted BEFORE DELETE ON unit_requirements
    FOR EACH ROW EXECUTE FUNCTION wl_refuse_rewrite('requirements_never_deleted');
CREATE TRIGGER requirements_never_deleted_truncate BEFORE TRUNCATE ON unit_requirements
    FOR EACH STATEMENT EXECUTE FUNCTION wl_refuse_rewrite('requirements_never_deleted');

-- No cycle, whatever inserts the edges. Edges added concurrently could close a cycle that
-- neither transaction sees, so checks take turns (a transaction lock, held to commit), and
-- each statement after the lock reads what the transactions before it committed.
CREATE FUNCTION wl_refuse_requirement_cycle() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    origin uuid;
    names text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('wl_requirement_edges'));
    WITH RECURSIVE walk (origin, node) AS (
        SELECT n.unit_id, n.prerequisite_id FROM new_edges AS n
        UNION
        SELECT w.origin, e.prerequisite_id
        FROM walk AS w JOIN unit_requirements AS e ON e.unit_id = w.node
        WHERE w.node <> w.origin
    )
    SELECT w.origin INTO origin FROM walk AS w WHERE w.node = w.origin LIMIT 1;
    IF origin IS NULL THEN
        RETURN NULL;
    END IF;
    WITH RECURSIVE path (node, refs) AS (
        SELECT e.prerequisite_id, ARRAY[origin] FROM unit_requirements AS e
        WHERE e.unit_id = origin
        UNION ALL
        SELECT e.prerequisite_id, p.refs || p.node
        FROM path AS p JOIN unit_requirements AS e ON e.unit_id = p.node
        WHERE p.node <> origin AND NOT p.node = ANY (p.refs)
    ), found_cycle AS (
        SELECT refs FROM path WHERE node = origin ORDER BY cardinality(refs) LIMIT 1
    )
    SELECT string_agg(u.external_ref, ' -> ' ORDER BY r.n) || ' -> ' ||
           (SELECT external_ref FROM work_units WHERE id = origin)
      INTO names
    FROM found_cycle AS c, unnest(c.refs) WITH ORDINALITY AS r (id, n)
    JOIN work_units AS u ON u.id = r.id;
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
        CONSTRAINT = 'prerequisite_cycle',
        MESSAGE = format('these requirements would make a cycle: %s', names),
        HINT = 'a unit cannot require itself, even through others; drop one requirement';
END $$;
CREATE TRIGGER requirements_acyclic AFTER INSERT ON unit_requirements
    REFERENCING NEW TABLE AS new_edges
    FOR EACH STATEMENT EXECUTE FUNCTION wl_refuse_requirement_cycle();

-- When a unit finishes, each dependent it still held counts one unfinished prerequisite
-- less, and the dependents with none left become ready, in the same transaction, with one
-- event each (wl_notify_claimable, 0005, wakes the long-polls). Locked in id order, so
-- two prerequisites finishing at once queue on their shared dependents instead of
-- deadlocking; each sees the other's decrement (the row is re-read after the wait).
CREATE FUNCTION wl_release_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH locked AS (
        SELECT u.id FROM work_units AS u
        WHERE u.id IN (SELECT e.unit_id FROM unit_requirements AS e
                       WHERE e.prerequisite_id = NEW.id AND e.waived_at IS NULL)
        ORDER BY u.id
        FOR NO KEY UPDATE
    ), lowered AS (
        UPDATE work_units AS u
        SET unfinished_prerequisites = u.unfinished_prerequisites - 1,
            state = CASE WHEN u.state = 'waiting' AND u.unfinished_prerequisites = 1
                         THEN 'ready' ELSE u.state END::work_state
        FROM locked AS l
        WHERE u.id = l.id
        RETURNING u.id, u.state
    )
    INSERT INTO work_unit_events (unit_id, event_type, from_state, to_state, agent_id, detail)
    SELECT l.id, 'transitioned', 'waiting', 'ready', 'work-ledger',
           jsonb_build_object('prerequisite', NEW.external_ref, 'prerequisite_id', NEW.id)
    FROM lowered AS l WHERE l.state = 'ready';
    RETURN NULL;
END $$;
CREATE TRIGGER unit_finishing_releases_dependents
    AFTER UPDATE OF state ON work_units
    FOR EACH ROW
    WHEN (wl_is_finished(NEW.state, NEW.disposition)
          AND OLD.state NOT IN ('done', 'abandoned'))
    EXECUTE FUNCTION wl_release_dependents();

-- At commit: the counter is exact, a waiting unit waits on something (a prerequisite or the
-- ledger's question), and a ready unit on nothing.
CREATE FUNCTION wl_check_waiting(target uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    unit work_units;
    unfinished integer;
    open_question boolean;
BEGIN
    SELECT * INTO unit FROM work_units WHERE id = target;
    SELECT count(*) INTO unfinished
    FROM unit_requirements AS e JOIN work_units AS p ON p.id = e.prerequisite_id
    WHERE e.unit_id = target AND e.waived_at IS NULL AND NOT wl_is_finished(p.state, p.disposition);
    IF unit.unfinished_prerequisites <> unfinished THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'unit_prerequisites_counted',
            MESSAGE = format('unit %s counts %s unfinished prerequisites but has %s',
                             unit.external_ref, unit.unfinished_prerequisites, unfinished),
            HINT = 'requirements are added by register and split, removed by finishing or waiving';
    END IF;
    open_question := EXISTS (SELECT 1 FROM blocking_questions AS q
                             WHERE q.unit_id = target AND q.status = 'open');
    IF unit.state = 'waiting' AND unfinished = 0 AND NOT open_question THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'unit_waiting_on_something',
            MESSAGE = format('unit %s would wait with every prerequisite finished and no '
                             'open question', unit.external_ref),
            HINT = 'a unit with nothing to wait on is ready';
    END IF;
    IF unit.state = 'ready' AND open_question THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'unit_waiting_on_something',
            MESSAGE = format('unit %s would be ready with an open question', unit.external_ref),
            HINT = 'answer or cancel the question first';
    END IF;
END $$;

CREATE FUNCTION wl_check_waiting_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'work_units' THEN
        PERFORM wl_check_waiting(NEW.id);
    ELSE
        PERFORM wl_check_waiting(NEW.unit_id);
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER unit_prerequisites_counted_on_insert
    AFTER INSERT ON work_units DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.state = 'waiting' OR NEW.unfinished_prerequisites <> 0)
    EXECUTE FUNCTION wl_check_waiting_trigger();
CREATE CONSTRAINT TRIGGER unit_prerequisites_counted_on_update
    AFTER UPDATE OF state, unfinished_prerequisites ON work_units DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.state = 'waiting' OR OLD.state = 'waiting'
          OR NEW.unfinished_prerequisites <> OLD.unfinished_prerequisites)
    EXECUTE FUNCTION wl_check_waiting_trigger();
CREATE CONSTRAINT TRIGGER unit_prerequisites_counted_on_requirement
    AFTER INSERT OR UPDATE ON unit_requirements DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION wl_check_waiting_trigger();

-- -- cost records ---------------------------------------------------------------------------
CREATE TABLE cost_records (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    attempt_id         uuid NOT NULL REFERENCES work_unit_attempts (id),
    unit_id            uuid NOT NULL REFERENCES work_units (id),
    cost_cents         bigint NOT NULL,
    model              text,
    input_tokens       bigint,
    output_tokens      bigint,
    cache_read_tokens  bigint,
    cache_write_tokens bigint,
    estimated          boolean NOT NULL DEFAULT false,
    recorded_by        text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT cost_record_not_negative CHECK (
        cost_cents >= 0 AND coalesce(input_tokens, 0) >= 0 AND coalesce(output_tokens, 0) >= 0
        AND coalesce(cache_read_tokens, 0) >= 0 AND coalesce(cache_write_tokens, 0) >= 0),
    CONSTRAINT cost_record_not_empty CHECK (
        cost_cents > 0 OR coalesce(input_tokens, 0) + coalesce(output_tokens, 0)
                          + coalesce(cache_read_tokens, 0) + coalesce(cache_write_tokens, 0) > 0),
    CONSTRAINT cost_record_model_bounded CHECK (length(model) BETWEEN 1 AND 128)
);
CREATE INDEX cost_records_attempt_idx ON cost_records (attempt_id);
CREATE TRIGGER cost_records_append_only BEFORE UPDATE OR DELETE ON cost_records
    FOR EACH ROW EXECUTE FUNCTION wl_refuse_rewrite('cost_records_append_only');
CREATE TRIGGER cost_records_append_only_truncate BEFORE TRUNCATE ON cost_records
    FOR EACH STATEMENT EXECUTE FUNCTION wl_refuse_rewrite('cost_records_append_only');

-- What was recorded before records existed becomes one record per attempt, model unknown.
INSERT INTO cost_records (attempt_id, unit_id, cost_cents, recorded_by, created_at)
SELECT a.id, a.unit_id, a.cost_cents, a.agent_id, coalesce(a.ended_at, a.started_at)
FROM work_unit_attempts AS a WHERE a.cost_cents > 0;

-- 0002's sums, and now: an attempt's cost is the sum of its records, and a unit's failed
-- attempts are the attempts that ended failed, abandoned or superseded.
CREATE OR REPLACE FUNCTION wl_check_unit_sums() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    target uuid;
    unit work_units;
    attempts_cost bigint;
    attempts_count integer;
    attempts_max integer;
    attempts_failed integer;
    checked_attempt uuid;
    attempt_cost bigint;
    records_cost bigint;
BEGIN
    IF TG_TABLE_NAME = 'work_units' THEN
        target := NEW.id;
    ELSE
        target := NEW.unit_id;
    END IF;
    SELECT * INTO unit FROM work_units WHERE id = target;
    SELECT coalesce(sum(cost_cents), 0), count(*), coalesce(max(attempt_no), 0),
           count(*) FILTER (WHERE outcome IN ('failed', 'abandoned', 'superseded'))
      INTO attempts_cost, attempts_count, attempts_max, attempts_failed
      FROM work_unit_attempts WHERE unit_id = target;
    IF unit.cost_cents <> attempts_cost THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'unit_cost_equals_attempt_costs',
            MESSAGE = format('unit %s costs %s cents but its attempts add up to %s',
                             unit.external_ref, unit.cost_cents, attempts_cost),
            HINT = 'record cost against an attempt; the unit total follows';
    END IF;
    IF unit.attempt_count <> attempts_count OR attempts_count <> attempts_max THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'attempt_numbers_contiguous',
            MESSAGE = format('unit %s counts %s attempts but has %s numbered up to %s',
                             unit.external_ref, unit.attempt_count, attempts_count, attempts_max),
            HINT = 'attempts are numbered 1, 2, 3... by claims only';
    END IF;
    IF unit.failed_attempts <> attempts_failed THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'unit_failed_attempts_counted',
            MESSAGE = format('unit %s counts %s failed attempts but %s ended failed, abandoned '
                             'or superseded', unit.external_ref, unit.failed_attempts,
                             attempts_failed),
            HINT = 'failed attempts are counted by release and stale reclaim only';
    END IF;
    IF TG_TABLE_NAME <> 'work_units' THEN
        IF TG_TABLE_NAME = 'cost_records' THEN
            checked_attempt := NEW.attempt_id;
        ELSE
            checked_attempt := NEW.id;
        END IF;
        SELECT a.cost_cents INTO attempt_cost FROM work_unit_attempts AS a
         WHERE a.id = checked_attempt;
        SELECT coalesce(sum(r.cost_cents), 0) INTO records_cost
          FROM cost_records AS r WHERE r.attempt_id = checked_attempt;
        IF attempt_cost <> records_cost THEN
            RAISE EXCEPTION USING ERRCODE = 'check_violation',
                CONSTRAINT = 'attempt_cost_equals_cost_records',
                MESSAGE = format('attempt %s of unit %s costs %s cents but its cost records '
                                 'add up to %s', checked_attempt, unit.external_ref, attempt_cost,
                                 records_cost),
                HINT = 'record cost with POST /attempts/{id}/cost; the sums follow';
        END IF;
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER unit_sums_on_unit ON work_units;
CREATE CONSTRAINT TRIGGER unit_sums_on_unit
    AFTER UPDATE OF cost_cents, attempt_count, failed_attempts ON work_units
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (OLD.cost_cents <> NEW.cost_cents OR OLD.attempt_count <> NEW.attempt_count
          OR OLD.failed_attempts <> NEW.failed_attempts)
    EXECUTE FUNCTION wl_check_unit_sums();
-- Only the outcomes that count: a verify (the hot path) fires nothing here.
CREATE CONSTRAINT TRIGGER unit_sums_on_attempt_outcome
    AFTER UPDATE OF outcome ON work_unit_attempts
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.outcome IN ('failed', 'abandoned', 'superseded'))
    EXECUTE FUNCTION wl_check_unit_sums();
CREATE CONSTRAINT TRIGGER unit_sums_on_cost_record
    AFTER INSERT ON cost_records
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION wl_check_unit_sums();

-- -- budgets --------------------------------------------------------------------------------
-- A budget caps a fleet, or one domain of it (domain null: the whole fleet).
CREATE TABLE budgets (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    fleet      text NOT NULL,
    domain     text,
    cap_cents  bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text,
    CONSTRAINT budget_scope_unique UNIQUE NULLS NOT DISTINCT (fleet, domain),
    CONSTRAINT budget_cap_not_negative CHECK (cap_cents >= 0),
    CONSTRAINT budget_fleet_bounded CHECK (length(fleet) BETWEEN 1 AND 256),
    CONSTRAINT budget_domain_bounded CHECK (length(domain) BETWEEN 1 AND 256)
);

-- Every cap a budget ever had, from when: what `audit` checks claims against.
CREATE TABLE budget_caps (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    fleet      text NOT NULL,
    domain     text,
    cap_cents  bigint NOT NULL,
    set_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    set_by     text
);
CREATE TRIGGER budget_caps_append_only BEFORE UPDATE OR DELETE ON budget_caps
    FOR EACH ROW EXECUTE FUNCTION wl_refuse_rewrite('budget_caps_append_only');

-- What a scope has spent, kept in 16 shard rows per (fleet, domain) so that 64 agents
-- recording cost into one scope do not queue on one row: each connection adds to the
-- shard of its backend pid. Kept by a trigger on the unit's cost, so every path that
-- records cost (and psql) keeps it; a fleet's spend is the sum over its domains.
CREATE TABLE scope_spend (
    fleet  text NOT NULL,
    domain text NOT NULL,
    shard  smallint NOT NULL,
    cents  bigint NOT NULL DEFAULT 0,
    CONSTRAINT scope_spend_key PRIMARY KEY (fleet, domain, shard),
    CONSTRAINT scope_spend_not_negative CHECK (cents >= 0)
);

INSERT INTO scope_spend (fleet, domain, shard, cents)
SELECT fleet, domain, 0, sum(cost_cents) FROM work_units
GROUP BY fleet, domain HAVING sum(cost_cents) > 0;

CREATE FUNCTION wl_add_scope_spend() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO scope_spend AS s (fleet, domain, shard, cents)
    VALUES (NEW.fleet, NEW.domain, pg_backend_pid() % 16, NEW.cost_cents - OLD.cost_cents)
    ON CONFLICT (fleet, domain, shard) DO UPDATE SET cents = s.cents + EXCLUDED.cents;
    RETURN NULL;
END $$;
CREATE TRIGGER unit_cost_adds_to_scope_spend
    AFTER UPDATE OF cost_cents ON work_units
    FOR EACH ROW WHEN (NEW.cost_cents <> OLD.cost_cents)
    EXECUTE FUNCTION wl_add_scope_spend();

CREATE FUNCTION wl_scope_spent(fleet text, domain text) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (SELECT coalesce(sum(s.cents), 0)::bigint FROM scope_spend AS s
            WHERE s.fleet = wl_scope_spent.fleet
              AND (wl_scope_spent.domain IS NULL OR s.domain = wl_scope_spent.domain));

-- May a unit of this fleet and domain be claimed anew? Not once a budget over it is spent.
CREATE FUNCTION wl_budget_open(fleet text, domain text) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN NOT EXISTS (
        SELECT 1 FROM budgets AS b
        WHERE b.fleet = wl_budget_open.fleet
          AND (b.domain IS NULL OR b.domain = wl_budget_open.domain)
          AND wl_scope_spent(b.fleet, b.domain) >= b.cap_cents);

-- -- the ledger's question when a unit reaches its attempt limit -------------------------------
-- $1 unit, $2 the attempt ending now, $3 its outcome, $4 its reason: the count, and each
-- attempt's outcome and reason (a release's reason, or the lapsed lease of a reclaim).
CREATE FUNCTION wl_attempt_limit_question(
    target uuid, ending uuid, ending_outcome attempt_outcome, ending_reason text
) RETURNS text LANGUAGE sql STABLE
RETURN (
    SELECT format('Unit %s has failed %s of its %s allowed attempts, so the ledger stopped '
                  'claiming it. Attempts: %s. Answer to allow %s more attempts (POST '
                  '/units/%s/unblock), or dispose it DEAD, DEFERRED or DROPPED.',
                  u.external_ref, u.failed_attempts + 1, u.attempts_allowed,
                  string_agg(format('#%s %s by %s (%s)', a.attempt_no,
                                    CASE WHEN a.id = ending THEN ending_outcome ELSE a.outcome END,
                                    a.agent_id,
                                    CASE WHEN a.id = ending THEN coalesce(ending_reason, 'no reason given')
                                         ELSE coalesce(
                                             (SELECT e.detail ->> 'reason' FROM work_unit_events AS e
                                              WHERE e.unit_id = a.unit_id AND e.attempt_id = a.id
                                                AND e.event_type = 'released' LIMIT 1),
                                             CASE a.outcome WHEN 'superseded' THEN 'its lease lapsed'
                                                  ELSE 'no reason given' END) END),
                             '; ' ORDER BY a.attempt_no),
                  u.max_attempts, u.external_ref)
    FROM work_units AS u
    JOIN work_unit_attempts AS a
      ON a.unit_id = u.id AND (a.id = ending OR a.outcome IN ('failed', 'abandoned', 'superseded'))
    WHERE u.id = target
    GROUP BY u.id);

-- -- views ------------------------------------------------------------------------------------
CREATE OR REPLACE VIEW v_queue_depth WITH (security_barrier) AS
SELECT CASE WHEN grouping(domain) = 1 THEN 'total' ELSE 'domain' END AS scope,
       CASE WHEN grouping(domain) = 1 THEN '(all)' ELSE domain END AS domain,
       count(*) FILTER (WHERE state = 'ready') AS ready,
       count(*) FILTER (WHERE state = 'claimed') AS claimed,
       count(*) FILTER (WHERE state = 'in_progress') AS in_progress,
       count(*) FILTER (WHERE state = 'blocked') AS blocked,
       count(*) FILTER (WHERE state = 'verified') AS verified,
       count(*) FILTER (WHERE state = 'done') AS done,
       count(*) FILTER (WHERE state = 'abandoned') AS abandoned,
       count(*) FILTER (WHERE state NOT IN ('done', 'abandoned')) AS open,
       count(*) AS units,
       count(*) FILTER (WHERE state = 'waiting') AS waiting
FROM work_units
GROUP BY GROUPING SETS ((domain), ())
ORDER BY grouping(domain), domain;
COMMENT ON VIEW v_queue_depth IS
    'How many units are in each state, per domain (scope domain) and over all domains '
    '(scope total, always present). open = not yet done or abandoned; waiting = registered '
    'but held by a prerequisite or by the ledger''s question at the attempt limit.';

CREATE VIEW v_waiting WITH (security_barrier) AS
SELECT u.id AS unit_id, u.external_ref, u.fleet, u.domain,
       'prerequisite'::text AS reason,
       p.id AS prerequisite_id, p.external_ref AS prerequisite_ref,
       p.state AS prerequisite_state, p.disposition AS prerequisite_disposition,
       NULL::uuid AS question_id, u.updated_at AS waiting_since
FROM work_units AS u
JOIN unit_requirements AS e ON e.unit_id = u.id AND e.waived_at IS NULL
JOIN work_units AS p ON p.id = e.prerequisite_id
WHERE u.state = 'waiting' AND NOT wl_is_finished(p.state, p.disposition)
UNION ALL
SELECT u.id, u.external_ref, u.fleet, u.domain, 'answer', NULL, NULL, NULL, NULL, q.id,
       q.created_at
FROM work_units AS u
JOIN blocking_questions AS q ON q.unit_id = u.id AND q.status = 'open'
WHERE u.state = 'waiting';
COMMENT ON VIEW v_waiting IS
    'What holds each waiting unit, one row per reason: a prerequisite neither finished nor '
    'waived (its state and disposition: DEAD or DEFERRED ones never finish, so an operator '
    'waives or disposes), or the ledger''s open question at the attempt limit.';

CREATE VIEW v_budget WITH (security_barrier) AS
SELECT b.fleet, b.domain, b.cap_cents, s.spent AS spent_cents,
       greatest(b.cap_cents - s.spent, 0) AS remaining_cents,
       s.spent >= b.cap_cents AS exhausted,
       CASE WHEN b.cap_cents = 0 THEN NULL
            ELSE round(100.0 * s.spent / b.cap_cents, 1) END AS percent_used,
       b.updated_at
FROM budgets AS b
-- The sum written out, not wl_scope_spent(): a function reads with the reader's own
-- privileges, a view's query with its owner's, and the reader sees views only.
CROSS JOIN LATERAL (SELECT coalesce(sum(p.cents), 0)::bigint AS spent FROM scope_spend AS p
                    WHERE p.fleet = b.fleet AND (b.domain IS NULL OR p.domain = b.domain)) AS s
ORDER BY b.fleet, b.domain NULLS FIRST;
COMMENT ON VIEW v_budget IS
    'Each budget (a fleet, or a fleet and domain: domain null): its cap, what the scope''s '
    'units have spent, what remains, and whether it is exhausted (no new claim in scope).';

CREATE VIEW v_cost_by_model WITH (security_barrier) AS
SELECT u.fleet, u.domain, r.model,
       sum(r.cost_cents)::bigint AS cost_cents,
       (sum(r.cost_cents) FILTER (WHERE r.estimated))::bigint AS estimated_cents,
       sum(r.input_tokens)::bigint AS input_tokens,
       sum(r.output_tokens)::bigint AS output_tokens,
       sum(r.cache_read_tokens)::bigint AS cache_read_tokens,
       sum(r.cache_write_tokens)::bigint AS cache_write_tokens,
       count(DISTINCT r.unit_id) AS units,
       count(*) AS records
FROM cost_records AS r JOIN work_units AS u ON u.id = r.unit_id
GROUP BY u.fleet, u.domain, r.model
ORDER BY u.fleet, u.domain, r.model NULLS FIRST;
COMMENT ON VIEW v_cost_by_model IS
    'Cost records summed per fleet, domain and model (null: recorded without one): cents, '
    'the estimated part of them, each token class, and how many units and records.';

-- The reader role reads the new views too (as 0007 did for v_question_wait).
ALTER FUNCTION wl_grant_reader(text, text) RENAME TO wl_grant_reader_0008;

CREATE FUNCTION wl_grant_reader(role_name text, password_verifier text) RETURNS text[]
    LANGUAGE plpgsql AS $$
BEGIN
    RETURN wl_grant_reader_0008(role_name, password_verifier)
           || wl_grant_views(role_name, ARRAY['v_waiting', 'v_budget', 'v_cost_by_model']);
END $$;
REVOKE EXECUTE ON FUNCTION wl_grant_reader(text, text) FROM PUBLIC;

DO $$
DECLARE
    reader text;
BEGIN
    FOR reader IN
        SELECT DISTINCT r.rolname
        FROM pg_class AS c
        CROSS JOIN LATERAL aclexplode(c.relacl) AS acl
        JOIN pg_roles AS r ON r.oid = acl.grantee
        WHERE c.oid = 'v_queue_depth'::regclass AND acl.privilege_type = 'SELECT'
          AND acl.grantee <> c.relowner
    LOOP
        PERFORM wl_grant_views(reader, ARRAY['v_waiting', 'v_budget', 'v_cost_by_model']);
    END LOOP;
END $$;
