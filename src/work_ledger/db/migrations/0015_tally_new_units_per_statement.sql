-- New units are counted per statement, not per row: a registration of a thousand units
-- (or a bulk INSERT) upserts each key once, where a row trigger would update one tally row
-- a thousand times in one transaction, each update walking the chain of versions the
-- transaction left before it. (A new unit is ready with nothing spent, unit_registered_ready,
-- but the sums are taken in full, so whatever a raw INSERT writes is counted as it is.)
-- Updates stay row triggers (0012): the write path changes one unit per statement, and a
-- statement trigger's transition tables cost more for one row; a raw UPDATE of many units
-- of one key pays for the versions it leaves in its tally row (for a mass edit, disable
-- the trigger and run wl_rebuild_read_summaries() after).
CREATE FUNCTION wl_tally_units_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wl_unit_tallies AS t
    SELECT n.domain, n.state, n.disposition, wl_tally_stripe(16), count(*),
           count(*) FILTER (WHERE n.attempt_count > 0), count(*) FILTER (WHERE n.attempt_count > 1),
           coalesce(sum(n.attempt_count), 0), coalesce(sum(n.cost_cents), 0),
           count(*) FILTER (WHERE cardinality(n.evidence_urls) = 0),
           min(n.disposed_at), max(n.disposed_at)
    FROM new_units AS n
    GROUP BY n.domain, n.state, n.disposition
    ORDER BY n.domain, n.state, n.disposition
    ON CONFLICT ON CONSTRAINT unit_tallies_key DO UPDATE
    SET units = t.units + excluded.units,
        attempted_units = t.attempted_units + excluded.attempted_units,
        reworked_units = t.reworked_units + excluded.reworked_units,
        attempts = t.attempts + excluded.attempts,
        cost_cents = t.cost_cents + excluded.cost_cents,
        units_without_evidence = t.units_without_evidence + excluded.units_without_evidence,
        first_disposed_at = least(t.first_disposed_at, excluded.first_disposed_at),
        last_disposed_at = greatest(t.last_disposed_at, excluded.last_disposed_at);
    RETURN NULL;
END $$;

DROP TRIGGER read_summaries_on_insert ON work_units;
CREATE TRIGGER read_summaries_on_insert
    AFTER INSERT ON work_units REFERENCING NEW TABLE AS new_units
    FOR EACH STATEMENT EXECUTE FUNCTION wl_tally_units_inserted();
