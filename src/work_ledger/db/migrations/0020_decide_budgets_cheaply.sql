-- Budgets decided at a tenth of the cost (issue 29). The claim statements filter each
-- candidate unit on wl_budget_open(fleet, domain), which 0011 wrote as SQL functions
-- calling SQL functions: a scalar function whose body holds a subquery is never inlined,
-- so every candidate row ran three function executions, and a fleet-wide budget summed
-- the 16 spend rows of every domain of the fleet (640 rows for 40 domains). Measured over
-- 60,000 rows with the benchmark's 1,000 budgets: 69 us per row.
--
-- Now:
-- - fleet_spend keeps each fleet's spend in its own 16 shard rows, beside scope_spend's
--   per-domain rows, by the same trigger (one more upsert per cost record);
-- - wl_spent_budgets(fleet, domain) is a set-returning SQL function, which the planner
--   inlines where a query calls it (FROM of a subquery): the budgets over that scope whose
--   spend has reached their cap, each found by its unique index and summing 16 rows. The
--   claim statements ask NOT EXISTS (SELECT FROM wl_spent_budgets(fleet, domain)): 6.4 us
--   per row on the same data, planned with the statement (and cached with it).
-- - wl_budget_open keeps its name and meaning on top of it, for any caller (an older
--   `serve` during a rolling upgrade runs its own claim SQL, which calls it).

-- No cost may be recorded between the copy below and the new trigger (an older `serve`
-- may still be writing): a unit's cost changes only under a row lock of work_units, and
-- SHARE waits for those writers and holds off new ones until this migration commits.
LOCK TABLE work_units IN SHARE MODE;

CREATE TABLE fleet_spend (
    fleet text NOT NULL,
    shard smallint NOT NULL,
    cents bigint NOT NULL DEFAULT 0,
    CONSTRAINT fleet_spend_key PRIMARY KEY (fleet, shard),
    CONSTRAINT fleet_spend_not_negative CHECK (cents >= 0)
);
COMMENT ON TABLE fleet_spend IS
    'What each fleet has spent, over all its domains, in 16 shard rows (as scope_spend per '
    'domain): kept by the trigger on the unit''s cost, read by the fleet-wide budgets.';

INSERT INTO fleet_spend (fleet, shard, cents)
SELECT fleet, shard, sum(cents) FROM scope_spend GROUP BY fleet, shard;

CREATE OR REPLACE FUNCTION wl_add_scope_spend() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO scope_spend AS s (fleet, domain, shard, cents)
    VALUES (NEW.fleet, NEW.domain, pg_backend_pid() % 16, NEW.cost_cents - OLD.cost_cents)
    ON CONFLICT (fleet, domain, shard) DO UPDATE SET cents = s.cents + EXCLUDED.cents;
    INSERT INTO fleet_spend AS f (fleet, shard, cents)
    VALUES (NEW.fleet, pg_backend_pid() % 16, NEW.cost_cents - OLD.cost_cents)
    ON CONFLICT (fleet, shard) DO UPDATE SET cents = f.cents + EXCLUDED.cents;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION wl_scope_spent(fleet text, domain text) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE WHEN wl_scope_spent.domain IS NULL
        THEN (SELECT coalesce(sum(f.cents), 0)::bigint FROM fleet_spend AS f
              WHERE f.fleet = wl_scope_spent.fleet)
        ELSE (SELECT coalesce(sum(s.cents), 0)::bigint FROM scope_spend AS s
              WHERE s.fleet = wl_scope_spent.fleet AND s.domain = wl_scope_spent.domain) END;

-- The budgets over a unit of this fleet and domain that are spent (spent >= cap): its
-- fleet's, then its fleet-and-domain one. Two lookups by the unique index (an OR of the
-- two would read every budget of the fleet), each summing its scope's 16 shard rows.
-- Inlined by the planner where it is called in FROM (no SECURITY DEFINER, one SELECT).
CREATE FUNCTION wl_spent_budgets(fleet text, domain text) RETURNS SETOF budgets
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT b.* FROM budgets AS b
    WHERE b.fleet = wl_spent_budgets.fleet AND b.domain IS NULL
      AND b.cap_cents <= (SELECT coalesce(sum(f.cents), 0)::bigint FROM fleet_spend AS f
                          WHERE f.fleet = b.fleet)
    UNION ALL
    SELECT b.* FROM budgets AS b
    WHERE b.fleet = wl_spent_budgets.fleet AND b.domain = wl_spent_budgets.domain
      AND b.cap_cents <= (SELECT coalesce(sum(s.cents), 0)::bigint FROM scope_spend AS s
                          WHERE s.fleet = b.fleet AND s.domain = b.domain)
$$;

CREATE OR REPLACE FUNCTION wl_budget_open(fleet text, domain text) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN NOT EXISTS (SELECT FROM wl_spent_budgets(fleet, domain));

CREATE OR REPLACE VIEW v_budget WITH (security_barrier) AS
SELECT b.fleet, b.domain, b.cap_cents, s.spent AS spent_cents,
       greatest(b.cap_cents - s.spent, 0) AS remaining_cents,
       s.spent >= b.cap_cents AS exhausted,
       CASE WHEN b.cap_cents = 0 THEN NULL
            ELSE round(100.0 * s.spent / b.cap_cents, 1) END AS percent_used,
       b.updated_at
FROM budgets AS b
-- The sums written out, not wl_scope_spent(): a function reads with the reader's own
-- privileges, a view's query with its owner's, and the reader sees views only.
CROSS JOIN LATERAL (
    SELECT CASE WHEN b.domain IS NULL
        THEN (SELECT coalesce(sum(f.cents), 0) FROM fleet_spend AS f WHERE f.fleet = b.fleet)
        ELSE (SELECT coalesce(sum(p.cents), 0) FROM scope_spend AS p
              WHERE p.fleet = b.fleet AND p.domain = b.domain) END::bigint AS spent
) AS s
ORDER BY b.fleet, b.domain NULLS FIRST;
