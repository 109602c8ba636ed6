-- Two things of the flow controls (issue 38): the queue's view shows them, and a gate is
-- kept as the object its check reads (at the end).
--
-- v_queue_depth shows each domain's live units against its cap and which scopes are
-- paused (issue 38, read side), so the one view a dashboard polls answers "why is this
-- queue not moving?" without a second query. The new columns come last: a view may only
-- gain columns at its end.
--
-- - live: claimed + in_progress, the count a cap limits (DESIGN §13, Held and live).
-- - max_live: the lowest cap set on this domain (of any fleet's fleet-and-domain control);
--   null when none. The total row's is null: fleet-wide caps are per fleet, in v_controls.
-- - paused: the paused scopes a row names, as 'fleet/domain' (or 'fleet' for a whole
--   fleet): a domain row lists the pauses set on that domain, the total row every pause.
--   The tallies keep no fleet, so a fleet-wide pause shows on the total row, not on the
--   rows of its domains (v_held_back lists the units each pause holds back).
-- The controls table has a row per controlled scope, a handful: joining it keeps the view
-- on its summaries (≤ 100 ms at 1,000,000 units).
CREATE OR REPLACE VIEW v_queue_depth WITH (security_barrier) AS
WITH depth AS (
    SELECT CASE WHEN grouping(domain) = 1 THEN 'total' ELSE 'domain' END AS scope,
           CASE WHEN grouping(domain) = 1 THEN '(all)' ELSE domain END AS domain,
           coalesce(sum(units) FILTER (WHERE state = 'ready'), 0)::bigint AS ready,
           coalesce(sum(units) FILTER (WHERE state = 'claimed'), 0)::bigint AS claimed,
           coalesce(sum(units) FILTER (WHERE state = 'in_progress'), 0)::bigint AS in_progress,
           coalesce(sum(units) FILTER (WHERE state = 'blocked'), 0)::bigint AS blocked,
           coalesce(sum(units) FILTER (WHERE state = 'verified'), 0)::bigint AS verified,
           coalesce(sum(units) FILTER (WHERE state = 'done'), 0)::bigint AS done,
           coalesce(sum(units) FILTER (WHERE state = 'abandoned'), 0)::bigint AS abandoned,
           coalesce(sum(units) FILTER (WHERE state NOT IN ('done', 'abandoned')), 0)::bigint
               AS open,
           coalesce(sum(units), 0)::bigint AS units,
           coalesce(sum(units) FILTER (WHERE state = 'waiting'), 0)::bigint AS waiting,
           grouping(domain) AS total
    FROM wl_unit_tallies_now
    GROUP BY GROUPING SETS ((domain), ())
    HAVING grouping(domain) = 1 OR sum(units) <> 0
)
SELECT d.scope, d.domain, d.ready, d.claimed, d.in_progress, d.blocked, d.verified, d.done,
       d.abandoned, d.open, d.units, d.waiting,
       d.claimed + d.in_progress AS live,
       (SELECT min(c.max_live) FROM controls AS c
        WHERE d.total = 0 AND c.domain = d.domain) AS max_live,
       coalesce((SELECT array_agg(c.fleet || coalesce('/' || c.domain, '')
                                  ORDER BY c.fleet, c.domain NULLS FIRST)
                 FROM controls AS c
                 WHERE c.paused AND (d.total = 1 OR c.domain = d.domain)),
                '{}') AS paused
FROM depth AS d
ORDER BY d.total, d.domain;
COMMENT ON VIEW v_queue_depth IS
    'How many units are in each state, per domain (scope domain) and over all domains '
    '(scope total, always present). open = not yet done or abandoned; waiting = registered '
    'but held by a prerequisite or by the ledger''s question at the attempt limit. live = '
    'claimed + in_progress, against max_live (the lowest cap set on the domain); paused = '
    'the paused scopes the row names (fleet/domain, or fleet for a whole fleet: on the '
    'total row).';

-- Gates written before this migration were encoded twice (a JSON string holding the
-- object), so controls_gate_shape, which reads the object's fields, checked nothing. The
-- service now sends the object; the rows kept as strings become their objects, and the
-- CHECK holds them from here on. (control_events are append-only and keep their old
-- rows as written: the service reads both forms.)
UPDATE controls SET gate = (gate #>> '{}')::jsonb WHERE jsonb_typeof(gate) = 'string';
-- The check itself let through what is not an object, and an object missing a field (a
-- comparison with null is null, which a CHECK passes). The CASE decides the type first,
-- so a non-number never reaches the cast.
ALTER TABLE controls DROP CONSTRAINT controls_gate_shape;
ALTER TABLE controls ADD CONSTRAINT controls_gate_shape CHECK (
    gate IS NULL OR CASE
        WHEN jsonb_typeof(gate) = 'object'
             AND jsonb_typeof(gate -> 'max_failed_share') = 'number'
             AND jsonb_typeof(gate -> 'last_attempts') = 'number'
        -- Written as one flat AND chain (not BETWEEN): schema.sql reloads to the same
        -- catalog only so (59087f8 on main).
        THEN (gate ->> 'max_failed_share')::numeric >= 0
             AND (gate ->> 'max_failed_share')::numeric <= 1
             AND (gate ->> 'last_attempts')::numeric >= 1
             AND (gate ->> 'last_attempts')::numeric <= 10000
        ELSE false
    END);
