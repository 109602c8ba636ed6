-- The read side's change rows noted by the unit's guard (issue 32). 0017's row trigger
-- (read_summaries_on_update, AFTER UPDATE) was a second plpgsql call for every unit change:
-- the after-trigger queue, both row versions fetched again, a function call, for one insert.
-- Measured side by side (bench.readside write), that call was most of what the change rows
-- cost a unit's life. The guard (unit_state_transition_allowed, BEFORE INSERT OR UPDATE)
-- already runs for every change, with OLD and NEW at hand, so it appends the change row
-- itself: the same row, the same condition (0017's WHEN clause), for every write path
-- (the service, the projection, raw SQL). A BEFORE trigger sees the row as it will be
-- written: the guard is the only BEFORE trigger on work_units, and it sets only
-- updated_at, which no tally counts. The row is the guard's last step, after every check,
-- so a refused change notes nothing (and a failing statement rolls back the row anyway).
-- New units are still noted per statement (read_summaries_on_insert).

-- 0011's guard, with the change row.
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
    -- The read side's change row (0017), noted here rather than by a trigger of its own:
    -- one plpgsql call per changed unit instead of two, and OLD and NEW already at hand.
    IF (OLD.domain, OLD.state, OLD.disposition, OLD.attempt_count, OLD.cost_cents,
        OLD.evidence_urls, OLD.disposed_at)
       IS DISTINCT FROM (NEW.domain, NEW.state, NEW.disposition, NEW.attempt_count,
                         NEW.cost_cents, NEW.evidence_urls, NEW.disposed_at) THEN
        INSERT INTO wl_unit_changes
        VALUES (NEW.id, OLD.domain, OLD.state, OLD.disposition, OLD.attempt_count,
                OLD.cost_cents, cardinality(OLD.evidence_urls) = 0,
                CASE WHEN OLD.disposition IS NOT NULL THEN OLD.evidence_urls END,
                OLD.disposed_at,
                NEW.domain, NEW.state, NEW.disposition, NEW.attempt_count, NEW.cost_cents,
                cardinality(NEW.evidence_urls) = 0,
                CASE WHEN NEW.disposition IS NOT NULL THEN NEW.evidence_urls END,
                NEW.disposed_at);
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END $$;

DROP TRIGGER read_summaries_on_update ON work_units;
DROP FUNCTION wl_note_unit_change();
