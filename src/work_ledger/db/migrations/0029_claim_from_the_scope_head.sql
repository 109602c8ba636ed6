-- Pull-next past a closed scope reads its scopes, not the closed units, whichever plan
-- the planner picks (issue 38).
--
-- 0028's wl_next_open_unit locked the oldest free unit of an open scope with a scan the
-- planner was free to run on either ready index. When the scope's units carry exclusion
-- keys, it guesses that the key test passes half of them, and for a big open scope an
-- ordered walk of the whole ready queue (work_units_ready_idx) then looks as cheap as the
-- scope's own index. A custom plan (a connection's first five claims, or each claim if
-- PL/pgSQL never settles on a generic plan) took that walk through every closed unit
-- ahead: 2,019 index entries for a claim behind 2,000 paused units
-- (tests/db/test_claim_past_closed.py), 1,024 behind bench's 1,000. (The generic plan
-- that bench's long runs settle on took the scope's index: 24.)
--
-- Now each scope's oldest ready unit (its head) comes with the scope, and the locked scan
-- starts there: whichever index runs it, it starts at the scope's head. The head is read
-- in the probe of work_units_ready_scope_idx (domain, fleet, created_at, id) that finds
-- the scope, since a scope's first entry in that index is its head: one probe per scope,
-- not 0028's two. A unit of the scope made ready again after the heads were read, older
-- than its head, waits for the next claim. The contract is 0028's, unchanged.
CREATE OR REPLACE FUNCTION wl_next_open_unit(want_domain text) RETURNS uuid
    LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    scopes refcursor;
    scope record;
    picked uuid;
BEGIN
    -- The scopes with ready units, each with its oldest ready unit, found by one probe of
    -- work_units_ready_scope_idx past the scope before (a skip scan), read without a lock.
    -- Two statements, not one with `want_domain IS NULL OR`: PL/pgSQL may keep a generic
    -- plan, where that test cannot bound the index scan to the domain asked.
    IF want_domain IS NULL THEN
        OPEN scopes FOR
            WITH RECURSIVE heads (domain, fleet, created_at, id) AS (
                (SELECT u.domain, u.fleet, u.created_at, u.id FROM work_units AS u
                 WHERE u.state = 'ready'
                 ORDER BY u.domain, u.fleet, u.created_at, u.id LIMIT 1)
                UNION ALL
                SELECT n.domain, n.fleet, n.created_at, n.id
                FROM heads AS h
                CROSS JOIN LATERAL (
                    SELECT u.domain, u.fleet, u.created_at, u.id FROM work_units AS u
                    WHERE u.state = 'ready' AND (u.domain, u.fleet) > (h.domain, h.fleet)
                    ORDER BY u.domain, u.fleet, u.created_at, u.id LIMIT 1
                ) AS n
            )
            SELECT h.domain, h.fleet, h.created_at, h.id
            FROM heads AS h
            WHERE NOT EXISTS (SELECT FROM wl_spent_budgets(h.fleet, h.domain))
              AND NOT EXISTS (SELECT FROM wl_closed_controls(h.fleet, h.domain))
            ORDER BY h.created_at, h.id;
    ELSE
        OPEN scopes FOR
            WITH RECURSIVE heads (fleet, created_at, id) AS (
                (SELECT u.fleet, u.created_at, u.id FROM work_units AS u
                 WHERE u.state = 'ready' AND u.domain = want_domain
                 ORDER BY u.fleet, u.created_at, u.id LIMIT 1)
                UNION ALL
                SELECT n.fleet, n.created_at, n.id
                FROM heads AS h
                CROSS JOIN LATERAL (
                    SELECT u.fleet, u.created_at, u.id FROM work_units AS u
                    WHERE u.state = 'ready' AND u.domain = want_domain AND u.fleet > h.fleet
                    ORDER BY u.fleet, u.created_at, u.id LIMIT 1
                ) AS n
            )
            SELECT want_domain AS domain, h.fleet, h.created_at, h.id
            FROM heads AS h
            WHERE NOT EXISTS (SELECT FROM wl_spent_budgets(h.fleet, want_domain))
              AND NOT EXISTS (SELECT FROM wl_closed_controls(h.fleet, want_domain))
            ORDER BY h.created_at, h.id;
    END IF;
    -- In the open scopes, oldest head first: the oldest unit from the head on whose keys
    -- are free, locked.
    LOOP
        FETCH scopes INTO scope;
        EXIT WHEN NOT FOUND;
        SELECT u.id INTO picked FROM work_units AS u
        WHERE u.state = 'ready' AND u.domain = scope.domain AND u.fleet = scope.fleet
          AND (u.created_at, u.id) >= (scope.created_at, scope.id)
          AND (u.exclusive IS NULL OR NOT EXISTS (SELECT FROM wl_held_keys_of(u.exclusive)))
        ORDER BY u.created_at, u.id
        LIMIT 1
        FOR NO KEY UPDATE SKIP LOCKED;
        EXIT WHEN picked IS NOT NULL;
    END LOOP;
    CLOSE scopes;
    RETURN picked;
END $$;
