-- v_budget as the read-only role sees it: the spend of a scope summed from scope_spend in
-- the view itself (a view reads its tables with its owner's rights), rather than through
-- wl_scope_spent(), a function that runs with the caller's rights and so refused the
-- reader the table under it. The same rows, from the 16 shard rows per scope.
CREATE OR REPLACE VIEW v_budget WITH (security_barrier) AS
SELECT b.fleet, b.domain, b.cap_cents, s.spent AS spent_cents,
       greatest(b.cap_cents - s.spent, 0) AS remaining_cents,
       s.spent >= b.cap_cents AS exhausted,
       CASE WHEN b.cap_cents = 0 THEN NULL
            ELSE round(100.0 * s.spent / b.cap_cents, 1) END AS percent_used,
       b.updated_at
FROM budgets AS b
CROSS JOIN LATERAL (
    SELECT coalesce(sum(p.cents), 0)::bigint AS spent FROM scope_spend AS p
    WHERE p.fleet = b.fleet AND (b.domain IS NULL OR p.domain = b.domain)
) AS s
ORDER BY b.fleet, b.domain NULLS FIRST;
