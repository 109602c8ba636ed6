-- A connection caches its claim plan after a few runs, with the statistics of that moment,
-- and keeps it. An index that serves the same lookup about as well on a fresh backlog can
-- then be taken instead of the one that stays cheap as the ledger fills:
--   * any plain index leading with created_at (the unit listing's) competes with
--     work_units_ready_idx while nearly every unit is ready; with it, each claim later
--     walks past every claimed and finished unit. The listing's index is therefore keyed
--     on the UTC wall-clock time, an expression pull-next never orders by: the same order,
--     and only the ready indexes can give the claim its (created_at, id) order.
--   * the lease index, partial on the same states as one_live_claim_per_agent, competes
--     with it for "what does this agent hold"; with it, each claim later filters every live
--     lease by holder. Partial on the lease itself (set exactly in those states, by
--     unit_lease_iff_leased), it only serves lease-expiry scans, which no longer name the
--     states either.
DROP INDEX work_units_keyset_idx;
CREATE INDEX work_units_listing_idx ON work_units ((created_at AT TIME ZONE 'UTC'), id);

DROP INDEX work_units_leased_idx;
CREATE INDEX work_units_leased_idx ON work_units (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
