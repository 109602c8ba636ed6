-- A connection caches its claim plan after a few runs, with the statistics of that moment,
-- and keeps it. Two indexes that serve the same lookup equally well on a fresh backlog can
-- then be swapped for the one that degrades as the ledger fills:
--   * the unit listing's (created_at, id) ties with work_units_ready_idx while nearly every
--     unit is ready; with it, each claim later walks past every claimed and finished unit.
--     Keyed on created_at alone, it needs a sort to give (created_at, id) order, so pull-next
--     always takes the ready index; listings sort the rare equal timestamps.
--   * the lease index, partial on the same states as one_live_claim_per_agent, ties with it
--     for "what does this agent hold" while few units are held; with it, each claim later
--     filters every live lease by holder. Partial on the lease itself (set exactly in those
--     states, by unit_lease_iff_leased), it only serves lease-expiry scans.
DROP INDEX work_units_keyset_idx;
CREATE INDEX work_units_created_idx ON work_units (created_at);

DROP INDEX work_units_leased_idx;
CREATE INDEX work_units_leased_idx ON work_units (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
