-- 0013's index of silent leases had the predicate of the claim's own lease scan (state
-- claimed or in_progress), so the planner could take it for the stale-reclaim probe and
-- read every leased unit instead of the expired leases alone (tests/db/test_schema.py).
-- With `last_heartbeat_at IS NOT NULL` in its predicate only a query that bounds the last
-- heartbeat (the stall list and its counts: `last_heartbeat_at < ...` implies it) can use it.
DROP INDEX work_units_silent_idx;
CREATE INDEX work_units_silent_idx ON work_units (last_heartbeat_at, id)
    INCLUDE (domain) WHERE state IN ('claimed', 'in_progress') AND last_heartbeat_at IS NOT NULL;
