-- The fleet's flow controls (issue 38, DESIGN §13): caps on live units, pause, a ramp gate,
-- and exclusion keys, each decided by the database on the claim's own write.
--
-- Why it is exact (docs/data-model.md says it at length):
-- - An admission (a unit entering claimed or in_progress from a state without a holder)
--   fires wl_admit_unit, BEFORE the row is written. It locks the scope's control rows, the
--   fleet's then the fleet-and-domain one (FOR NO KEY UPDATE, which conflicts with itself
--   and with an operator's UPDATE of the row). Under READ COMMITTED the lock returns the
--   row's latest committed version, and the count that follows takes a new snapshot, so
--   it sees every admission of the scope that committed before ours got the lock. Two
--   admissions in one capped scope therefore decide one after the other: the second
--   counts the first. A pause commits only once the admissions holding the row commit,
--   and every admission after it sees paused.
-- - Scopes without a control row pay one look at a small table per admission.
-- - A unit with exclusion keys holds them in held_keys (the key is its primary key) while
--   it is claimed, in_progress or blocked, written by a trigger whatever changes the
--   unit: a second holder is a unique violation. Keys are taken in sorted order, so
--   overlapping sets cannot wait on each other in a cycle.

-- The exclusion keys of a unit: null when it has none (the common case pays nothing).
ALTER TABLE work_units ADD COLUMN exclusive text[];

CREATE FUNCTION wl_exclusive_keys_ok(keys text[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN cardinality(keys) >= 1 AND cardinality(keys) <= 20
       AND array_position(keys, NULL) IS NULL
       AND (SELECT bool_and(length(k) BETWEEN 1 AND 200) FROM unnest(keys) AS k);

-- The keys sent as a JSON array (a statement's parameter): sorted, distinct, and null for
-- none, as the column keeps them.
CREATE FUNCTION wl_keys_from_json(keys text) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (SELECT array_agg(DISTINCT k ORDER BY k)
            FROM jsonb_array_elements_text(keys::jsonb) AS k);

-- Every existing row has none: NOT VALID spares the migration a scan of the table, and
-- the check holds for every row written from now on.
ALTER TABLE work_units ADD CONSTRAINT unit_exclusive_keys_bounded
    CHECK (exclusive IS NULL OR wl_exclusive_keys_ok(exclusive)) NOT VALID;

CREATE TABLE controls (
    fleet          text NOT NULL,
    domain         text,
    max_live       integer,
    paused         boolean NOT NULL DEFAULT false,
    paused_since   timestamptz,
    pause_reason   text,
    gate           jsonb,
    reason         text NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    updated_by     text NOT NULL,
    -- When max_live last changed: the ramp gate counts the attempts ended since.
    cap_changed_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT controls_scope_unique UNIQUE NULLS NOT DISTINCT (fleet, domain),
    CONSTRAINT controls_max_live_bounded CHECK (max_live BETWEEN 0 AND 100000),
    CONSTRAINT controls_paused_since CHECK (paused = (paused_since IS NOT NULL)),
    CONSTRAINT controls_pause_reason CHECK (paused OR pause_reason IS NULL),
    CONSTRAINT controls_fleet_bounded CHECK (length(fleet) BETWEEN 1 AND 256),
    CONSTRAINT controls_domain_bounded CHECK (length(domain) BETWEEN 1 AND 256),
    CONSTRAINT controls_gate_shape CHECK (
        gate IS NULL OR (
            jsonb_typeof(gate -> 'max_failed_share') = 'number'
            AND (gate ->> 'max_failed_share')::numeric BETWEEN 0 AND 1
            AND jsonb_typeof(gate -> 'last_attempts') = 'number'
            AND (gate ->> 'last_attempts')::numeric BETWEEN 1 AND 10000))
);
COMMENT ON TABLE controls IS
    'The flow controls of a fleet (domain null) or of one domain of it: a cap on live units, '
    'a pause, a ramp gate (DESIGN §13). Read by every admission in the scope (wl_admit_unit).';

CREATE TABLE control_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    fleet      text NOT NULL,
    domain     text,
    actor      text NOT NULL,
    before     jsonb,
    after      jsonb NOT NULL,
    reason     text NOT NULL,
    forced     boolean NOT NULL DEFAULT false,
    -- The ramp gate's figures when a raise was gated (forced or not).
    gate_figures jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE control_events IS
    'Every change of a control, append-only: who, the scope, its fields before and after, why.';
CREATE TRIGGER control_events_append_only BEFORE UPDATE OR DELETE ON control_events
    FOR EACH ROW EXECUTE FUNCTION wl_refuse_rewrite('control_events_append_only');
CREATE TRIGGER control_events_append_only_truncate BEFORE TRUNCATE ON control_events
    FOR EACH STATEMENT EXECUTE FUNCTION wl_refuse_rewrite('control_events_append_only');

-- The keys held now, one row per key: the primary key is the rule "one holder per key".
-- No foreign key to work_units: units are never deleted (units_never_deleted), and a key
-- inserted on every claim of a unit with keys need not look the unit up again.
CREATE TABLE held_keys (
    key     text PRIMARY KEY,
    unit_id uuid NOT NULL
);
-- Only the trigger changes it row by row; emptying it at once would free every key.
CREATE TRIGGER held_keys_never_truncated BEFORE TRUNCATE ON held_keys
    FOR EACH STATEMENT EXECUTE FUNCTION wl_refuse_rewrite('held_keys_kept_by_trigger');
COMMENT ON TABLE held_keys IS
    'The exclusion keys of the units held now (claimed, in_progress, blocked), kept by the '
    'trigger wl_hold_keys; the key is the primary key, so no key has two holders.';

-- Admission to a scope: paused refuses it, a cap refuses the one past max_live. A stale
-- reclaim (a new holder replacing a lapsed one) changes no count: only a pause refuses it.
-- Unblocking (blocked -> in_progress) is held work going on and is not checked.
CREATE FUNCTION wl_admit_unit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c controls;
    live bigint;
    admission boolean := TG_OP = 'INSERT'
                         OR OLD.state NOT IN ('claimed', 'in_progress', 'blocked');
BEGIN
    FOR c IN
        SELECT * FROM controls
        WHERE fleet = NEW.fleet AND (domain IS NULL OR domain = NEW.domain)
        ORDER BY domain NULLS FIRST
        FOR NO KEY UPDATE
    LOOP
        IF c.paused THEN
            RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'scope_paused',
                MESSAGE = format('fleet %s%s is paused (%s): no new claims in it',
                                 c.fleet, coalesce(' domain ' || c.domain, ''),
                                 coalesce(c.pause_reason, 'no reason given')),
                HINT = 'do not retry: an operator resumes the scope with POST /controls';
        END IF;
        IF admission AND c.max_live IS NOT NULL THEN
            -- A new snapshot: every admission that held this row before us is counted.
            SELECT count(*) INTO live FROM work_units AS u
            WHERE u.state IN ('claimed', 'in_progress') AND u.fleet = c.fleet
              AND (c.domain IS NULL OR u.domain = c.domain);
            IF live + 1 > c.max_live THEN
                RAISE EXCEPTION USING ERRCODE = 'check_violation',
                    CONSTRAINT = 'scope_cap_reached',
                    MESSAGE = format('fleet %s%s has %s live units, its cap is %s',
                                     c.fleet, coalesce(' domain ' || c.domain, ''),
                                     live, c.max_live),
                    HINT = 'claim a unit of another scope, or wait for a live unit to end';
            END IF;
        END IF;
    END LOOP;
    RETURN NEW;
END $$;

CREATE TRIGGER work_units_admit_claim
    BEFORE UPDATE OF state, claimed_by ON work_units
    FOR EACH ROW
    WHEN (NEW.state IN ('claimed', 'in_progress')
          AND (OLD.state NOT IN ('claimed', 'in_progress', 'blocked')
               OR OLD.claimed_by IS DISTINCT FROM NEW.claimed_by))
    EXECUTE FUNCTION wl_admit_unit();
CREATE TRIGGER work_units_admit_inserted
    BEFORE INSERT ON work_units
    FOR EACH ROW WHEN (NEW.state IN ('claimed', 'in_progress'))
    EXECUTE FUNCTION wl_admit_unit();

-- The keys of a unit follow its holding: taken (in sorted order) when it becomes held,
-- given back when it stops being held. A key held by another unit refuses the write.
CREATE FUNCTION wl_hold_keys() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    k text;
    holder uuid;
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.exclusive IS NOT NULL
       AND OLD.state IN ('claimed', 'in_progress', 'blocked') THEN
        DELETE FROM held_keys WHERE key = ANY (OLD.exclusive) AND unit_id = OLD.id;
        IF NEW.state NOT IN ('claimed', 'in_progress', 'blocked') THEN
            -- Units that wanted these keys may be claimable now.
            PERFORM pg_notify('wl_claimable', NEW.domain);
        END IF;
    END IF;
    IF NEW.exclusive IS NOT NULL AND NEW.state IN ('claimed', 'in_progress', 'blocked') THEN
        FOR k IN SELECT DISTINCT x COLLATE "C" FROM unnest(NEW.exclusive) AS x ORDER BY 1 LOOP
            INSERT INTO held_keys (key, unit_id) VALUES (k, NEW.id) ON CONFLICT (key) DO NOTHING;
            IF NOT FOUND THEN
                SELECT h.unit_id INTO holder FROM held_keys AS h WHERE h.key = k;
                RAISE EXCEPTION USING ERRCODE = 'unique_violation',
                    CONSTRAINT = 'exclusive_key_held',
                    MESSAGE = format('exclusion key %L is held by unit %s', k, holder),
                    HINT = 'take another unit: this one waits until that unit is no longer held';
            END IF;
        END LOOP;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER work_units_hold_keys
    AFTER UPDATE OF state, exclusive ON work_units
    FOR EACH ROW
    WHEN ((OLD.exclusive IS NOT NULL OR NEW.exclusive IS NOT NULL)
          AND ((OLD.state IN ('claimed', 'in_progress', 'blocked'))
                   IS DISTINCT FROM (NEW.state IN ('claimed', 'in_progress', 'blocked'))
               OR OLD.exclusive IS DISTINCT FROM NEW.exclusive))
    EXECUTE FUNCTION wl_hold_keys();
CREATE TRIGGER work_units_hold_keys_inserted
    AFTER INSERT ON work_units
    FOR EACH ROW
    WHEN (NEW.exclusive IS NOT NULL AND NEW.state IN ('claimed', 'in_progress', 'blocked'))
    EXECUTE FUNCTION wl_hold_keys();

-- A unit leaving the live states of a capped scope frees a slot: long-polls wake. Only
-- scopes with a cap notify (a notification serializes commits briefly).
CREATE FUNCTION wl_notify_slot_freed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM controls
               WHERE fleet = NEW.fleet AND (domain IS NULL OR domain = NEW.domain)
                 AND max_live IS NOT NULL) THEN
        PERFORM pg_notify('wl_claimable', NEW.domain);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER work_units_notify_slot_freed
    AFTER UPDATE OF state ON work_units
    FOR EACH ROW
    WHEN (OLD.state IN ('claimed', 'in_progress')
          AND NEW.state NOT IN ('claimed', 'in_progress'))
    EXECUTE FUNCTION wl_notify_slot_freed();

-- Raising a cap, lifting it or resuming wakes long-polls: a domain's waiters, or all of
-- them ('*') for a fleet-wide change.
CREATE FUNCTION wl_notify_controls() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('wl_claimable', coalesce(NEW.domain, '*'));
    RETURN NULL;
END $$;
CREATE TRIGGER controls_notify_opened
    AFTER UPDATE ON controls
    FOR EACH ROW
    WHEN ((OLD.paused AND NOT NEW.paused)
          OR (NEW.max_live IS NULL AND OLD.max_live IS NOT NULL)
          OR NEW.max_live > OLD.max_live)
    EXECUTE FUNCTION wl_notify_controls();

-- Which scopes over a unit of this fleet and domain refuse an admission now, from the
-- caller's snapshot: paused, or live at (or above) the cap. Inlined where it is called in
-- FROM, as wl_spent_budgets (0020). The count reads the live units' partial index.
CREATE FUNCTION wl_closed_controls(fleet text, domain text) RETURNS SETOF controls
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT c.* FROM controls AS c
    WHERE c.fleet = wl_closed_controls.fleet
      AND (c.domain IS NULL OR c.domain = wl_closed_controls.domain)
      AND (c.paused OR c.max_live <= (
          SELECT count(*) FROM work_units AS u
          WHERE u.state IN ('claimed', 'in_progress') AND u.fleet = c.fleet
            AND (c.domain IS NULL OR u.domain = c.domain)))
$$;

-- A unit's keys one of which another unit holds now (from the caller's snapshot).
CREATE FUNCTION wl_held_keys_of(keys text[]) RETURNS SETOF held_keys
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT h.* FROM held_keys AS h WHERE h.key = ANY (keys)
$$;

-- Why each ready unit held back by a control is not claimed (DESIGN §13): paused and
-- capped scopes, and held keys, one row per reason. Budgets are in v_budget.
CREATE VIEW v_held_back WITH (security_barrier) AS
WITH live AS (
    SELECT c.fleet, c.domain, count(u.id) AS live
    FROM controls AS c
    LEFT JOIN work_units AS u
        ON u.state IN ('claimed', 'in_progress') AND u.fleet = c.fleet
       AND (c.domain IS NULL OR u.domain = c.domain)
    GROUP BY c.fleet, c.domain
)
SELECT c.fleet, c.domain, 'paused'::text AS kind, NULL::text AS key,
       count(u.id) AS ready_units, c.pause_reason AS reason, c.max_live, l.live
FROM controls AS c
JOIN live AS l ON l.fleet = c.fleet AND l.domain IS NOT DISTINCT FROM c.domain
JOIN work_units AS u ON u.state = 'ready' AND u.fleet = c.fleet
     AND (c.domain IS NULL OR u.domain = c.domain)
WHERE c.paused
GROUP BY c.fleet, c.domain, c.pause_reason, c.max_live, l.live
UNION ALL
SELECT c.fleet, c.domain, 'cap', NULL, count(u.id), c.reason, c.max_live, l.live
FROM controls AS c
JOIN live AS l ON l.fleet = c.fleet AND l.domain IS NOT DISTINCT FROM c.domain
JOIN work_units AS u ON u.state = 'ready' AND u.fleet = c.fleet
     AND (c.domain IS NULL OR u.domain = c.domain)
WHERE c.max_live IS NOT NULL AND l.live >= c.max_live
GROUP BY c.fleet, c.domain, c.reason, c.max_live, l.live
UNION ALL
SELECT u.fleet, u.domain, 'exclusive', h.key, count(DISTINCT u.id), NULL, NULL, NULL
FROM held_keys AS h
JOIN work_units AS u ON u.state = 'ready' AND u.exclusive @> ARRAY[h.key]
GROUP BY u.fleet, u.domain, h.key;
COMMENT ON VIEW v_held_back IS
    'Ready units a claim skips now because of a control, by scope and reason: paused, '
    'cap (live at max_live), exclusive (a key another unit holds).';

-- Each controlled scope with its live and held units now (GET /controls, /metrics).
CREATE VIEW v_controls WITH (security_barrier) AS
SELECT c.fleet, c.domain, c.max_live, n.live, n.held, c.paused, c.paused_since,
       c.pause_reason, c.paused AND n.held = 0 AS drained, c.gate, c.reason, c.updated_at,
       (SELECT count(*) FROM work_units AS u
        WHERE u.state = 'ready' AND u.fleet = c.fleet
          AND (c.domain IS NULL OR u.domain = c.domain)) AS ready
FROM controls AS c
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE u.state IN ('claimed', 'in_progress')) AS live,
           count(*) AS held
    FROM work_units AS u
    WHERE u.state IN ('claimed', 'in_progress', 'blocked') AND u.fleet = c.fleet
      AND (c.domain IS NULL OR u.domain = c.domain)
) AS n;
COMMENT ON VIEW v_controls IS
    'Each controlled scope (DESIGN §13): cap, live and held units, pause, drain, gate, and '
    'its ready units.';

-- The reader role reads the new view: grant-reader from now on, and every role it made.
CREATE OR REPLACE FUNCTION wl_grant_reader(role_name text, password_verifier text)
    RETURNS text[] LANGUAGE plpgsql AS $$
BEGIN
    RETURN wl_grant_reader_0013(role_name, password_verifier)
           || wl_grant_views(role_name, ARRAY['v_costliest_units', 'v_most_attempted_units',
                                             'v_changed_units', 'v_open_questions',
                                             'v_held_back', 'v_controls']);
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
        PERFORM wl_grant_views(reader, ARRAY['v_held_back', 'v_controls']);
    END LOOP;
END $$;
