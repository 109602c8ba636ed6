-- Pull-next's second scan, past a head unit whose scope is spent, paused, capped or whose
-- key is held, as a function of its own.
--
-- Inlined in claim_next_unit (0020, 0022), that scan made the statement's cached generic
-- plan look dearer than a plan made for each call: PostgreSQL costs both of its branches
-- (with and without a domain) with every per-row check of budgets, controls and keys,
-- although at most one runs and only when the head is closed. So each claim was planned
-- anew, about a millisecond of the server's CPU: under 16 claimers the statement ran at
-- 0.4x the hand-written claim (bench, `ledger_sql_claim`). Called through this function,
-- the outer plan costs one call, its generic plan is kept (tests/db/test_claim_plans.py),
-- and this scan is planned by PL/pgSQL only on the rare claim that needs it.
--
-- The oldest ready unit of the domain asked (any when null) whose scope is open and whose
-- keys are free, locked FOR NO KEY UPDATE SKIP LOCKED (held until the claim commits); null
-- when there is none. VOLATILE: it locks rows, and each call reads the ledger anew.
CREATE FUNCTION wl_next_open_unit(want_domain text) RETURNS uuid
    LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    found uuid;
BEGIN
    IF want_domain IS NULL THEN
        SELECT u.id INTO found FROM work_units AS u
        WHERE u.state = 'ready'
          AND NOT EXISTS (SELECT FROM wl_spent_budgets(u.fleet, u.domain))
          AND NOT EXISTS (SELECT FROM wl_closed_controls(u.fleet, u.domain))
          AND (u.exclusive IS NULL OR NOT EXISTS (SELECT FROM wl_held_keys_of(u.exclusive)))
        ORDER BY u.created_at, u.id
        LIMIT 1
        FOR NO KEY UPDATE SKIP LOCKED;
    ELSE
        SELECT u.id INTO found FROM work_units AS u
        WHERE u.domain = want_domain AND u.state = 'ready'
          AND NOT EXISTS (SELECT FROM wl_spent_budgets(u.fleet, u.domain))
          AND NOT EXISTS (SELECT FROM wl_closed_controls(u.fleet, u.domain))
          AND (u.exclusive IS NULL OR NOT EXISTS (SELECT FROM wl_held_keys_of(u.exclusive)))
        ORDER BY u.domain, u.created_at, u.id
        LIMIT 1
        FOR NO KEY UPDATE SKIP LOCKED;
    END IF;
    RETURN found;
END $$;
