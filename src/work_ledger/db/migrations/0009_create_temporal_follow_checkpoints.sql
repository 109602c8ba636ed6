-- The follower's durable checkpoint (`work-ledger temporal follow`, DESIGN §9): per
-- Temporal namespace, the close time up to which its visibility sweep has projected every
-- execution. A follower that restarts resumes from here (less its overlap), so catching up
-- costs what it missed, never the namespace's whole closed history. Operational state of
-- the projector, not ledger data: it holds no unit and no event.

CREATE TABLE temporal_follow_checkpoints (
    namespace   text        NOT NULL,
    swept_until timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT temporal_follow_checkpoints_pkey PRIMARY KEY (namespace),
    CONSTRAINT temporal_follow_checkpoint_namespace_bounded
        CHECK (length(namespace) BETWEEN 1 AND 1000)
);

-- A checkpoint never moves back: two followers of one namespace (or a slow pass finishing
-- after a faster one) can only advance it.
CREATE FUNCTION wl_checkpoint_only_advances() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.swept_until < OLD.swept_until THEN
        RAISE EXCEPTION 'temporal_follow_checkpoint_only_advances: % is before %',
            NEW.swept_until, OLD.swept_until
            USING ERRCODE = 'check_violation',
                  CONSTRAINT = 'temporal_follow_checkpoint_only_advances';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER temporal_follow_checkpoint_only_advances
    BEFORE UPDATE ON temporal_follow_checkpoints
    FOR EACH ROW EXECUTE FUNCTION wl_checkpoint_only_advances();

-- The follower lists the units the projection holds on every pass; this keeps that a
-- lookup of the few held by workflows, not a scan of every unit the ledger ever had.
CREATE INDEX work_units_held_by_workflow_idx ON work_units (workflow_id)
    WHERE state IN ('claimed', 'in_progress', 'blocked')
      AND workflow_id IS NOT NULL
      AND claimed_by = 'temporal:' || workflow_id;
