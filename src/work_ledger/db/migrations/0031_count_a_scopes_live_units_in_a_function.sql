-- A claim's plan keeps its estimated cost as the fleet grows (issue 43).
--
-- wl_closed_controls (0022) counted a capped scope's live units in a subquery, inlined into
-- every claim statement with it. Its estimate grows with the live units the statistics
-- count (the count reads the partial index of all live claims), so the claim's estimated
-- cost went from 99 to 1,302 once 5,000 units were live and ANALYZE had run: though that
-- subquery runs only for a capped scope, and does not run at all without one. PostgreSQL
-- weighs a cached generic plan against the average cost of the custom plans made since the
-- statement was prepared, cheap ones from before included, so after such a rise each
-- connection planned pull-next anew for hundreds of claims in a row, about 1.5 ms each:
-- 871 plans in 6,659 claims in a 15 s window of bench's `http_claim`, 1.3 s of the
-- server's time (tests/db/test_claim_plans.py shows it on one connection).
--
-- The count is now a function of its own, which the planner does not inline (its body
-- reads a table): a claim's plan costs it as a call, whatever the statistics say, and it
-- runs only for a scope whose cap is set. What it counts, and from which snapshot, is
-- unchanged; the admission trigger still decides exactly (0022).
CREATE FUNCTION wl_live_units(fleet text, domain text) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT count(*) FROM work_units AS u
    WHERE u.state IN ('claimed', 'in_progress') AND u.fleet = wl_live_units.fleet
      AND (wl_live_units.domain IS NULL OR u.domain = wl_live_units.domain)
$$;

CREATE OR REPLACE FUNCTION wl_closed_controls(fleet text, domain text) RETURNS SETOF controls
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT c.* FROM controls AS c
    WHERE c.fleet = wl_closed_controls.fleet
      AND (c.domain IS NULL OR c.domain = wl_closed_controls.domain)
      AND (c.paused
           OR (c.max_live IS NOT NULL AND c.max_live <= wl_live_units(c.fleet, c.domain)))
$$;
