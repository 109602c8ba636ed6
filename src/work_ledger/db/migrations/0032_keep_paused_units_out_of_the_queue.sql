-- Pull-next no longer meets the ready units of a paused scope (issue 38's speed goal).
--
-- 0028 and 0029 made a claim skip a closed scope with one probe per scope. But the head
-- it starts from is still the oldest ready unit of all, locked before its scope is asked:
-- behind a weekend's pause, every claim locked one of the paused units ahead (a locked
-- row is a write: its page dirtied, a WAL record), found its scope closed, and went on to
-- wl_next_open_unit. With 1,000 paused units ahead, pull-next ran at 0.63-0.71x the
-- claim without them at 64 claimers (bench `ledger_sql_claim_controls`), where the same
-- controls with those units behind the backlog ran at 0.76-1.23x.
--
-- Now a ready unit of a paused scope carries `in_paused_scope`, and the two indexes that
-- pull-next walks in queue order leave it out: the head is the oldest ready unit no pause
-- holds. A cap, a spent budget or a held key still closes a head, and 0028's way past it
-- is unchanged; wl_next_open_unit reads work_units_ready_scope_idx, which keeps every
-- ready unit.
--
-- The mark is kept by the database, from `controls`, whatever writes:
-- - A unit entering ready (registered, released, reclaimed, unblocked, or moved to another
--   scope) is marked from the pauses over it, read FOR SHARE: a pause being lifted at that
--   moment is waited for and read as committed, so the unit is never marked by a pause
--   that is gone. A unit leaving ready loses its mark.
-- - A pause marks its scope's ready units, skipping any another transaction has locked
--   (a claimer that locked one waits for this pause and is then refused by it; waiting
--   for the claimer instead would deadlock). Lifting a pause clears the mark of its
--   scope's units that no other pause holds; a unit being made ready meanwhile has waited
--   on the pause's row (above), so it is cleared too, or reads the pause as lifted.
-- - Written by hand, a mark that disagrees with `controls` is refused
--   (unit_paused_mark_kept).
-- So a mark is never left on a unit that no pause holds: such a unit would be out of
-- pull-next's queue. The other way round is allowed and costs only speed: a ready unit of
-- a paused scope left unmarked (locked by a claimer at the moment of the pause, or made
-- ready by a transaction that read the scope before the pause committed) is claimed past
-- as before 0032, and the admission trigger refuses it as before (0022).
--
-- Lifting a pause reads its scope's units from a snapshot of its own statement: under
-- REPEATABLE READ or SERIALIZABLE that snapshot is older than the units made ready while
-- the lift waited, so a lift is refused there (unit_paused_mark_kept); the ledger lifts
-- in READ COMMITTED.

ALTER TABLE work_units ADD COLUMN in_paused_scope boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN work_units.in_paused_scope IS
    'A ready unit that a pause over its fleet or domain holds, kept by the database from controls (0032): out of the indexes pull-next walks. False otherwise, or for a moment while a pause is begun.';

-- Whether a pause holds a unit of this fleet and domain now; the rows are locked FOR
-- SHARE, so a pause being lifted is waited for and read as it commits.
CREATE FUNCTION wl_unit_paused(fleet text, domain text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM FROM controls AS c
    WHERE c.fleet = wl_unit_paused.fleet
      AND (c.domain IS NULL OR c.domain = wl_unit_paused.domain) AND c.paused
    FOR SHARE;
    RETURN FOUND;
END $$;

CREATE FUNCTION wl_mark_paused_unit() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    paused boolean := NEW.state = 'ready' AND wl_unit_paused(NEW.fleet, NEW.domain);
BEGIN
    -- A mark written by hand (not by a trigger of the ledger's: pg_trigger_depth() is 1)
    -- that disagrees with controls is refused rather than corrected.
    IF pg_trigger_depth() = 1 AND NEW.in_paused_scope <> paused
       AND (CASE WHEN TG_OP = 'INSERT' THEN NEW.in_paused_scope
                 ELSE NEW.in_paused_scope <> OLD.in_paused_scope END) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'unit_paused_mark_kept',
            MESSAGE = format('unit %s: in_paused_scope is kept by the ledger from controls '
                             '(%s now)', NEW.external_ref, paused),
            HINT = 'pause or resume its scope with POST /controls';
    END IF;
    NEW.in_paused_scope := paused;
    RETURN NEW;
END $$;

CREATE TRIGGER work_units_mark_paused_inserted BEFORE INSERT ON work_units
    FOR EACH ROW WHEN (NEW.state = 'ready' OR NEW.in_paused_scope)
    EXECUTE FUNCTION wl_mark_paused_unit();
-- A claim (ready to claimed, unmarked) fires nothing: it neither enters ready nor carries
-- a mark.
CREATE TRIGGER work_units_mark_paused BEFORE UPDATE OF state, fleet, domain, in_paused_scope
    ON work_units FOR EACH ROW
    WHEN ((NEW.state = 'ready' AND (OLD.state <> 'ready' OR NEW.fleet <> OLD.fleet
                                    OR NEW.domain <> OLD.domain))
          OR (NEW.in_paused_scope AND NEW.state <> 'ready')
          OR NEW.in_paused_scope <> OLD.in_paused_scope)
    EXECUTE FUNCTION wl_mark_paused_unit();

CREATE FUNCTION wl_mark_paused_scope() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.paused
       AND (TG_OP = 'DELETE' OR NOT NEW.paused
            OR (NEW.fleet, NEW.domain) IS DISTINCT FROM (OLD.fleet, OLD.domain)) THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = 'check_violation',
                CONSTRAINT = 'unit_paused_mark_kept',
                MESSAGE = format('fleet %s%s: a pause is lifted in a READ COMMITTED '
                                 'transaction only, not %s', OLD.fleet,
                                 coalesce(' domain ' || OLD.domain, ''),
                                 upper(current_setting('transaction_isolation'))),
                HINT = 'resume the scope with POST /controls, or in READ COMMITTED';
        END IF;
        UPDATE work_units AS u SET in_paused_scope = false
        WHERE u.in_paused_scope AND u.fleet = OLD.fleet
          AND (OLD.domain IS NULL OR u.domain = OLD.domain)
          AND NOT EXISTS (SELECT FROM controls AS c
                          WHERE c.fleet = u.fleet AND (c.domain IS NULL OR c.domain = u.domain)
                            AND c.paused);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.paused
       AND (TG_OP = 'INSERT' OR NOT OLD.paused
            OR (NEW.fleet, NEW.domain) IS DISTINCT FROM (OLD.fleet, OLD.domain)) THEN
        UPDATE work_units AS u SET in_paused_scope = true
        WHERE u.id IN (SELECT r.id FROM work_units AS r
                       WHERE r.state = 'ready' AND NOT r.in_paused_scope AND r.fleet = NEW.fleet
                         AND (NEW.domain IS NULL OR r.domain = NEW.domain)
                       FOR NO KEY UPDATE SKIP LOCKED);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER controls_mark_paused_units AFTER INSERT OR UPDATE OR DELETE ON controls
    FOR EACH ROW EXECUTE FUNCTION wl_mark_paused_scope();

-- Lifting a pause finds its marked units here.
CREATE INDEX work_units_paused_idx ON work_units (fleet, domain) WHERE in_paused_scope;

UPDATE work_units AS u SET in_paused_scope = true
WHERE u.state = 'ready'
  AND EXISTS (SELECT FROM controls AS c
              WHERE c.fleet = u.fleet AND (c.domain IS NULL OR c.domain = u.domain) AND c.paused);

-- The indexes pull-next walks in queue order (claim_next_unit's `fresh` and
-- `fresh_in_domain`): the ready units no pause holds.
DROP INDEX work_units_ready_idx;
CREATE INDEX work_units_ready_idx ON work_units (created_at, id)
    WHERE state = 'ready' AND NOT in_paused_scope;
DROP INDEX work_units_ready_domain_idx;
CREATE INDEX work_units_ready_domain_idx ON work_units (domain, created_at, id)
    WHERE state = 'ready' AND NOT in_paused_scope;
