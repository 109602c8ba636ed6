-- Pull-next skips a closed scope without walking its units (DESIGN §13: "no head-of-line
-- blocking"; issue 38's speed goal).
--
-- 0025's wl_next_open_unit walked the ready queue in order and asked each unit whether
-- its scope was open, so a claim behind a paused, capped or spent scope read every ready
-- unit of that scope first: with 1,000 paused units ahead of the backlog, pull-next ran at
-- 0.26-0.41x the claim without them (bench `ledger_sql_claim_controls`), and an agent past
-- a ramp cap read the capped fleet's whole backlog on every wake-up to find nothing.
--
-- Now it asks each scope (fleet and domain) once. The scopes that have ready units are
-- found by a skip scan of a ready index led by (domain, fleet): one index probe per scope,
-- however many units each holds. The open ones are taken in the order of their oldest
-- ready unit, and in the first, the oldest unit whose keys are free is locked FOR NO KEY
-- UPDATE SKIP LOCKED (one lock: the heads of the other scopes are read, not locked). If
-- every unit of that scope is taken or wants a held key, the next scope is tried. A claim
-- past a closed scope costs what the number of scopes with ready work costs, not what the
-- closed scopes hold. The order within the open scopes is the queue's, as before; across
-- scopes it is their heads' (a scope whose head another claim has locked comes before a
-- younger scope, and gives its next unit).
CREATE INDEX work_units_ready_scope_idx ON work_units (domain, fleet, created_at, id)
    WHERE state = 'ready';

-- The oldest ready unit of the domain asked (any when null) whose scope is open and whose
-- keys are free, locked FOR NO KEY UPDATE SKIP LOCKED (held until the claim commits); null
-- when there is none. VOLATILE: it locks rows, and each call reads the ledger anew.
CREATE OR REPLACE FUNCTION wl_next_open_unit(want_domain text) RETURNS uuid
    LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    scopes refcursor;
    scope record;
    picked uuid;
BEGIN
    -- The scopes with ready units, each found by one probe of work_units_ready_scope_idx
    -- past the one before (a skip scan), then their oldest ready unit, read without a lock.
    -- Two statements, not one with `want_domain IS NULL OR`: PL/pgSQL may keep a generic
    -- plan, where that test cannot bound the index scan to the domain asked.
    IF want_domain IS NULL THEN
        OPEN scopes FOR
            WITH RECURSIVE found_scopes (domain, fleet) AS (
                (SELECT u.domain, u.fleet FROM work_units AS u WHERE u.state = 'ready'
                 ORDER BY u.domain, u.fleet LIMIT 1)
                UNION ALL
                SELECT n.domain, n.fleet
                FROM found_scopes AS s
                CROSS JOIN LATERAL (
                    SELECT u.domain, u.fleet FROM work_units AS u
                    WHERE u.state = 'ready' AND (u.domain, u.fleet) > (s.domain, s.fleet)
                    ORDER BY u.domain, u.fleet LIMIT 1
                ) AS n
            )
            SELECT s.domain, s.fleet
            FROM found_scopes AS s
            CROSS JOIN LATERAL (
                SELECT u.created_at, u.id FROM work_units AS u
                WHERE u.state = 'ready' AND u.domain = s.domain AND u.fleet = s.fleet
                ORDER BY u.created_at, u.id LIMIT 1
            ) AS head
            WHERE NOT EXISTS (SELECT FROM wl_spent_budgets(s.fleet, s.domain))
              AND NOT EXISTS (SELECT FROM wl_closed_controls(s.fleet, s.domain))
            ORDER BY head.created_at, head.id;
    ELSE
        OPEN scopes FOR
            WITH RECURSIVE found_fleets (fleet) AS (
                (SELECT u.fleet FROM work_units AS u
                 WHERE u.state = 'ready' AND u.domain = want_domain
                 ORDER BY u.fleet LIMIT 1)
                UNION ALL
                SELECT n.fleet
                FROM found_fleets AS s
                CROSS JOIN LATERAL (
                    SELECT u.fleet FROM work_units AS u
                    WHERE u.state = 'ready' AND u.domain = want_domain AND u.fleet > s.fleet
                    ORDER BY u.fleet LIMIT 1
                ) AS n
            )
            SELECT want_domain AS domain, s.fleet
            FROM found_fleets AS s
            CROSS JOIN LATERAL (
                SELECT u.created_at, u.id FROM work_units AS u
                WHERE u.state = 'ready' AND u.domain = want_domain AND u.fleet = s.fleet
                ORDER BY u.created_at, u.id LIMIT 1
            ) AS head
            WHERE NOT EXISTS (SELECT FROM wl_spent_budgets(s.fleet, want_domain))
              AND NOT EXISTS (SELECT FROM wl_closed_controls(s.fleet, want_domain))
            ORDER BY head.created_at, head.id;
    END IF;
    -- In the open scopes, oldest head first: the oldest unit whose keys are free, locked.
    LOOP
        FETCH scopes INTO scope;
        EXIT WHEN NOT FOUND;
        SELECT u.id INTO picked FROM work_units AS u
        WHERE u.state = 'ready' AND u.domain = scope.domain AND u.fleet = scope.fleet
          AND (u.exclusive IS NULL OR NOT EXISTS (SELECT FROM wl_held_keys_of(u.exclusive)))
        ORDER BY u.created_at, u.id
        LIMIT 1
        FOR NO KEY UPDATE SKIP LOCKED;
        EXIT WHEN picked IS NOT NULL;
    END LOOP;
    CLOSE scopes;
    RETURN picked;
END $$;
