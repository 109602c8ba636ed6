-- The read-side benchmark's fill: a year of a large estate, written straight into the
-- ledger's tables by generate_series (bench/readside.py). The scale arrives in settings
-- (`wl_bench.units`, `wl_bench.events_per_unit`), so each block runs as one script.
-- The rows keep the ledger's constraints (states, dispositions, sums, one live attempt per
-- held unit) but not its event chains (the events are volume only: no view reads them).
-- Triggers are skipped while it runs (session_replication_role = replica); a schema with
-- kept summaries has them built from what was written by its migration, or by
-- SELECT wl_rebuild_read_summaries().

-- name: fill_units
-- 70 % done, 10 % abandoned, 15 % ready, 4 % in progress, 1 % claimed, blocked or verified,
-- 40 domains with names of real length; disposals spread over the last 365 days.
SET session_replication_role = replica;
INSERT INTO work_units (created_at, updated_at, external_ref, fleet, domain, state, disposition,
                        disposed_at, claimed_by, lease_expires_at, last_heartbeat_at,
                        attempt_count, cost_cents, evidence_urls)
SELECT created, created, format('repo-%s/module/%s', g % 997, g), 'fleet-' || (g % 4),
       format('estate/%s-%s',
              (ARRAY['billing', 'catalog', 'checkout', 'identity', 'inventory',
                     'notifications', 'payments', 'search'])[g % 8 + 1], g % 40 / 8 + 1),
       state, disposition,
       CASE WHEN disposition IS NOT NULL
            THEN now() - ((g::bigint * 7919) % 365) * interval '1 day' - (g % 86400) * interval '1 s' END,
       CASE WHEN state IN ('claimed', 'in_progress', 'blocked') THEN 'agent-' || g END,
       CASE WHEN state IN ('claimed', 'in_progress') THEN now() + interval '10 minutes' END,
       CASE WHEN state IN ('claimed', 'in_progress', 'blocked')
            THEN now() - CASE WHEN g % 9 < 5 THEN (g % 7200 + 600) * interval '1 s'
                              ELSE interval '20 s' END END,
       attempts, attempts * (10 + (g * 37) % 400),
       CASE WHEN state IN ('done', 'verified')
                THEN ARRAY['https://git.example.com/estate/pull/' || g]
                     || CASE WHEN g % 10 = 0 THEN ARRAY['https://ci.example.com/batch/' || g / 1000]
                             ELSE '{}'::text[] END
            WHEN state = 'abandoned' AND g % 4 = 0
                THEN ARRAY['https://notes.example.com/why/' || g]
            ELSE '{}'::text[] END
FROM (
    SELECT g, created, s.state,
           CASE s.state WHEN 'done' THEN 'MIGRATED'::work_disposition
                        WHEN 'abandoned' THEN (ARRAY['DROPPED', 'DEFERRED', 'DEAD']
                                               ::work_disposition[])[g % 3 + 1] END AS disposition,
           CASE WHEN s.state = 'ready' THEN g % 3 % 2 ELSE 1 + g % 9 % 4 END AS attempts
    FROM generate_series(1, current_setting('wl_bench.units')::integer) AS g
    CROSS JOIN LATERAL (
        SELECT now() - interval '400 days'
               + g * (interval '365 days' / current_setting('wl_bench.units')::integer) AS created,
               CASE WHEN (g * 7) % 100 < 70 THEN 'done'
                    WHEN (g * 7) % 100 < 80 THEN 'abandoned'
                    WHEN (g * 7) % 100 < 95 THEN 'ready'
                    WHEN (g * 7) % 100 < 99 THEN 'in_progress'
                    ELSE (ARRAY['claimed', 'blocked', 'verified'])[g % 3 + 1]
               END::work_state AS state
    ) AS s
) AS f;

-- name: fill_attempts
-- One row per attempt: earlier attempts lost to a lapsed lease, failed or abandoned; the
-- last one verified, abandoned, released (ready units) or live (held units).
SET session_replication_role = replica;
INSERT INTO work_unit_attempts (unit_id, attempt_no, agent_id, started_at, outcome, cost_cents,
                                evidence_url, ended_at)
SELECT id, n, 'agent-' || (n * 13 + attempt_count) % 64, started, outcome,
       cost_cents / attempt_count,
       CASE WHEN outcome = 'verified' THEN evidence_urls[1] END,
       CASE WHEN outcome IS NOT NULL THEN started + interval '40 minutes' END
FROM (
    SELECT u.id, u.attempt_count, u.cost_cents, u.evidence_urls, n,
           u.created_at + n * interval '1 hour' AS started,
           CASE WHEN n < u.attempt_count
                    THEN (ARRAY['superseded', 'failed', 'abandoned']::attempt_outcome[])
                         [(n + length(u.external_ref)) % 3 + 1]
                WHEN u.state IN ('done', 'verified') THEN 'verified'::attempt_outcome
                WHEN u.state = 'abandoned' THEN 'abandoned'::attempt_outcome
                WHEN u.state = 'ready' THEN 'failed'::attempt_outcome
           END AS outcome
    FROM work_units AS u, generate_series(1, u.attempt_count) AS n
) AS a;

-- name: fill_questions
-- Every blocked unit waits on an open question; one done unit in fifty had one answered.
SET session_replication_role = replica;
INSERT INTO blocking_questions (unit_id, attempt_id, question, status, answer,
                                assignee_group_slug, asked_by, created_at, closed_at)
SELECT u.id, a.id, 'which of the two configs is authoritative?',
       CASE WHEN u.state = 'blocked' THEN 'open' ELSE 'answered' END::question_status,
       CASE WHEN u.state = 'blocked' THEN NULL ELSE 'the newer one' END,
       (ARRAY['agent-questions', 'platform-team', 'data-owners'])[length(u.external_ref) % 3 + 1],
       a.agent_id, a.started_at + interval '10 minutes',
       CASE WHEN u.state = 'blocked' THEN NULL ELSE a.started_at + interval '3 hours' END
FROM work_units AS u
JOIN work_unit_attempts AS a ON a.unit_id = u.id AND a.attempt_no = u.attempt_count
WHERE u.state = 'blocked' OR (u.state = 'done' AND hashtext(u.external_ref) % 50 = 0);

-- name: fill_events
-- `wl_bench.events_per_unit` events per unit: registered, then claims, heartbeats and the
-- final move (the volume an event log reaches; the views never read it).
SET session_replication_role = replica;
INSERT INTO work_unit_events (unit_id, event_type, from_state, to_state, agent_id, created_at)
SELECT u.id,
       CASE WHEN k = 1 THEN 'registered' WHEN k = 2 AND u.attempt_count > 0 THEN 'claimed'
            ELSE 'heartbeat' END::work_event_type,
       CASE WHEN k = 2 AND u.attempt_count > 0 THEN 'ready'::work_state END,
       CASE WHEN k = 1 THEN 'ready'::work_state
            WHEN k = 2 AND u.attempt_count > 0 THEN 'claimed'::work_state END,
       'agent-' || k, u.created_at + k * interval '1 minute'
FROM work_units AS u, generate_series(1, current_setting('wl_bench.events_per_unit')::integer) AS k;

-- name: fill_done
-- Triggers back on; the planner and the visibility map told what is there.
RESET session_replication_role;
VACUUM ANALYZE work_units;
VACUUM ANALYZE work_unit_attempts;
VACUUM ANALYZE blocking_questions;
VACUUM ANALYZE work_unit_events;

-- name: fill_costs
-- One cost record per attempt that cost anything, at its end (or start, while it runs):
-- only where the schema has cost_records (migration 0011 on).
SET session_replication_role = replica;
INSERT INTO cost_records (attempt_id, unit_id, cost_cents, recorded_by, estimated, created_at)
SELECT id, unit_id, cost_cents, agent_id, attempt_no % 5 = 0, coalesce(ended_at, started_at)
FROM work_unit_attempts WHERE cost_cents > 0;
RESET session_replication_role;
VACUUM ANALYZE cost_records;
