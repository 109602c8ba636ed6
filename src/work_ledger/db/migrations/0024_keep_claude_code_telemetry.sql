-- Live cost from Claude Code's OpenTelemetry events (issue 40, DESIGN §13). Each
-- `claude_code.api_request` record counts once (telemetry_records: its identity per attempt),
-- and an attempt's estimated spend per model is the larger of what telemetry reported and
-- what the session's final result said (attempt_model_spend): the two sources overlap, and
-- whichever arrives second records only what it adds above the first. Never twice.

CREATE TABLE telemetry_records (
    attempt_id         uuid NOT NULL REFERENCES work_unit_attempts (id),
    -- session.id and event.sequence, or request_id: what makes a replayed batch add nothing.
    record_key         text NOT NULL,
    model              text NOT NULL,
    cost_usd           numeric NOT NULL,
    input_tokens       bigint NOT NULL,
    output_tokens      bigint NOT NULL,
    cache_read_tokens  bigint NOT NULL,
    cache_write_tokens bigint NOT NULL,
    received_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT telemetry_record_once PRIMARY KEY (attempt_id, record_key),
    CONSTRAINT telemetry_record_not_negative CHECK (
        cost_usd >= 0 AND input_tokens >= 0 AND output_tokens >= 0
        AND cache_read_tokens >= 0 AND cache_write_tokens >= 0),
    CONSTRAINT telemetry_record_bounded CHECK (
        length(record_key) >= 1 AND length(record_key) <= 300
        AND length(model) >= 1 AND length(model) <= 128)
);
CREATE TRIGGER telemetry_records_append_only BEFORE UPDATE OR DELETE ON telemetry_records
    FOR EACH ROW EXECUTE FUNCTION wl_refuse_rewrite('telemetry_records_append_only');
CREATE TRIGGER telemetry_records_append_only_truncate BEFORE TRUNCATE ON telemetry_records
    FOR EACH STATEMENT EXECUTE FUNCTION wl_refuse_rewrite('telemetry_records_append_only');

-- Per attempt and model (without a bracketed suffix): telemetry's sums, the final result's
-- figures, what the ledger recorded (the larger of the two, cents as ceil of the decimal
-- dollars), and the last change's delta, which the writer turns into one cost record.
CREATE TABLE attempt_model_spend (
    attempt_id                   uuid NOT NULL REFERENCES work_unit_attempts (id),
    model                        text NOT NULL,
    telemetry_usd                numeric NOT NULL DEFAULT 0,
    telemetry_input_tokens       bigint NOT NULL DEFAULT 0,
    telemetry_output_tokens      bigint NOT NULL DEFAULT 0,
    telemetry_cache_read_tokens  bigint NOT NULL DEFAULT 0,
    telemetry_cache_write_tokens bigint NOT NULL DEFAULT 0,
    result_cents                 bigint NOT NULL DEFAULT 0,
    result_input_tokens          bigint NOT NULL DEFAULT 0,
    result_output_tokens         bigint NOT NULL DEFAULT 0,
    result_cache_read_tokens     bigint NOT NULL DEFAULT 0,
    result_cache_write_tokens    bigint NOT NULL DEFAULT 0,
    recorded_cents               bigint NOT NULL DEFAULT 0,
    recorded_input_tokens        bigint NOT NULL DEFAULT 0,
    recorded_output_tokens       bigint NOT NULL DEFAULT 0,
    recorded_cache_read_tokens   bigint NOT NULL DEFAULT 0,
    recorded_cache_write_tokens  bigint NOT NULL DEFAULT 0,
    delta_cents                  bigint NOT NULL DEFAULT 0,
    delta_input_tokens           bigint NOT NULL DEFAULT 0,
    delta_output_tokens          bigint NOT NULL DEFAULT 0,
    delta_cache_read_tokens      bigint NOT NULL DEFAULT 0,
    delta_cache_write_tokens     bigint NOT NULL DEFAULT 0,
    CONSTRAINT attempt_model_spend_key PRIMARY KEY (attempt_id, model),
    CONSTRAINT attempt_model_spend_recorded_is_the_larger CHECK (
        recorded_cents = greatest(ceil(telemetry_usd * 100), result_cents)
        AND recorded_input_tokens = greatest(telemetry_input_tokens, result_input_tokens)
        AND recorded_output_tokens = greatest(telemetry_output_tokens, result_output_tokens)
        AND recorded_cache_read_tokens
            = greatest(telemetry_cache_read_tokens, result_cache_read_tokens)
        AND recorded_cache_write_tokens
            = greatest(telemetry_cache_write_tokens, result_cache_write_tokens)),
    -- What was recorded never shrinks: spent money is not taken back.
    CONSTRAINT attempt_model_spend_delta_not_negative CHECK (
        delta_cents >= 0 AND delta_input_tokens >= 0 AND delta_output_tokens >= 0
        AND delta_cache_read_tokens >= 0 AND delta_cache_write_tokens >= 0)
);

-- The recorded figures and the delta follow from the sources on every write, so a writer
-- only adds to telemetry's sums or sets the result's figures.
CREATE FUNCTION wl_settle_model_spend() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.recorded_cents := greatest(ceil(NEW.telemetry_usd * 100), NEW.result_cents);
    NEW.recorded_input_tokens := greatest(NEW.telemetry_input_tokens, NEW.result_input_tokens);
    NEW.recorded_output_tokens := greatest(NEW.telemetry_output_tokens, NEW.result_output_tokens);
    NEW.recorded_cache_read_tokens :=
        greatest(NEW.telemetry_cache_read_tokens, NEW.result_cache_read_tokens);
    NEW.recorded_cache_write_tokens :=
        greatest(NEW.telemetry_cache_write_tokens, NEW.result_cache_write_tokens);
    IF TG_OP = 'INSERT' THEN
        NEW.delta_cents := NEW.recorded_cents;
        NEW.delta_input_tokens := NEW.recorded_input_tokens;
        NEW.delta_output_tokens := NEW.recorded_output_tokens;
        NEW.delta_cache_read_tokens := NEW.recorded_cache_read_tokens;
        NEW.delta_cache_write_tokens := NEW.recorded_cache_write_tokens;
    ELSE
        NEW.delta_cents := NEW.recorded_cents - OLD.recorded_cents;
        NEW.delta_input_tokens := NEW.recorded_input_tokens - OLD.recorded_input_tokens;
        NEW.delta_output_tokens := NEW.recorded_output_tokens - OLD.recorded_output_tokens;
        NEW.delta_cache_read_tokens :=
            NEW.recorded_cache_read_tokens - OLD.recorded_cache_read_tokens;
        NEW.delta_cache_write_tokens :=
            NEW.recorded_cache_write_tokens - OLD.recorded_cache_write_tokens;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER attempt_model_spend_settled
    BEFORE INSERT OR UPDATE ON attempt_model_spend
    FOR EACH ROW EXECUTE FUNCTION wl_settle_model_spend();
