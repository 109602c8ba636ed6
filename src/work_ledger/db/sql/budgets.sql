-- Budgets (DESIGN §12): a cap on what a fleet, or one domain of it, may spend. The claim
-- checks them itself (wl_budget_open, migration 0011); these statements set and read them.

-- name: upsert_budget
-- $1 fleet, $2 domain or null (the whole fleet), $3 cap cents, $4 acting principal. The
-- cap is kept in budget_caps too (what audit checks claims against), and the scope's
-- domains with ready units are notified: a raised cap makes them claimable again.
WITH upserted AS (
    INSERT INTO budgets AS b (fleet, domain, cap_cents, updated_by)
    VALUES ($1, $2, $3, $4)
    ON CONFLICT ON CONSTRAINT budget_scope_unique
    DO UPDATE SET cap_cents = EXCLUDED.cap_cents, updated_at = now(),
                  updated_by = EXCLUDED.updated_by
    RETURNING b.fleet, b.domain, b.cap_cents
), history AS (
    INSERT INTO budget_caps (fleet, domain, cap_cents, set_by)
    SELECT fleet, domain, cap_cents, $4 FROM upserted
), woken AS (
    SELECT count(pg_notify('wl_claimable', d.domain)) AS n
    FROM (SELECT DISTINCT u.domain FROM work_units AS u
          WHERE u.fleet = $1 AND ($2::text IS NULL OR u.domain = $2) AND u.state = 'ready') AS d
)
SELECT b.fleet, b.domain, b.cap_cents, s.spent AS spent_cents,
       greatest(b.cap_cents - s.spent, 0) AS remaining_cents
FROM upserted AS b
CROSS JOIN LATERAL (SELECT wl_scope_spent(b.fleet, b.domain) AS spent) AS s
CROSS JOIN woken;

-- name: list_budgets
SELECT b.fleet, b.domain, b.cap_cents, s.spent AS spent_cents,
       greatest(b.cap_cents - s.spent, 0) AS remaining_cents
FROM budgets AS b
CROSS JOIN LATERAL (SELECT wl_scope_spent(b.fleet, b.domain) AS spent) AS s
ORDER BY b.fleet, b.domain NULLS FIRST;

-- name: exhausted_budget_of
-- $1 fleet, $2 domain: the spent budget that stops a claim in this scope, if any (the
-- fleet-wide one first).
SELECT b.fleet, b.domain, b.cap_cents, s.spent AS spent_cents
FROM budgets AS b
CROSS JOIN LATERAL (SELECT wl_scope_spent(b.fleet, b.domain) AS spent) AS s
WHERE b.fleet = $1 AND (b.domain IS NULL OR b.domain = $2) AND s.spent >= b.cap_cents
ORDER BY b.domain NULLS FIRST
LIMIT 1;
