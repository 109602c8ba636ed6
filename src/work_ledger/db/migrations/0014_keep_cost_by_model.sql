-- v_cost_by_model from a tally kept by trigger (issue 32), as 0012 keeps the others: a
-- year's cost records (one or more per attempt: millions) are no longer summed and joined
-- to their units on every read. Cost records are append-only (cost_records_append_only),
-- so a record only ever adds to its key; a unit whose fleet or domain is edited moves its
-- records' sums with it. Token sums stay null where every record left them null, as the
-- full scan's sum() does: each class keeps how many records carried it.

CREATE TABLE wl_model_tallies (
    fleet              text NOT NULL,
    domain             text NOT NULL,
    model              text,
    stripe             smallint NOT NULL,
    cost_cents         bigint NOT NULL,
    estimated_cents    bigint NOT NULL,
    estimated_records  bigint NOT NULL,
    input_tokens       bigint NOT NULL,
    input_records      bigint NOT NULL,
    output_tokens      bigint NOT NULL,
    output_records     bigint NOT NULL,
    cache_read_tokens  bigint NOT NULL,
    cache_read_records bigint NOT NULL,
    cache_write_tokens bigint NOT NULL,
    cache_write_records bigint NOT NULL,
    records            bigint NOT NULL,
    units              bigint NOT NULL,
    CONSTRAINT model_tallies_key UNIQUE NULLS NOT DISTINCT (fleet, domain, model, stripe)
);
-- Which units have a record of each model, per fleet and domain: a unit counts once.
CREATE TABLE wl_model_units (
    fleet   text NOT NULL,
    domain  text NOT NULL,
    model   text,
    unit_id uuid NOT NULL,
    CONSTRAINT model_units_key UNIQUE NULLS NOT DISTINCT (fleet, domain, model, unit_id)
);
CREATE INDEX wl_model_units_unit_idx ON wl_model_units (unit_id);

-- The records of the given units (all units: null), summed per fleet, domain and model.
CREATE FUNCTION wl_model_sums(units uuid[])
    RETURNS TABLE (fleet text, domain text, model text, cost_cents bigint,
                   estimated_cents bigint, estimated_records bigint, input_tokens bigint,
                   input_records bigint, output_tokens bigint, output_records bigint,
                   cache_read_tokens bigint, cache_read_records bigint,
                   cache_write_tokens bigint, cache_write_records bigint, records bigint,
                   units bigint)
    LANGUAGE sql STABLE AS $$
    SELECT u.fleet, u.domain, r.model, sum(r.cost_cents)::bigint,
           coalesce(sum(r.cost_cents) FILTER (WHERE r.estimated), 0)::bigint,
           count(*) FILTER (WHERE r.estimated),
           coalesce(sum(r.input_tokens), 0)::bigint, count(r.input_tokens),
           coalesce(sum(r.output_tokens), 0)::bigint, count(r.output_tokens),
           coalesce(sum(r.cache_read_tokens), 0)::bigint, count(r.cache_read_tokens),
           coalesce(sum(r.cache_write_tokens), 0)::bigint, count(r.cache_write_tokens),
           count(*), count(DISTINCT r.unit_id)
    FROM cost_records AS r JOIN work_units AS u ON u.id = r.unit_id
    WHERE units IS NULL OR r.unit_id = ANY (units)
    GROUP BY u.fleet, u.domain, r.model
$$;

CREATE FUNCTION wl_tally_cost_record() RETURNS trigger LANGUAGE plpgsql AS $$
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
    RETURN NULL;
END $$;
CREATE TRIGGER cost_by_model_on_record
    AFTER INSERT ON cost_records
    FOR EACH ROW EXECUTE FUNCTION wl_tally_cost_record();

-- A unit moved to another fleet or domain (raw SQL: no write path does it) takes its
-- records' sums out of the old key (negated into this backend's stripe) and into the new.
CREATE FUNCTION wl_move_unit_costs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wl_model_tallies AS t
    SELECT k.fleet, k.domain, s.model, wl_tally_stripe(16),
           k.sign * s.cost_cents, k.sign * s.estimated_cents, k.sign * s.estimated_records,
           k.sign * s.input_tokens, k.sign * s.input_records, k.sign * s.output_tokens,
           k.sign * s.output_records, k.sign * s.cache_read_tokens,
           k.sign * s.cache_read_records, k.sign * s.cache_write_tokens,
           k.sign * s.cache_write_records, k.sign * s.records, k.sign * s.units
    FROM wl_model_sums(ARRAY[NEW.id]) AS s
    CROSS JOIN (VALUES (OLD.fleet, OLD.domain, -1), (NEW.fleet, NEW.domain, 1))
        AS k (fleet, domain, sign)
    ORDER BY k.fleet, k.domain, s.model
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
    UPDATE wl_model_units SET fleet = NEW.fleet, domain = NEW.domain WHERE unit_id = NEW.id;
    RETURN NULL;
END $$;
CREATE TRIGGER cost_by_model_on_unit_move
    AFTER UPDATE OF fleet, domain ON work_units
    FOR EACH ROW WHEN ((OLD.fleet, OLD.domain) IS DISTINCT FROM (NEW.fleet, NEW.domain))
    EXECUTE FUNCTION wl_move_unit_costs();

CREATE OR REPLACE VIEW v_cost_by_model WITH (security_barrier) AS
SELECT fleet, domain, model,
       sum(cost_cents)::bigint AS cost_cents,
       CASE WHEN sum(estimated_records) > 0 THEN sum(estimated_cents)::bigint END
           AS estimated_cents,
       CASE WHEN sum(input_records) > 0 THEN sum(input_tokens)::bigint END AS input_tokens,
       CASE WHEN sum(output_records) > 0 THEN sum(output_tokens)::bigint END AS output_tokens,
       CASE WHEN sum(cache_read_records) > 0 THEN sum(cache_read_tokens)::bigint END
           AS cache_read_tokens,
       CASE WHEN sum(cache_write_records) > 0 THEN sum(cache_write_tokens)::bigint END
           AS cache_write_tokens,
       sum(units)::bigint AS units,
       sum(records)::bigint AS records
FROM wl_model_tallies
GROUP BY fleet, domain, model
HAVING sum(records) <> 0
ORDER BY fleet, domain, model NULLS FIRST;
COMMENT ON VIEW v_cost_by_model IS
    'Cost records summed per fleet, domain and model (null: recorded without one): cents, '
    'the estimated part of them, each token class, and how many units and records. Read '
    'from wl_model_tallies, kept by trigger as each record is written.';

-- The rebuild and the audit cover the model tallies too (wrapping 0012's).
ALTER FUNCTION wl_rebuild_read_summaries() RENAME TO wl_rebuild_read_summaries_0012;
CREATE FUNCTION wl_rebuild_read_summaries() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM wl_rebuild_read_summaries_0012();
    LOCK TABLE cost_records IN SHARE MODE;
    TRUNCATE wl_model_tallies, wl_model_units;
    INSERT INTO wl_model_tallies
    SELECT fleet, domain, model, 0, cost_cents, estimated_cents, estimated_records,
           input_tokens, input_records, output_tokens, output_records, cache_read_tokens,
           cache_read_records, cache_write_tokens, cache_write_records, records, units
    FROM wl_model_sums(NULL);
    INSERT INTO wl_model_units
    SELECT DISTINCT u.fleet, u.domain, r.model, r.unit_id
    FROM cost_records AS r JOIN work_units AS u ON u.id = r.unit_id;
    ANALYZE wl_model_tallies, wl_model_units;
END $$;
REVOKE EXECUTE ON FUNCTION wl_rebuild_read_summaries() FROM PUBLIC;

ALTER FUNCTION wl_read_summary_drift() RENAME TO wl_read_summary_drift_0012;
CREATE FUNCTION wl_read_summary_drift()
    RETURNS TABLE (summary text, key text, kept text, actual text)
    LANGUAGE sql STABLE AS $$
    SELECT * FROM wl_read_summary_drift_0012()
    UNION ALL
    SELECT 'wl_model_tallies', format('%s/%s/%s', coalesce(k.fleet, a.fleet),
                                      coalesce(k.domain, a.domain), coalesce(k.model, a.model)),
           k.sums::text, a.sums::text
    FROM (SELECT fleet, domain, model,
                 ARRAY[sum(cost_cents), sum(estimated_cents), sum(estimated_records),
                       sum(input_tokens), sum(input_records), sum(output_tokens),
                       sum(output_records), sum(cache_read_tokens), sum(cache_read_records),
                       sum(cache_write_tokens), sum(cache_write_records), sum(records),
                       sum(units)]::bigint[] AS sums
          FROM wl_model_tallies GROUP BY fleet, domain, model
          HAVING sum(records) <> 0 OR sum(cost_cents) <> 0) AS k
    FULL JOIN (SELECT fleet, domain, model,
                      ARRAY[cost_cents, estimated_cents, estimated_records, input_tokens,
                            input_records, output_tokens, output_records, cache_read_tokens,
                            cache_read_records, cache_write_tokens, cache_write_records,
                            records, units] AS sums
               FROM wl_model_sums(NULL)) AS a
           ON (a.fleet, a.domain) = (k.fleet, k.domain) AND a.model IS NOT DISTINCT FROM k.model
    WHERE k.sums IS DISTINCT FROM a.sums
$$;
REVOKE EXECUTE ON FUNCTION wl_read_summary_drift() FROM PUBLIC;

SELECT wl_rebuild_read_summaries();
