-- The program's course (issue 39, DESIGN §13): per UTC day and domain, the units disposed by
-- disposition, the attempts ended by outcome, the cost recorded, the agents that held a unit
-- and the peak of live units; and from them a forecast of when the open units are done.
-- Kept like the read side's other tallies (0017): the write path appends rows (no upsert,
-- no hot row), the fold adds them to wl_daily_tallies, and the views read folded plus
-- pending, so every read is exact whenever the last fold ran; `audit` compares them with a
-- scan of the tables (wl_daily_scan()).
--
-- Where each figure comes from, as it happens:
-- - disposed: the unit's change rows (wl_unit_changes, their disposed_at and disposition);
-- - live units: the same change rows, now numbered (seq) and timed (noted_at): the fold
--   runs the live count forward from the folded one in the order the changes were noted,
--   and keeps each day's highest value (a peak counted as the changes happen, no scan);
-- - attempts ended, agents and cost: wl_day_notes, appended by a claim's trigger (its
--   agent), the attempts' guard (an end: its outcome, and its agent on every day it ran)
--   and the cost records' trigger (the record's cents).
-- A peak is not in the tables afterwards: a rebuild keeps the days already counted and
-- leaves the others null; everything else it recounts.

-- No fold of an older serve runs while this one replaces the fold: the fold's own lock,
-- held until this migration commits.
SELECT pg_advisory_xact_lock(hashtext('wl_fold_read_summaries'));

-- The guard's and the insert trigger's INSERTs name 17 columns by position: the two new
-- columns take their defaults, so neither function changes.
CREATE SEQUENCE wl_unit_changes_seq AS bigint;
ALTER TABLE wl_unit_changes
    ADD COLUMN seq bigint NOT NULL DEFAULT nextval('wl_unit_changes_seq'),
    -- The transaction's time, as the events' created_at: a change and its event fall on
    -- the same day.
    ADD COLUMN noted_at timestamptz NOT NULL DEFAULT now();
ALTER SEQUENCE wl_unit_changes_seq OWNED BY wl_unit_changes.seq;

CREATE FUNCTION wl_utc_day(at timestamptz) RETURNS date
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT (at AT TIME ZONE 'UTC')::date $$;

CREATE FUNCTION wl_is_live(state work_state) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(state IN ('claimed', 'in_progress'), false)
$$;

-- Per UTC day and domain (and '(all)' for the two figures that do not add up across
-- domains: agents and peak live units; its other columns stay 0).
CREATE TABLE wl_daily_tallies (
    day             date NOT NULL,
    domain          text NOT NULL,
    migrated        bigint NOT NULL DEFAULT 0,
    dropped         bigint NOT NULL DEFAULT 0,
    deferred        bigint NOT NULL DEFAULT 0,
    dead            bigint NOT NULL DEFAULT 0,
    verified        bigint NOT NULL DEFAULT 0,
    split           bigint NOT NULL DEFAULT 0,
    failed          bigint NOT NULL DEFAULT 0,
    abandoned       bigint NOT NULL DEFAULT 0,
    superseded      bigint NOT NULL DEFAULT 0,
    cost_cents      bigint NOT NULL DEFAULT 0,
    estimated_cents bigint NOT NULL DEFAULT 0,
    agents          bigint NOT NULL DEFAULT 0,
    peak_live       bigint,
    CONSTRAINT daily_tallies_key PRIMARY KEY (day, domain)
);
COMMENT ON TABLE wl_daily_tallies IS
    'The program''s course as of the last fold: per UTC day and domain, units disposed by '
    'disposition, attempts ended by outcome, cost recorded (and its estimated part), agents '
    'that held a unit, peak live units. v_daily adds what is not folded yet.';

-- Which agents a (day, domain) has counted, so an agent counts once per day.
CREATE TABLE wl_daily_agents (
    day      date NOT NULL,
    domain   text NOT NULL,
    agent_id text NOT NULL,
    CONSTRAINT daily_agents_key PRIMARY KEY (day, domain, agent_id)
);

-- Appended by the triggers below; no index, no key: an insert, like wl_unit_changes.
CREATE TABLE wl_day_notes (
    day             date NOT NULL,
    domain          text NOT NULL,
    agent_id        text,
    outcome         attempt_outcome,
    cost_cents      bigint NOT NULL DEFAULT 0,
    estimated_cents bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE wl_day_notes IS
    'Appended by triggers on work_unit_attempts and cost_records: an agent that held a unit '
    'on a day, an attempt that ended, the cents recorded; deleted as the fold adds them to '
    'wl_daily_tallies.';

-- A claim notes its agent on the day it starts (a row trigger: a claim inserts one
-- attempt, and a row trigger keeps no transition table).
CREATE FUNCTION wl_note_attempt_started() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wl_day_notes (day, domain, agent_id)
    SELECT wl_utc_day(NEW.started_at), u.domain, NEW.agent_id
    FROM work_units AS u WHERE u.id = NEW.unit_id;
    RETURN NULL;
END $$;
CREATE TRIGGER daily_on_attempt_start
    AFTER INSERT ON work_unit_attempts
    FOR EACH ROW EXECUTE FUNCTION wl_note_attempt_started();

-- An end notes its outcome on the day it ends, and its agent on every day the attempt ran
-- (an outcome is final once set). `blocked` is no end of the work. Noted by 0002's guard
-- of attempt changes, which runs for every update of an attempt anyway (as 0019 did with
-- the unit's change rows): no second plpgsql call per end. The guard is the only BEFORE
-- trigger on work_unit_attempts, so NEW is the row as it will be written; a refused change
-- raises before the note.
CREATE OR REPLACE FUNCTION wl_guard_attempt_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.unit_id <> OLD.unit_id OR NEW.attempt_no <> OLD.attempt_no
       OR NEW.agent_id <> OLD.agent_id OR NEW.started_at <> OLD.started_at
       OR NEW.cost_cents < OLD.cost_cents
       OR (OLD.outcome IS NOT NULL AND (NEW.outcome IS DISTINCT FROM OLD.outcome
                                        OR NEW.ended_at IS DISTINCT FROM OLD.ended_at)) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'attempt_outcome_final',
            MESSAGE = format('attempt %s of unit %s (%s) cannot change so: its unit, number, agent '
                             'and start are fixed, its cost only grows, and once ended its outcome '
                             'never changes', OLD.attempt_no, OLD.unit_id,
                             coalesce('ended ' || OLD.outcome, 'running')),
            HINT = 'claim the unit again to start a new attempt';
    END IF;
    -- The program's course (0023): an attempt that ends now.
    IF OLD.outcome IS NULL AND NEW.outcome IS NOT NULL THEN
        INSERT INTO wl_day_notes (day, domain, agent_id, outcome)
        SELECT d::date, u.domain, NEW.agent_id,
               CASE WHEN d::date = wl_utc_day(NEW.ended_at) AND NEW.outcome <> 'blocked'
                    THEN NEW.outcome END
        FROM work_units AS u
        CROSS JOIN generate_series(wl_utc_day(NEW.started_at)::timestamp,
                                   wl_utc_day(NEW.ended_at)::timestamp, interval '1 day') AS d
        WHERE u.id = NEW.unit_id;
    END IF;
    RETURN NEW;
END $$;

-- Cost records are append-only: 0014's row trigger, which reads the record's unit
-- anyway, notes its cents for the day too (no second plpgsql call per record).
CREATE OR REPLACE FUNCTION wl_tally_cost_record() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    unit work_units;
    new_unit integer;
BEGIN
    SELECT * INTO unit FROM work_units WHERE id = NEW.unit_id;
    INSERT INTO wl_model_units VALUES (unit.fleet, unit.domain, NEW.model, NEW.unit_id)
    ON CONFLICT ON CONSTRAINT model_units_key DO NOTHING;
    GET DIAGNOSTICS new_unit = ROW_COUNT;
    INSERT INTO wl_model_tallies AS t
    VALUES (unit.fleet, unit.domain, NEW.model, wl_tally_stripe(16), NEW.cost_cents,
            CASE WHEN NEW.estimated THEN NEW.cost_cents ELSE 0 END, NEW.estimated::integer,
            coalesce(NEW.input_tokens, 0), (NEW.input_tokens IS NOT NULL)::integer,
            coalesce(NEW.output_tokens, 0), (NEW.output_tokens IS NOT NULL)::integer,
            coalesce(NEW.cache_read_tokens, 0), (NEW.cache_read_tokens IS NOT NULL)::integer,
            coalesce(NEW.cache_write_tokens, 0), (NEW.cache_write_tokens IS NOT NULL)::integer,
            1, new_unit)
    ON CONFLICT ON CONSTRAINT model_tallies_key DO UPDATE
    SET cost_cents = t.cost_cents + excluded.cost_cents,
        estimated_cents = t.estimated_cents + excluded.estimated_cents,
        estimated_records = t.estimated_records + excluded.estimated_records,
        input_tokens = t.input_tokens + excluded.input_tokens,
        input_records = t.input_records + excluded.input_records,
        output_tokens = t.output_tokens + excluded.output_tokens,
        output_records = t.output_records + excluded.output_records,
        cache_read_tokens = t.cache_read_tokens + excluded.cache_read_tokens,
        cache_read_records = t.cache_read_records + excluded.cache_read_records,
        cache_write_tokens = t.cache_write_tokens + excluded.cache_write_tokens,
        cache_write_records = t.cache_write_records + excluded.cache_write_records,
        records = t.records + excluded.records,
        units = t.units + excluded.units;
    -- The program's course (0023): the day's cents.
    IF NEW.cost_cents > 0 THEN
        INSERT INTO wl_day_notes (day, domain, cost_cents, estimated_cents)
        VALUES (wl_utc_day(NEW.created_at), unit.domain, NEW.cost_cents,
                CASE WHEN NEW.estimated THEN NEW.cost_cents ELSE 0 END);
    END IF;
    RETURN NULL;
END $$;

-- The live count's steps not yet folded: per change row and domain (and '(all)'), how it
-- moved the live count, in the order the changes were noted.
CREATE VIEW wl_pending_live_steps AS
SELECT c.seq, wl_utc_day(c.noted_at) AS day, k.domain, sum(k.delta)::bigint AS delta
FROM wl_unit_changes AS c
CROSS JOIN LATERAL (
    VALUES (c.old_domain, -wl_is_live(c.old_state)::integer),
           (c.new_domain, wl_is_live(c.new_state)::integer),
           ('(all)', wl_is_live(c.new_state)::integer - wl_is_live(c.old_state)::integer)
) AS k (domain, delta)
WHERE k.domain IS NOT NULL
GROUP BY c.seq, c.noted_at, k.domain
HAVING sum(k.delta) <> 0;

-- Each day's highest live count among the pending steps (the value before a day's first
-- step is the count it started with), run forward from the folded count; and today's
-- count now, so a day whose units stayed live without a change still has its peak.
CREATE VIEW wl_pending_peaks AS
WITH base AS (
    SELECT domain, sum(units)::bigint AS live FROM wl_unit_tallies
    WHERE wl_is_live(state) GROUP BY domain
    UNION ALL
    SELECT '(all)', coalesce(sum(units), 0)::bigint FROM wl_unit_tallies WHERE wl_is_live(state)
), steps AS (
    SELECT s.day, s.domain, s.delta,
           coalesce(b.live, 0) + sum(s.delta) OVER (PARTITION BY s.domain ORDER BY s.seq)
               AS after
    FROM wl_pending_live_steps AS s LEFT JOIN base AS b USING (domain)
), now_live AS (
    SELECT domain, sum(live)::bigint AS live
    FROM (SELECT domain, live FROM base
          UNION ALL SELECT domain, delta FROM wl_pending_live_steps) AS x
    GROUP BY domain
)
SELECT day, domain, max(greatest(after, after - delta))::bigint AS peak_live
FROM steps GROUP BY day, domain
UNION ALL
SELECT wl_utc_day(now()), domain, live FROM now_live WHERE live > 0;

-- Disposals not folded yet, per day, domain and disposition (dispositions are final: a
-- disposed unit's later change rows cancel out).
CREATE VIEW wl_pending_daily_disposed AS
SELECT wl_utc_day(disposed_at) AS day, domain,
       coalesce(sum(sign) FILTER (WHERE disposition = 'MIGRATED'), 0)::bigint AS migrated,
       coalesce(sum(sign) FILTER (WHERE disposition = 'DROPPED'), 0)::bigint AS dropped,
       coalesce(sum(sign) FILTER (WHERE disposition = 'DEFERRED'), 0)::bigint AS deferred,
       coalesce(sum(sign) FILTER (WHERE disposition = 'DEAD'), 0)::bigint AS dead
FROM wl_pending_sides
WHERE disposition IS NOT NULL AND disposed_at IS NOT NULL
GROUP BY 1, 2;

-- The running attempts' agents, today: a claim noted its first day, its end will note
-- every day it ran, and each fold notes today, so a day an attempt runs through is kept
-- by that day's folds (serve folds every second). Read by the fold only: per read it would
-- join every running attempt to its unit. Few rows (one live claim per agent), from the
-- partial index of running attempts.
CREATE VIEW wl_running_agents_today AS
SELECT wl_utc_day(now()) AS day, u.domain, a.agent_id
FROM work_unit_attempts AS a
JOIN work_units AS u ON u.id = a.unit_id
WHERE a.outcome IS NULL;

-- The agents the notes add to a day: those not counted yet, per domain and '(all)'.
CREATE VIEW wl_pending_daily_agents AS
SELECT DISTINCT x.day, s.domain, x.agent_id
FROM (SELECT n.day, n.domain, n.agent_id FROM wl_day_notes AS n
      WHERE n.agent_id IS NOT NULL) AS x
CROSS JOIN LATERAL (VALUES (x.domain), ('(all)')) AS s (domain)
WHERE NOT EXISTS (SELECT 1 FROM wl_daily_agents AS k
                  WHERE (k.day, k.domain, k.agent_id) = (x.day, s.domain, x.agent_id));

-- Everything not folded yet, in wl_daily_tallies' columns.
CREATE VIEW wl_pending_daily_tallies AS
SELECT day, domain, migrated, dropped, deferred, dead, 0::bigint AS verified,
       0::bigint AS split, 0::bigint AS failed, 0::bigint AS abandoned, 0::bigint AS superseded,
       0::bigint AS cost_cents, 0::bigint AS estimated_cents, 0::bigint AS agents,
       NULL::bigint AS peak_live
FROM wl_pending_daily_disposed
UNION ALL
SELECT day, domain, 0, 0, 0, 0,
       count(*) FILTER (WHERE outcome = 'verified'), count(*) FILTER (WHERE outcome = 'split'),
       count(*) FILTER (WHERE outcome = 'failed'), count(*) FILTER (WHERE outcome = 'abandoned'),
       count(*) FILTER (WHERE outcome = 'superseded'),
       sum(cost_cents)::bigint, sum(estimated_cents)::bigint, 0, NULL
FROM wl_day_notes GROUP BY day, domain
UNION ALL
SELECT day, domain, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, count(*), NULL
FROM wl_pending_daily_agents GROUP BY day, domain
UNION ALL
SELECT day, domain, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, peak_live FROM wl_pending_peaks;

CREATE VIEW wl_daily_tallies_now AS
SELECT * FROM wl_daily_tallies UNION ALL SELECT * FROM wl_pending_daily_tallies;

-- The same figures from a scan of the tables (the audit's, and the rebuild's): peaks
-- excepted, which the tables do not keep. An agent held a unit on each UTC day from its
-- attempt's start to its end (today, while it runs).
CREATE FUNCTION wl_daily_scan(only_domains text[] DEFAULT NULL)
    RETURNS TABLE (day date, domain text, migrated bigint, dropped bigint, deferred bigint,
                   dead bigint, verified bigint, split bigint, failed bigint,
                   abandoned bigint, superseded bigint, cost_cents bigint,
                   estimated_cents bigint, agents bigint)
    LANGUAGE sql STABLE AS $$
    WITH held AS (
        SELECT DISTINCT d::date AS day, s.domain, a.agent_id
        FROM work_unit_attempts AS a
        JOIN work_units AS u ON u.id = a.unit_id
        CROSS JOIN generate_series(wl_utc_day(a.started_at)::timestamp,
                                   wl_utc_day(coalesce(a.ended_at, now()))::timestamp,
                                   interval '1 day') AS d
        CROSS JOIN LATERAL (VALUES (u.domain), ('(all)')) AS s (domain)
        WHERE only_domains IS NULL OR u.domain = ANY (only_domains)
    ), parts AS (
        SELECT wl_utc_day(disposed_at) AS day, domain,
               count(*) FILTER (WHERE disposition = 'MIGRATED') AS migrated,
               count(*) FILTER (WHERE disposition = 'DROPPED') AS dropped,
               count(*) FILTER (WHERE disposition = 'DEFERRED') AS deferred,
               count(*) FILTER (WHERE disposition = 'DEAD') AS dead,
               0 AS verified, 0 AS split, 0 AS failed, 0 AS abandoned, 0 AS superseded,
               0 AS cost_cents, 0 AS estimated_cents, 0 AS agents
        FROM work_units WHERE disposition IS NOT NULL AND disposed_at IS NOT NULL
          AND (only_domains IS NULL OR domain = ANY (only_domains))
        GROUP BY 1, 2
        UNION ALL
        SELECT wl_utc_day(a.ended_at), u.domain, 0, 0, 0, 0,
               count(*) FILTER (WHERE a.outcome = 'verified'),
               count(*) FILTER (WHERE a.outcome = 'split'),
               count(*) FILTER (WHERE a.outcome = 'failed'),
               count(*) FILTER (WHERE a.outcome = 'abandoned'),
               count(*) FILTER (WHERE a.outcome = 'superseded'), 0, 0, 0
        FROM work_unit_attempts AS a JOIN work_units AS u ON u.id = a.unit_id
        WHERE a.outcome IS NOT NULL AND a.outcome <> 'blocked'
          AND (only_domains IS NULL OR u.domain = ANY (only_domains))
        GROUP BY 1, 2
        UNION ALL
        SELECT wl_utc_day(r.created_at), u.domain, 0, 0, 0, 0, 0, 0, 0, 0, 0,
               sum(r.cost_cents), coalesce(sum(r.cost_cents) FILTER (WHERE r.estimated), 0), 0
        FROM cost_records AS r JOIN work_units AS u ON u.id = r.unit_id
        WHERE only_domains IS NULL OR u.domain = ANY (only_domains)
        GROUP BY 1, 2
        HAVING sum(r.cost_cents) > 0
        UNION ALL
        SELECT held.day, held.domain, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, count(*)
        FROM held GROUP BY 1, 2
    )
    SELECT day, domain, sum(migrated)::bigint, sum(dropped)::bigint, sum(deferred)::bigint,
           sum(dead)::bigint, sum(verified)::bigint, sum(split)::bigint, sum(failed)::bigint,
           sum(abandoned)::bigint, sum(superseded)::bigint, sum(cost_cents)::bigint,
           sum(estimated_cents)::bigint, sum(agents)::bigint
    FROM parts GROUP BY day, domain
$$;
REVOKE EXECUTE ON FUNCTION wl_daily_scan(text[]) FROM PUBLIC;

CREATE FUNCTION wl_daily_drift()
    RETURNS TABLE (summary text, key text, kept text, actual text)
    LANGUAGE sql STABLE AS $$
    WITH kept AS (
        SELECT day, domain,
               ARRAY[sum(migrated), sum(dropped), sum(deferred), sum(dead), sum(verified),
                     sum(split), sum(failed), sum(abandoned), sum(superseded), sum(cost_cents),
                     sum(estimated_cents), sum(agents)]::bigint[] AS sums
        FROM wl_daily_tallies_now GROUP BY day, domain
    ), actual AS (
        SELECT day, domain,
               ARRAY[migrated, dropped, deferred, dead, verified, split, failed, abandoned,
                     superseded, cost_cents, estimated_cents, agents] AS sums
        FROM wl_daily_scan()
    )
    SELECT 'wl_daily_tallies', format('%s/%s', coalesce(k.day, a.day), coalesce(k.domain, a.domain)),
           k.sums::text, a.sums::text
    FROM kept AS k FULL JOIN actual AS a ON (a.day, a.domain) = (k.day, k.domain)
    -- A day whose kept figures are all 0 (only a peak) is as good as none.
    WHERE coalesce(k.sums, '{0,0,0,0,0,0,0,0,0,0,0,0}') IS DISTINCT FROM
          coalesce(a.sums, '{0,0,0,0,0,0,0,0,0,0,0,0}')
$$;
REVOKE EXECUTE ON FUNCTION wl_daily_drift() FROM PUBLIC;
-- 0021's fold, with the course's days (0023).
CREATE OR REPLACE FUNCTION wl_fold_read_summaries_locked() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    folded bigint;
    left_keys text[];
BEGIN
    WITH gone AS (
        DELETE FROM wl_unit_changes RETURNING 1
    ), sides AS MATERIALIZED (
        -- Read once: the aggregates below are those of the wl_pending_* views, over it.
        SELECT * FROM wl_pending_sides
    ), units AS (
        INSERT INTO wl_unit_tallies AS t
        SELECT domain, state, disposition, 0, sum(sign), sum(sign * (attempts > 0)::integer),
               sum(sign * (attempts > 1)::integer), sum(sign * attempts),
               sum(sign * cost_cents), sum(sign * no_evidence::integer),
               min(disposed_at) FILTER (WHERE sign = 1), max(disposed_at) FILTER (WHERE sign = 1)
        FROM sides
        GROUP BY domain, state, disposition
        ORDER BY domain, state, disposition
        ON CONFLICT ON CONSTRAINT unit_tallies_key DO UPDATE
        SET units = t.units + excluded.units,
            attempted_units = t.attempted_units + excluded.attempted_units,
            reworked_units = t.reworked_units + excluded.reworked_units,
            attempts = t.attempts + excluded.attempts,
            cost_cents = t.cost_cents + excluded.cost_cents,
            units_without_evidence = t.units_without_evidence + excluded.units_without_evidence,
            first_disposed_at = least(t.first_disposed_at, excluded.first_disposed_at),
            last_disposed_at = greatest(t.last_disposed_at, excluded.last_disposed_at)
    ), rework AS (
        INSERT INTO wl_rework_tallies AS t
        SELECT domain, 0, sum(sign * superseded), sum(sign * released)
        FROM sides WHERE attempts > 1
        GROUP BY domain
        HAVING sum(sign * superseded) <> 0 OR sum(sign * released) <> 0
        ORDER BY domain
        ON CONFLICT ON CONSTRAINT rework_tallies_key DO UPDATE
        SET superseded_attempts = t.superseded_attempts + excluded.superseded_attempts,
            released_attempts = t.released_attempts + excluded.released_attempts
    ), days AS (
        INSERT INTO wl_rework_days AS t
        SELECT domain, date_trunc('day', disposed_at, 'UTC') AS day, 0, sum(sign),
               sum(sign * (attempts > 1)::integer), sum(sign * attempts),
               sum(sign * superseded), sum(sign * released)
        FROM sides WHERE disposed_at IS NOT NULL AND attempts > 0
        GROUP BY domain, day
        ORDER BY domain, day
        ON CONFLICT ON CONSTRAINT rework_days_key DO UPDATE
        SET attempted_units = t.attempted_units + excluded.attempted_units,
            reworked_units = t.reworked_units + excluded.reworked_units,
            attempts = t.attempts + excluded.attempts,
            superseded_attempts = t.superseded_attempts + excluded.superseded_attempts,
            released_attempts = t.released_attempts + excluded.released_attempts
    ), pending_links AS MATERIALIZED (
        SELECT s.disposition, scope.domain, link, sum(s.sign) AS delta
        FROM sides AS s
        CROSS JOIN LATERAL unnest(s.links) AS link
        CROSS JOIN LATERAL (VALUES (s.domain), ('(all)')) AS scope (domain)
        WHERE s.disposition IS NOT NULL
        GROUP BY s.disposition, scope.domain, link
        HAVING sum(s.sign) <> 0
    ), links AS (
        INSERT INTO wl_disposed_links AS l
        SELECT disposition, domain, link, delta FROM pending_links
        ORDER BY disposition, domain, link
        ON CONFLICT ON CONSTRAINT disposed_links_key DO UPDATE SET units = l.units + excluded.units
        RETURNING l.disposition, l.domain, l.link, l.units
    ), link_counts AS (
        -- What wl_pending_link_tallies says, from the upsert's own answer: a link whose
        -- units now equal its (positive) delta is new to its key, one at 0 has left it.
        INSERT INTO wl_link_tallies AS t
        SELECT k.disposition, k.domain, 0,
               count(*) FILTER (WHERE k.units = p.delta AND p.delta > 0)
               - count(*) FILTER (WHERE k.units = 0)
        FROM links AS k JOIN pending_links AS p USING (disposition, domain, link)
        GROUP BY k.disposition, k.domain
        HAVING count(*) FILTER (WHERE k.units = p.delta AND p.delta > 0)
               <> count(*) FILTER (WHERE k.units = 0)
        ORDER BY k.disposition, k.domain
        ON CONFLICT ON CONSTRAINT link_tallies_key DO UPDATE SET links = t.links + excluded.links
    ), ranks AS (
        -- Once a unit ranks it ranks for good (its cost and attempts never fall: cost
        -- records and attempts are append-only), so no row ever leaves.
        INSERT INTO wl_unit_ranks AS r
        SELECT u.id, u.domain, u.external_ref, u.cost_cents, u.attempt_count
        FROM work_units AS u
        -- An array computed first: the units are read by their key, never a scan.
        WHERE u.id = ANY (ARRAY(SELECT DISTINCT unit_id FROM wl_unit_changes))
          AND (u.cost_cents > 0 OR u.attempt_count > 1)
        ORDER BY u.id
        ON CONFLICT (unit_id) DO UPDATE
        SET domain = excluded.domain, external_ref = excluded.external_ref,
            cost_cents = excluded.cost_cents, attempts = excluded.attempts
        WHERE (r.domain, r.external_ref, r.cost_cents, r.attempts)
              IS DISTINCT FROM (excluded.domain, excluded.external_ref, excluded.cost_cents,
                                excluded.attempts)
    ), daily AS (
        -- The course (0023): each day's disposals from the change rows, and each day's
        -- peak of the live count run forward through them (wl_pending_peaks, read in this
        -- snapshot: from the folded count before this fold adds to it).
        INSERT INTO wl_daily_tallies AS t (day, domain, migrated, dropped, deferred, dead,
                                           peak_live)
        SELECT day, domain, sum(migrated), sum(dropped), sum(deferred), sum(dead),
               max(peak_live)
        FROM (SELECT wl_utc_day(disposed_at) AS day, domain,
                     coalesce(sum(sign) FILTER (WHERE disposition = 'MIGRATED'), 0) AS migrated,
                     coalesce(sum(sign) FILTER (WHERE disposition = 'DROPPED'), 0) AS dropped,
                     coalesce(sum(sign) FILTER (WHERE disposition = 'DEFERRED'), 0) AS deferred,
                     coalesce(sum(sign) FILTER (WHERE disposition = 'DEAD'), 0) AS dead,
                     NULL::bigint AS peak_live
              FROM sides WHERE disposition IS NOT NULL AND disposed_at IS NOT NULL
              GROUP BY 1, 2
              UNION ALL
              SELECT day, domain, 0, 0, 0, 0, peak_live FROM wl_pending_peaks) AS x
        GROUP BY day, domain
        ORDER BY day, domain
        ON CONFLICT ON CONSTRAINT daily_tallies_key DO UPDATE
        SET migrated = t.migrated + excluded.migrated, dropped = t.dropped + excluded.dropped,
            deferred = t.deferred + excluded.deferred, dead = t.dead + excluded.dead,
            peak_live = greatest(t.peak_live, excluded.peak_live)
        -- An idle fold (every second) rewrites nothing: today's live count is no news.
        WHERE (excluded.migrated, excluded.dropped, excluded.deferred, excluded.dead)
              <> (0, 0, 0, 0)
           OR excluded.peak_live > coalesce(t.peak_live, -1)
    )
    SELECT (SELECT count(*) FROM gone),
           (SELECT array_agg(DISTINCT format('%s/%s/%s', c.old_domain, c.old_state,
                                              c.old_disposition))
            FROM wl_unit_changes AS c
            WHERE c.old_disposed_at IS NOT NULL
              AND (c.old_domain, c.old_state, c.old_disposition)
                  IS DISTINCT FROM (c.new_domain, c.new_state, c.new_disposition))
    INTO folded, left_keys;
    -- The notes, in a statement of their own (they touch no table the one above does but
    -- wl_daily_tallies, whose rows a second upsert in one statement may not touch twice):
    -- it deletes the notes its snapshot sees and adds exactly those.
    WITH notes AS (
        DELETE FROM wl_day_notes RETURNING *
    ), agents AS (
        INSERT INTO wl_daily_agents
        SELECT DISTINCT n.day, s.domain, n.agent_id
        FROM (SELECT day, domain, agent_id FROM notes WHERE agent_id IS NOT NULL
              UNION ALL
              SELECT day, domain, agent_id FROM wl_running_agents_today) AS n
        CROSS JOIN LATERAL (VALUES (n.domain), ('(all)')) AS s (domain)
        ORDER BY 1, 2, 3
        ON CONFLICT ON CONSTRAINT daily_agents_key DO NOTHING
        RETURNING day, domain
    )
    INSERT INTO wl_daily_tallies AS t (day, domain, verified, split, failed, abandoned,
                                       superseded, cost_cents, estimated_cents, agents)
    SELECT day, domain, sum(verified), sum(split), sum(failed), sum(abandoned),
           sum(superseded), sum(cost_cents), sum(estimated_cents), sum(agents)
    FROM (SELECT day, domain, count(*) FILTER (WHERE outcome = 'verified') AS verified,
                 count(*) FILTER (WHERE outcome = 'split') AS split,
                 count(*) FILTER (WHERE outcome = 'failed') AS failed,
                 count(*) FILTER (WHERE outcome = 'abandoned') AS abandoned,
                 count(*) FILTER (WHERE outcome = 'superseded') AS superseded,
                 sum(cost_cents) AS cost_cents, sum(estimated_cents) AS estimated_cents,
                 0 AS agents
          FROM notes GROUP BY day, domain
          UNION ALL
          SELECT day, domain, 0, 0, 0, 0, 0, 0, 0, count(*) FROM agents GROUP BY day, domain) AS x
    GROUP BY day, domain
    ORDER BY day, domain
    ON CONFLICT ON CONSTRAINT daily_tallies_key DO UPDATE
    SET verified = t.verified + excluded.verified, split = t.split + excluded.split,
        failed = t.failed + excluded.failed, abandoned = t.abandoned + excluded.abandoned,
        superseded = t.superseded + excluded.superseded,
        cost_cents = t.cost_cents + excluded.cost_cents,
        estimated_cents = t.estimated_cents + excluded.estimated_cents,
        agents = t.agents + excluded.agents;
    DELETE FROM wl_disposed_links WHERE units = 0;
    IF left_keys IS NOT NULL THEN
        UPDATE wl_unit_tallies AS t
        SET first_disposed_at = w.first_disposed_at, last_disposed_at = w.last_disposed_at
        FROM (SELECT k.domain, k.state, k.disposition,
                     min(u.disposed_at) AS first_disposed_at, max(u.disposed_at) AS last_disposed_at
              FROM wl_unit_tallies AS k
              LEFT JOIN work_units AS u
                     ON (u.domain, u.state) = (k.domain, k.state)
                    AND u.disposition IS NOT DISTINCT FROM k.disposition
              WHERE format('%s/%s/%s', k.domain, k.state, k.disposition) = ANY (left_keys)
              GROUP BY k.domain, k.state, k.disposition) AS w
        WHERE (t.domain, t.state) = (w.domain, w.state)
          AND t.disposition IS NOT DISTINCT FROM w.disposition;
    END IF;
    RETURN folded;
END $$;


-- A unit moved to another domain (a raw edit: no write path does it) takes its attempts,
-- costs and agents along, which notes kept under the old domain cannot follow (an agent is
-- counted once per day and domain: no delta says whether it still held another unit
-- there). So such a row recounts the two domains' days from the tables, in its own
-- transaction: their attempts, costs and agents (the notes of the two domains are in that
-- count, so they go). Disposals and peaks come from the change rows, which follow a move.
-- The fold's lock, so no fold adds those notes meanwhile.
CREATE FUNCTION wl_recount_daily_domains() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    domains text[] := ARRAY[OLD.domain, NEW.domain];
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('wl_fold_read_summaries'));
    -- The notes' agents still count in '(all)', which a move does not change.
    WITH gone AS (
        DELETE FROM wl_day_notes WHERE domain = ANY (domains) RETURNING *
    ), added AS (
        INSERT INTO wl_daily_agents
        SELECT DISTINCT day, '(all)', agent_id FROM gone WHERE agent_id IS NOT NULL
        ON CONFLICT ON CONSTRAINT daily_agents_key DO NOTHING
        RETURNING day
    )
    INSERT INTO wl_daily_tallies AS t (day, domain, agents)
    SELECT day, '(all)', count(*) FROM added GROUP BY day
    ON CONFLICT ON CONSTRAINT daily_tallies_key DO UPDATE SET agents = t.agents + excluded.agents;
    DELETE FROM wl_daily_agents WHERE domain = ANY (domains);
    INSERT INTO wl_daily_agents
    SELECT DISTINCT d::date, u.domain, a.agent_id
    FROM work_unit_attempts AS a
    JOIN work_units AS u ON u.id = a.unit_id
    CROSS JOIN generate_series(wl_utc_day(a.started_at)::timestamp,
                               wl_utc_day(coalesce(a.ended_at, now()))::timestamp,
                               interval '1 day') AS d
    WHERE u.domain = ANY (domains);
    UPDATE wl_daily_tallies
    SET verified = 0, split = 0, failed = 0, abandoned = 0, superseded = 0, cost_cents = 0,
        estimated_cents = 0, agents = 0
    WHERE domain = ANY (domains);
    INSERT INTO wl_daily_tallies AS t (day, domain, verified, split, failed, abandoned,
                                       superseded, cost_cents, estimated_cents, agents)
    SELECT day, domain, verified, split, failed, abandoned, superseded, cost_cents,
           estimated_cents, agents
    FROM wl_daily_scan(domains) WHERE domain <> '(all)'
    ON CONFLICT ON CONSTRAINT daily_tallies_key DO UPDATE
    SET verified = excluded.verified, split = excluded.split, failed = excluded.failed,
        abandoned = excluded.abandoned, superseded = excluded.superseded,
        cost_cents = excluded.cost_cents, estimated_cents = excluded.estimated_cents,
        agents = excluded.agents;
    RETURN NULL;
END $$;
CREATE TRIGGER read_summaries_recount_daily_on_move
    AFTER UPDATE OF domain ON work_units
    FOR EACH ROW WHEN (OLD.domain IS DISTINCT FROM NEW.domain)
    EXECUTE FUNCTION wl_recount_daily_domains();

-- 0021's rebuild, recounting the course's days too. Peaks are not in the tables: the days
-- already counted keep theirs, the others stay null (a bulk load's days).
CREATE OR REPLACE FUNCTION wl_rebuild_read_summaries() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE work_units, work_unit_attempts IN SHARE MODE;
    PERFORM pg_advisory_xact_lock(hashtext('wl_fold_read_summaries'));
    TRUNCATE wl_unit_changes, wl_unit_ranks;
    PERFORM wl_rebuild_read_summaries_0014();
    INSERT INTO wl_unit_ranks
    SELECT id, domain, external_ref, cost_cents, attempt_count FROM work_units
    WHERE cost_cents > 0 OR attempt_count > 1;
    TRUNCATE wl_day_notes, wl_daily_agents;
    DELETE FROM wl_daily_tallies WHERE peak_live IS NULL;
    UPDATE wl_daily_tallies
    SET migrated = 0, dropped = 0, deferred = 0, dead = 0, verified = 0, split = 0, failed = 0,
        abandoned = 0, superseded = 0, cost_cents = 0, estimated_cents = 0, agents = 0;
    INSERT INTO wl_daily_agents
    SELECT DISTINCT d::date, s.domain, a.agent_id
    FROM work_unit_attempts AS a
    JOIN work_units AS u ON u.id = a.unit_id
    CROSS JOIN generate_series(wl_utc_day(a.started_at)::timestamp,
                               wl_utc_day(coalesce(a.ended_at, now()))::timestamp,
                               interval '1 day') AS d
    CROSS JOIN LATERAL (VALUES (u.domain), ('(all)')) AS s (domain);
    INSERT INTO wl_daily_tallies AS t
    SELECT day, domain, migrated, dropped, deferred, dead, verified, split, failed, abandoned,
           superseded, cost_cents, estimated_cents, agents, NULL
    FROM wl_daily_scan()
    ON CONFLICT ON CONSTRAINT daily_tallies_key DO UPDATE
    SET migrated = excluded.migrated, dropped = excluded.dropped, deferred = excluded.deferred,
        dead = excluded.dead, verified = excluded.verified, split = excluded.split,
        failed = excluded.failed, abandoned = excluded.abandoned,
        superseded = excluded.superseded, cost_cents = excluded.cost_cents,
        estimated_cents = excluded.estimated_cents, agents = excluded.agents;
    ANALYZE wl_unit_ranks, wl_unit_changes, wl_daily_tallies, wl_daily_agents, wl_day_notes;
END $$;

-- 0017's audit of the summaries, with the course's days.
CREATE OR REPLACE FUNCTION wl_read_summary_drift()
    RETURNS TABLE (summary text, key text, kept text, actual text)
    LANGUAGE sql STABLE AS $$
    SELECT * FROM wl_read_summary_drift_0017()
    UNION ALL
    SELECT * FROM wl_read_summary_drift_0014() WHERE summary = 'wl_model_tallies'
    UNION ALL
    SELECT * FROM wl_unit_ranks_drift()
    UNION ALL
    SELECT * FROM wl_daily_drift()
$$;

-- v_daily: per UTC day and domain, and '(all)' (the domains' sums; its agents and peak
-- are its own: an agent in two domains is one agent, and peaks do not add).
CREATE VIEW v_daily WITH (security_barrier) AS
WITH per AS (
    SELECT day, domain, sum(migrated) AS migrated, sum(dropped) AS dropped,
           sum(deferred) AS deferred, sum(dead) AS dead, sum(verified) AS verified,
           sum(split) AS split, sum(failed) AS failed, sum(abandoned) AS abandoned,
           sum(superseded) AS superseded, sum(cost_cents) AS cost_cents,
           sum(estimated_cents) AS estimated_cents, sum(agents) AS agents,
           max(peak_live) AS peak_live
    FROM wl_daily_tallies_now GROUP BY day, domain
), scoped AS (
    SELECT * FROM per WHERE domain <> '(all)'
    UNION ALL
    SELECT day, '(all)', sum(migrated) FILTER (WHERE domain <> '(all)'),
           sum(dropped) FILTER (WHERE domain <> '(all)'),
           sum(deferred) FILTER (WHERE domain <> '(all)'),
           sum(dead) FILTER (WHERE domain <> '(all)'),
           sum(verified) FILTER (WHERE domain <> '(all)'),
           sum(split) FILTER (WHERE domain <> '(all)'),
           sum(failed) FILTER (WHERE domain <> '(all)'),
           sum(abandoned) FILTER (WHERE domain <> '(all)'),
           sum(superseded) FILTER (WHERE domain <> '(all)'),
           sum(cost_cents) FILTER (WHERE domain <> '(all)'),
           sum(estimated_cents) FILTER (WHERE domain <> '(all)'),
           sum(agents) FILTER (WHERE domain = '(all)'),
           max(peak_live) FILTER (WHERE domain = '(all)')
    FROM per GROUP BY day
)
SELECT day, domain,
       coalesce(migrated, 0)::bigint AS migrated, coalesce(dropped, 0)::bigint AS dropped,
       coalesce(deferred, 0)::bigint AS deferred, coalesce(dead, 0)::bigint AS dead,
       coalesce(migrated + dropped + deferred + dead, 0)::bigint AS disposed,
       coalesce(verified, 0)::bigint AS verified, coalesce(split, 0)::bigint AS split,
       coalesce(failed, 0)::bigint AS failed, coalesce(abandoned, 0)::bigint AS abandoned,
       coalesce(superseded, 0)::bigint AS superseded,
       coalesce(cost_cents, 0)::bigint AS cost_cents,
       coalesce(estimated_cents, 0)::bigint AS estimated_cents,
       coalesce(agents, 0)::bigint AS agents, peak_live::bigint AS peak_live
FROM scoped;
COMMENT ON VIEW v_daily IS
    'Per UTC day and domain (and ''(all)''): units disposed by disposition, attempts ended by '
    'outcome, cost recorded that day (cents, and the estimated part), agents that held a '
    'unit, peak live units (null for a day no change was counted on, as after a rebuild). '
    'Kept summaries, exact whenever read.';

-- v_forecast: per domain and '(all)', at the pace of the 28 UTC days before today (zero
-- days counted; history from the scope's first disposal; fewer than 7 days: nulls).
CREATE VIEW v_forecast WITH (security_barrier) AS
WITH today AS (
    SELECT wl_utc_day(now()) AS d
), per_domain AS (
    SELECT domain, sum(units) FILTER (WHERE state NOT IN ('done', 'abandoned')) AS open_units,
           min(first_disposed_at) AS first_disposed_at
    FROM wl_unit_tallies_now GROUP BY domain HAVING sum(units) <> 0
), scopes AS (
    SELECT domain, coalesce(open_units, 0)::bigint AS open_units,
           wl_utc_day(first_disposed_at) AS first_day
    FROM per_domain
    UNION ALL
    SELECT '(all)', coalesce(sum(open_units), 0)::bigint, wl_utc_day(min(first_disposed_at))
    FROM per_domain
), window_days AS (
    -- The kept days of the window only: a range of the key.
    SELECT t.day, t.domain, sum(t.migrated + t.dropped + t.deferred + t.dead) AS disposed,
           sum(t.cost_cents) AS cost_cents
    FROM wl_daily_tallies_now AS t, today
    WHERE t.day >= today.d - 28 AND t.day < today.d AND t.domain <> '(all)'
    GROUP BY t.day, t.domain
), windowed AS (
    SELECT day, domain, disposed, cost_cents FROM window_days
    UNION ALL
    SELECT day, '(all)', sum(disposed), sum(cost_cents) FROM window_days GROUP BY day
), series AS (
    SELECT s.domain, g.day::date AS day, coalesce(w.disposed, 0) AS disposed,
           coalesce(w.cost_cents, 0) AS cost_cents
    FROM scopes AS s
    CROSS JOIN today
    CROSS JOIN LATERAL generate_series(greatest(today.d - 28, s.first_day)::timestamp,
                                       (today.d - 1)::timestamp, interval '1 day') AS g (day)
    LEFT JOIN windowed AS w ON (w.domain, w.day) = (s.domain, g.day::date)
), stats AS (
    SELECT domain, count(*) AS history_days,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY disposed) AS p50,
           percentile_cont(0.15) WITHIN GROUP (ORDER BY disposed) AS p15,
           sum(disposed) AS disposed, sum(cost_cents) AS cost_cents,
           sum(disposed) FILTER (WHERE day >= (SELECT d FROM today) - 7) AS disposed_7d
    FROM series GROUP BY domain
), figures AS (
    SELECT s.domain, s.open_units, s.first_day, (SELECT d FROM today) AS today,
           coalesce(x.history_days, 0) AS history_days,
           coalesce(x.disposed_7d, 0) AS disposed_7d, coalesce(x.disposed, 0) AS disposed_28d,
           coalesce(x.cost_cents, 0) AS cost_28d, x.p50, x.p15,
           coalesce(x.history_days, 0) >= 7 AS enough
    FROM scopes AS s LEFT JOIN stats AS x USING (domain)
), days AS (
    SELECT f.*,
           CASE WHEN enough AND p50 > 0 THEN ceil(open_units / p50)::integer END AS days_p50,
           CASE WHEN enough AND p15 > 0 THEN ceil(open_units / p15)::integer END AS days_p85
    FROM figures AS f
)
SELECT domain, open_units,
       round(disposed_7d / 7.0, 2) AS disposed_per_day_7d,
       round(disposed_28d / 28.0, 2) AS disposed_per_day_28d,
       disposed_7d::bigint AS disposed_7d, disposed_28d::bigint AS disposed_28d,
       cost_28d::bigint AS cost_28d_cents, history_days::integer AS history_days,
       CASE WHEN enough THEN p50 END AS p50_per_day,
       CASE WHEN enough THEN p15 END AS p15_per_day,
       days_p50, days_p85,
       today + days_p50 AS date_p50, today + days_p85 AS date_p85,
       CASE WHEN enough AND disposed_28d > 0
            THEN ceil(open_units * cost_28d::numeric / disposed_28d)::bigint END
           AS spend_p50_cents,
       CASE
           WHEN first_day IS NULL THEN
               'no unit disposed yet: the forecast needs 7 days of history from the first disposal'
           WHEN NOT enough THEN
               format('%s of 7 days of history since the first disposal on %s: %s more needed',
                      history_days, first_day, 7 - history_days)
           WHEN p50 = 0 THEN
               format('the median day of the last %s disposed nothing: no date at this pace',
                      history_days)
           WHEN p15 = 0 THEN
               format('the 15th percentile day of the last %s disposed nothing: no P85 date',
                      history_days)
           WHEN history_days < 28 THEN
               format('the %s days since the first disposal on %s', history_days, first_day)
           ELSE 'the last 28 days'
       END AS basis
FROM days;
COMMENT ON VIEW v_forecast IS
    'Per domain and ''(all)'': open units and when they are done at the pace of the 28 UTC '
    'days before today (days with no disposal count as 0; history from the scope''s first '
    'disposal; fewer than 7 days: nulls, and basis says why). days_p50 = ceil(open / median '
    'daily disposals), days_p85 = ceil(open / 15th percentile), percentile_cont; '
    'spend_p50_cents = ceil(open x the window''s cost / its disposed units).';

-- The reader role reads the new views too: 0017's wl_grant_reader with them, and every
-- role already made by it, now.
CREATE OR REPLACE FUNCTION wl_grant_reader(role_name text, password_verifier text)
    RETURNS text[] LANGUAGE plpgsql AS $$
BEGIN
    RETURN wl_grant_reader_0013(role_name, password_verifier)
           || wl_grant_views(role_name, ARRAY['v_costliest_units', 'v_most_attempted_units',
                                             'v_changed_units', 'v_open_questions',
                                             'v_held_back', 'v_controls', 'v_daily',
                                             'v_forecast']);
END $$;

DO $$
DECLARE
    reader text;
BEGIN
    FOR reader IN
        SELECT DISTINCT r.rolname
        FROM pg_class AS c
        CROSS JOIN LATERAL aclexplode(c.relacl) AS acl
        JOIN pg_roles AS r ON r.oid = acl.grantee
        WHERE c.oid = 'v_queue_depth'::regclass AND acl.privilege_type = 'SELECT'
          AND acl.grantee <> c.relowner
    LOOP
        PERFORM wl_grant_views(reader, ARRAY['v_daily', 'v_forecast']);
    END LOOP;
END $$;

SELECT wl_rebuild_read_summaries();
