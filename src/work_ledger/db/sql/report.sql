-- The read side: what `work-ledger report`, /metrics and `grant-reader` ask of the views
-- (migration 0004). Every read goes through a view, never a table, so that it sees what
-- the read-only role and Grafana see.

-- name: read_store_settings
-- $1 stall seconds (WL_STALL_SECONDS). Written at start; unchanged values write nothing.
INSERT INTO wl_settings (singleton, stall_seconds) VALUES (true, $1)
ON CONFLICT (singleton) DO UPDATE
SET stall_seconds = excluded.stall_seconds, updated_at = now()
WHERE wl_settings.stall_seconds IS DISTINCT FROM excluded.stall_seconds;

-- name: read_queue_depth
-- $1 domain or null (every domain and the total row).
SELECT scope, domain, ready, claimed, in_progress, blocked, verified, done, abandoned, open, units,
       live, max_live, paused
FROM v_queue_depth
WHERE $1::text IS NULL OR (scope = 'domain' AND domain = $1)
ORDER BY scope = 'total', domain;

-- name: read_stall_list
-- $1 domain or null, $2 how many (null: all). Longest silent first: the view's own order
-- (oldest heartbeat first), which its index gives without a sort.
SELECT unit_id, external_ref, fleet, domain, state, holder, attempt_id, attempt_no,
       last_heartbeat_at, lease_expires_at, lease_expired, stalled_seconds,
       stall_threshold_seconds
FROM v_stall_list
WHERE $1::text IS NULL OR domain = $1
ORDER BY last_heartbeat_at, unit_id
LIMIT $2;

-- name: read_stall_count
-- $1 domain or null: how many units the stall list holds.
SELECT coalesce(sum(stalled_units), 0)::bigint AS stalled
FROM v_stall_counts WHERE $1::text IS NULL OR domain = $1;

-- name: read_cost_summary
-- $1 domain or null: the domain rows and the total row of v_cost_per_unit.
SELECT scope, domain, units, attempts, cost_cents, merged_units, merged_cost_cents,
       cost_per_unit_cents, cost_per_merged_unit_cents, spend_per_merged_unit_cents
FROM v_cost_per_unit
WHERE scope <> 'unit' AND ($1::text IS NULL OR (scope = 'domain' AND domain = $1))
ORDER BY scope = 'total', domain;

-- name: read_costliest_units
-- $1 domain or null, $2 how many: the units that cost the most (a unit that cost nothing is
-- not among them), without a sort of every unit (migration 0017): the first $2 plus as
-- many as changed since the last fold from v_costliest_units (an index), and the changed units
-- (v_changed_units), read as they are now from v_cost_per_unit and ranked again.
SELECT domain, unit_id, external_ref, state, disposition, attempts, cost_cents
FROM v_cost_per_unit
WHERE scope = 'unit' AND cost_cents > 0 AND ($1::text IS NULL OR domain = $1)
  AND unit_id = ANY (ARRAY(SELECT r.unit_id FROM v_costliest_units AS r
                           WHERE $1::text IS NULL OR r.domain = $1
                           LIMIT $2 + (SELECT count(*) FROM v_changed_units))
                     || ARRAY(SELECT c.unit_id FROM v_changed_units AS c))
ORDER BY cost_cents DESC, external_ref
LIMIT $2;

-- name: read_rework_rates
-- $1 domain or null: the rework rate per domain and in total.
SELECT scope, domain, attempted_units, reworked_units, attempts, extra_attempts,
       superseded_attempts, released_attempts, rework_rate
FROM v_rework
WHERE scope IN ('domain', 'total') AND ($1::text IS NULL OR (scope = 'domain' AND domain = $1))
ORDER BY scope = 'total', domain;

-- name: read_reworked_units
-- $1 domain or null, $2 how many: the units that took the most attempts, picked as
-- read_costliest_units picks by cost (v_most_attempted_units and v_changed_units, ranked
-- again by their rows now), then looked up in v_rework by id: an array computed first
-- (ARRAY(...)), so the lookup is an index scan of those units alone.
SELECT domain, unit_id, external_ref, state, disposition, attempts, superseded_attempts,
       released_attempts
FROM v_rework
WHERE scope = 'unit'
  AND unit_id = ANY (ARRAY(
      SELECT c.unit_id FROM v_cost_per_unit AS c
      WHERE c.scope = 'unit' AND c.attempts > 1 AND ($1::text IS NULL OR c.domain = $1)
        AND c.unit_id = ANY (ARRAY(SELECT r.unit_id FROM v_most_attempted_units AS r
                                   WHERE $1::text IS NULL OR r.domain = $1
                                   LIMIT $2 + (SELECT count(*) FROM v_changed_units))
                             || ARRAY(SELECT u.unit_id FROM v_changed_units AS u))
      ORDER BY c.attempts DESC, c.external_ref
      LIMIT $2))
ORDER BY attempts DESC, external_ref;

-- name: read_disposition_summary
-- $1 domain or null (then the four total rows, one per disposition).
SELECT scope, disposition, domain, units, attempts, cost_cents, cost_per_unit_cents,
       units_without_evidence, evidence_urls, evidence_url_count, first_disposed_at,
       last_disposed_at
FROM v_disposition_summary
WHERE CASE WHEN $1::text IS NULL THEN scope = 'total' ELSE scope = 'domain' AND domain = $1 END
ORDER BY disposition;

-- name: read_question_wait
-- $1 domain or null (then the group rows and the total row; with a domain, its row alone).
SELECT scope, domain, assignee_group_slug, open_questions, unrouted_questions,
       oldest_open_seconds, open_p50_seconds, answered_questions, answer_p50_seconds,
       answer_p90_seconds, cancelled_questions
FROM v_question_wait
WHERE CASE WHEN $1::text IS NULL THEN scope IN ('group', 'total')
           ELSE scope = 'domain' AND domain = $1 END
ORDER BY scope = 'total', oldest_open_seconds DESC, assignee_group_slug;

-- name: read_waiting
-- $1 domain or null, $2 how many: the waiting units, those held by a DEAD or DEFERRED
-- prerequisite first (they never finish: an operator waives or disposes), then the longest
-- waiting. One row per reason a unit waits.
SELECT unit_id, external_ref, domain, reason, prerequisite_ref, prerequisite_state,
       prerequisite_disposition, question_id, waiting_since
FROM v_waiting
WHERE $1::text IS NULL OR domain = $1
ORDER BY prerequisite_disposition IN ('DEAD', 'DEFERRED') IS NOT TRUE, waiting_since,
         external_ref
LIMIT $2;

-- name: read_waiting_count
-- $1 domain or null: how many rows v_waiting holds.
SELECT count(*) FROM v_waiting WHERE $1::text IS NULL OR domain = $1;

-- name: read_budgets
-- $1 domain or null (then every budget; with a domain, its own and its fleets' budgets).
SELECT fleet, domain, cap_cents, spent_cents, remaining_cents, exhausted, percent_used
FROM v_budget
WHERE $1::text IS NULL OR domain IS NULL OR domain = $1
ORDER BY percent_used DESC NULLS LAST, fleet, domain NULLS FIRST;

-- name: read_controls
-- $1 domain or null (then every controlled scope; with a domain, its own and its fleets').
-- Live against each cap, and which scopes are paused (DESIGN §13).
SELECT fleet, domain, live, max_live, held, ready, paused, paused_since, drained
FROM v_controls
WHERE $1::text IS NULL OR domain IS NULL OR domain = $1
ORDER BY paused DESC, fleet, domain NULLS FIRST;

-- name: read_cost_by_model
-- $1 domain or null: cost records summed per model (over every fleet and domain, or one).
SELECT model, sum(cost_cents)::bigint AS cost_cents,
       coalesce(sum(estimated_cents), 0)::bigint AS estimated_cents,
       sum(input_tokens)::bigint AS input_tokens, sum(output_tokens)::bigint AS output_tokens,
       sum(cache_read_tokens)::bigint AS cache_read_tokens,
       sum(cache_write_tokens)::bigint AS cache_write_tokens, sum(records)::bigint AS records
FROM v_cost_by_model
WHERE $1::text IS NULL OR domain = $1
GROUP BY model
ORDER BY sum(cost_cents) DESC, model NULLS LAST;

-- name: read_metrics_snapshot
-- Everything /metrics reads from the views, in one round trip: queue depth by domain and
-- state, stalled units by domain, attempts (one per claim) and stale reclaims by domain,
-- open questions and the oldest one's age by assignee group (v_open_questions: an index,
-- not v_question_wait's aggregate of every question), waiting units by domain and
-- reason (a DEAD or DEFERRED prerequisite, an unfinished one, the attempt limit) with the
-- oldest one's wait, each budget's cap, spend and what remains, each controlled scope's
-- live units, cap and pause (v_controls), and per domain and '(all)' the open units and
-- the forecast's days (v_forecast, 0023).
SELECT (SELECT coalesce(jsonb_agg(to_jsonb(q) ORDER BY q.domain), '[]')
        FROM v_queue_depth AS q WHERE q.scope = 'domain') AS queue_depth,
       (SELECT coalesce(jsonb_object_agg(s.domain, s.stalled_units), '{}')
        FROM v_stall_counts AS s) AS stalled,
       (SELECT coalesce(jsonb_object_agg(c.domain, c.attempts), '{}')
        FROM v_cost_per_unit AS c WHERE c.scope = 'domain') AS claims,
       (SELECT coalesce(jsonb_object_agg(r.domain, r.superseded_attempts), '{}')
        FROM v_rework AS r WHERE r.scope = 'domain') AS reclaims,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'group', w.assignee_group_slug, 'open', w.open_questions,
                   'oldest', w.oldest_open_seconds)), '[]')
        FROM v_open_questions AS w) AS question_wait,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'domain', w.domain, 'reason', w.reason, 'units', w.units,
                   'oldest', w.oldest)), '[]')
        FROM (SELECT v.domain,
                     CASE WHEN v.reason = 'answer' THEN 'attempt_limit'
                          WHEN v.prerequisite_disposition = 'DEAD' THEN 'dead_prerequisite'
                          WHEN v.prerequisite_disposition = 'DEFERRED' THEN 'deferred_prerequisite'
                          ELSE 'unfinished_prerequisite' END AS reason,
                     count(DISTINCT v.unit_id) AS units,
                     floor(extract(epoch FROM now() - min(v.waiting_since)))::bigint AS oldest
              FROM v_waiting AS v GROUP BY 1, 2) AS w) AS waiting,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'fleet', b.fleet, 'domain', coalesce(b.domain, '(all)'), 'cap', b.cap_cents,
                   'spent', b.spent_cents, 'remaining', b.remaining_cents)), '[]')
        FROM v_budget AS b) AS budgets,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'fleet', c.fleet, 'domain', coalesce(c.domain, '(all)'), 'live', c.live,
                   'cap', c.max_live, 'paused', c.paused, 'ready', c.ready,
                   'paused_seconds', floor(extract(epoch FROM now() - c.paused_since)))), '[]')
        FROM v_controls AS c) AS controls,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'domain', f.domain, 'open', f.open_units, 'p50', f.days_p50,
                   'p85', f.days_p85)), '[]')
        FROM v_forecast AS f) AS forecast;

-- name: fold_read_summaries
-- $1 the fewest change rows worth a fold (0: any). The change rows written since the last
-- fold, folded into the read summaries (migration 0017); 0 when fewer wait or another fold
-- holds the lock. `serve` runs it every FOLD_EVERY_SECONDS.
SELECT wl_fold_read_summaries($1) AS folded;

-- name: read_grant_reader
-- $1 role name, $2 SCRAM-SHA-256 password verifier: the views the role may now read.
SELECT wl_grant_reader($1, $2) AS views;

-- name: read_course_days
-- $1 domain or null ('(all)'). The program's course: the 28 UTC days before today, and
-- today, from v_daily (a range of its kept days); days with nothing have no row.
SELECT day, migrated, disposed, verified, split, failed, abandoned, superseded, cost_cents,
       estimated_cents, agents, peak_live
FROM v_daily
WHERE domain = coalesce($1::text, '(all)') AND day >= (now() AT TIME ZONE 'UTC')::date - 28
ORDER BY day;

-- name: read_forecast
-- $1 domain or null ('(all)'): the forecast's row, and today's UTC date.
SELECT f.*, (now() AT TIME ZONE 'UTC')::date AS today
FROM (SELECT (now() AT TIME ZONE 'UTC')::date AS today) AS t
LEFT JOIN v_forecast AS f ON f.domain = coalesce($1::text, '(all)');
