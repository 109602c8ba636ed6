-- A registration that raced another for a new unit refuses itself whole (issue 28).
--
-- register_units reads the ledger once, at the start of its statement. When a concurrent
-- batch inserts one of its refs after that reading, the insert of it waits for the other
-- batch and then does nothing (ON CONFLICT): the ref is neither the statement's own new
-- row nor a unit it saw. A dependent in the batch that required it had counted it as an
-- unfinished prerequisite of the batch but got no requirement row on it, and the deferred
-- check refused the whole transaction at commit (409 unit_prerequisites_counted), though
-- the same batch sent again succeeded. The statement now calls this function for such a
-- ref, before anything commits: the statement (its savepoint, inside a keyed write) is
-- rolled back, and the service runs it again, reading the ledger anew, where the other
-- batch's unit is committed (the insert waited for that commit).
CREATE FUNCTION wl_refuse_raced_registration(external_ref text) RETURNS uuid
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
        CONSTRAINT = 'unit_registered_concurrently',
        MESSAGE = format('unit %s was registered by a concurrent batch while this one ran',
                         external_ref),
        HINT = 'nothing of this batch was written; send the same batch again';
END $$;
