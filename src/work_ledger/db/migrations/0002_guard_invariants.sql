-- The rules that a CHECK cannot express: the state machine of DESIGN §4, final
-- dispositions and outcomes, append-only history, and the cross-table sums. Each raises
-- with CONSTRAINT = its stable name, so the error mapping needs no string matching.

-- The allowed map of DESIGN §4; work_ledger.domain.TRANSITIONS mirrors it (a test checks).
CREATE FUNCTION wl_next_states(from_state work_state) RETURNS work_state[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE from_state
        WHEN 'ready' THEN ARRAY['claimed', 'abandoned']::work_state[]
        WHEN 'claimed' THEN ARRAY['in_progress', 'ready', 'claimed']::work_state[]
        WHEN 'in_progress' THEN
            ARRAY['ready', 'claimed', 'blocked', 'verified', 'abandoned']::work_state[]
        WHEN 'blocked' THEN ARRAY['in_progress', 'abandoned']::work_state[]
        WHEN 'verified' THEN ARRAY['done']::work_state[]
        ELSE ARRAY[]::work_state[]
    END;

-- Which dispositions may abandon a unit from each state (done ⇔ MIGRATED is a CHECK).
CREATE FUNCTION wl_abandon_dispositions(from_state work_state) RETURNS work_disposition[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE from_state
        WHEN 'ready' THEN ARRAY['DROPPED', 'DEFERRED', 'DEAD']::work_disposition[]
        WHEN 'in_progress' THEN ARRAY['DROPPED', 'DEAD']::work_disposition[]
        WHEN 'blocked' THEN ARRAY['DEFERRED', 'DEAD']::work_disposition[]
        ELSE ARRAY[]::work_disposition[]
    END;

CREATE FUNCTION wl_guard_unit_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'ready' OR NEW.attempt_count <> 0 OR NEW.cost_cents <> 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'check_violation',
                CONSTRAINT = 'unit_registered_ready',
                MESSAGE = format('unit %s must be registered ready, with no attempts and no cost',
                                 NEW.external_ref),
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

CREATE TRIGGER unit_state_transition_allowed
    BEFORE INSERT OR UPDATE ON work_units
    FOR EACH ROW EXECUTE FUNCTION wl_guard_unit_change();

CREATE FUNCTION wl_guard_attempt_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.unit_id <> OLD.unit_id OR NEW.attempt_no <> OLD.attempt_no
       OR NEW.agent_id <> OLD.agent_id OR NEW.started_at <> OLD.started_at
       OR NEW.cost_cents < OLD.cost_cents
       OR (OLD.outcome IS NOT NULL AND (NEW.outcome IS DISTINCT FROM OLD.outcome
                                        OR NEW.ended_at IS DISTINCT FROM OLD.ended_at)) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'attempt_outcome_final',
            MESSAGE = format('attempt %s of unit %s (%s) cannot change so: its unit, number, agent '
                             'and start are fixed, its cost only grows, and once ended its outcome '
                             'never changes', OLD.attempt_no, OLD.unit_id,
                             coalesce('ended ' || OLD.outcome, 'running')),
            HINT = 'claim the unit again to start a new attempt';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER attempt_outcome_final
    BEFORE UPDATE ON work_unit_attempts
    FOR EACH ROW EXECUTE FUNCTION wl_guard_attempt_change();

CREATE FUNCTION wl_guard_question_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status <> 'open' OR NEW.unit_id <> OLD.unit_id
       OR NEW.question <> OLD.question THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'question_status_final',
            MESSAGE = format('question %s is %s; a closed question never changes', OLD.id, OLD.status),
            HINT = 'ask a new question by blocking the unit again';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER question_status_final
    BEFORE UPDATE ON blocking_questions
    FOR EACH ROW EXECUTE FUNCTION wl_guard_question_change();

-- History is kept forever: events are never changed, and nothing is ever deleted.
CREATE FUNCTION wl_refuse_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
        CONSTRAINT = TG_ARGV[0],
        MESSAGE = format('%s on %s refused: the ledger keeps its history forever',
                         TG_OP, TG_TABLE_NAME),
        HINT = 'record a new event or a new transition instead';
END $$;

CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON work_unit_events
    FOR EACH ROW EXECUTE FUNCTION wl_refuse_rewrite('events_append_only');
CREATE TRIGGER events_append_only_truncate BEFORE TRUNCATE ON work_unit_events
    FOR EACH STATEMENT EXECUTE FUNCTION wl_refuse_rewrite('events_append_only');
CREATE TRIGGER units_never_deleted BEFORE DELETE ON work_units
    FOR EACH ROW EXECUTE FUNCTION wl_refuse_rewrite('units_never_deleted');
CREATE TRIGGER units_never_deleted_truncate BEFORE TRUNCATE ON work_units
    FOR EACH STATEMENT EXECUTE FUNCTION wl_refuse_rewrite('units_never_deleted');
CREATE TRIGGER attempts_never_deleted BEFORE DELETE ON work_unit_attempts
    FOR EACH ROW EXECUTE FUNCTION wl_refuse_rewrite('attempts_never_deleted');
CREATE TRIGGER attempts_never_deleted_truncate BEFORE TRUNCATE ON work_unit_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION wl_refuse_rewrite('attempts_never_deleted');
CREATE TRIGGER questions_never_deleted BEFORE DELETE ON blocking_questions
    FOR EACH ROW EXECUTE FUNCTION wl_refuse_rewrite('questions_never_deleted');
CREATE TRIGGER questions_never_deleted_truncate BEFORE TRUNCATE ON blocking_questions
    FOR EACH STATEMENT EXECUTE FUNCTION wl_refuse_rewrite('questions_never_deleted');

-- Sums across tables are checked at commit, once every statement of the change has run.
CREATE FUNCTION wl_check_unit_sums() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    target uuid;
    unit work_units;
    attempts_cost bigint;
    attempts_count integer;
    attempts_max integer;
BEGIN
    IF TG_TABLE_NAME = 'work_units' THEN
        target := NEW.id;
    ELSE
        target := NEW.unit_id;
    END IF;
    SELECT * INTO unit FROM work_units WHERE id = target;
    SELECT coalesce(sum(cost_cents), 0), count(*), coalesce(max(attempt_no), 0)
      INTO attempts_cost, attempts_count, attempts_max
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
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER unit_sums_on_unit
    AFTER UPDATE OF cost_cents, attempt_count ON work_units
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (OLD.cost_cents <> NEW.cost_cents OR OLD.attempt_count <> NEW.attempt_count)
    EXECUTE FUNCTION wl_check_unit_sums();
CREATE CONSTRAINT TRIGGER unit_sums_on_attempt_insert
    AFTER INSERT ON work_unit_attempts
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION wl_check_unit_sums();
CREATE CONSTRAINT TRIGGER unit_sums_on_attempt_cost
    AFTER UPDATE OF cost_cents ON work_unit_attempts
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.cost_cents <> NEW.cost_cents)
    EXECUTE FUNCTION wl_check_unit_sums();
