-- The ledger: 4 tables, 5 enums, and every invariant of DESIGN §3, enforced here so that
-- neither a bug in Python nor a human with psql can corrupt it. Every constraint and
-- trigger has a stable name: the API repeats it as the `invariant` of a refusal.

CREATE TYPE work_state AS ENUM
    ('ready', 'claimed', 'in_progress', 'blocked', 'verified', 'done', 'abandoned');
CREATE TYPE work_disposition AS ENUM ('MIGRATED', 'DROPPED', 'DEFERRED', 'DEAD');
CREATE TYPE attempt_outcome AS ENUM ('verified', 'blocked', 'failed', 'abandoned', 'superseded');
CREATE TYPE work_event_type AS ENUM (
    'registered', 'claimed', 'heartbeat', 'transitioned', 'blocked', 'unblocked',
    'cost_recorded', 'disposed', 'released', 'stale_reclaimed', 'projected');
CREATE TYPE question_status AS ENUM ('open', 'answered', 'cancelled');

-- Evidence is a link to where the proof lives, never the proof itself.
CREATE FUNCTION wl_is_evidence_link(url text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN coalesce(url ~ '^https?://[^[:space:]/?#]+[^[:space:]]*$' AND length(url) <= 2048, false);

CREATE FUNCTION wl_are_evidence_links(urls text[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (SELECT coalesce(bool_and(wl_is_evidence_link(u)), true) FROM unnest(urls) AS u);

-- created_at is the clock, not the transaction start, so that a batch keeps its order
-- in the ready queue (pull-next serves the oldest first).
CREATE TABLE work_units (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    external_ref      text NOT NULL,
    fleet             text NOT NULL,
    domain            text NOT NULL DEFAULT 'default',
    state             work_state NOT NULL DEFAULT 'ready',
    disposition       work_disposition,
    disposed_at       timestamptz,
    workflow_id       text,
    claimed_by        text,
    lease_expires_at  timestamptz,
    last_heartbeat_at timestamptz,
    attempt_count     integer NOT NULL DEFAULT 0,
    cost_cents        bigint NOT NULL DEFAULT 0,
    evidence_urls     text[] NOT NULL DEFAULT '{}',
    CONSTRAINT unit_external_ref_unique UNIQUE (external_ref),
    CONSTRAINT unit_workflow_id_unique UNIQUE (workflow_id),
    CONSTRAINT unit_external_ref_bounded CHECK (length(external_ref) BETWEEN 1 AND 256),
    CONSTRAINT unit_fleet_bounded CHECK (length(fleet) BETWEEN 1 AND 256),
    CONSTRAINT unit_domain_bounded CHECK (length(domain) BETWEEN 1 AND 256),
    CONSTRAINT unit_disposition_matches_state CHECK (
        CASE state
            WHEN 'done' THEN disposition IS NOT DISTINCT FROM 'MIGRATED'
            -- IS NOT NULL: a NULL disposition would make IN yield NULL, which a CHECK passes.
            WHEN 'abandoned' THEN disposition IS NOT NULL AND disposition IN ('DROPPED', 'DEFERRED', 'DEAD')
            ELSE disposition IS NULL
        END),
    CONSTRAINT unit_disposed_at_iff_disposition CHECK ((disposition IS NULL) = (disposed_at IS NULL)),
    CONSTRAINT unit_holder_iff_held CHECK (
        (claimed_by IS NOT NULL) = (state IN ('claimed', 'in_progress', 'blocked'))),
    CONSTRAINT unit_lease_iff_leased CHECK (
        (lease_expires_at IS NOT NULL) = (state IN ('claimed', 'in_progress'))),
    CONSTRAINT unit_attempt_count_not_negative CHECK (attempt_count >= 0),
    CONSTRAINT unit_cost_not_negative CHECK (cost_cents >= 0),
    CONSTRAINT unit_evidence_is_link CHECK (wl_are_evidence_links(evidence_urls))
);

-- Pull-next scans ready units oldest first; stale reclaim scans leases by expiry.
CREATE INDEX work_units_ready_idx ON work_units (created_at, id) WHERE state = 'ready';
CREATE INDEX work_units_ready_domain_idx ON work_units (domain, created_at, id)
    WHERE state = 'ready';
CREATE INDEX work_units_leased_idx ON work_units (lease_expires_at)
    WHERE state IN ('claimed', 'in_progress');
CREATE INDEX work_units_disposition_idx ON work_units (disposition);
CREATE INDEX work_units_keyset_idx ON work_units (created_at, id);
-- One agent holds at most one live claim.
CREATE UNIQUE INDEX one_live_claim_per_agent ON work_units (claimed_by)
    WHERE state IN ('claimed', 'in_progress');

CREATE TABLE work_unit_attempts (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    unit_id     uuid NOT NULL REFERENCES work_units (id),
    attempt_no  integer NOT NULL,
    agent_id    text NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    outcome     attempt_outcome,
    cost_cents  bigint NOT NULL DEFAULT 0,
    evidence_url text,
    ended_at    timestamptz,
    CONSTRAINT attempt_no_unique_per_unit UNIQUE (unit_id, attempt_no),
    CONSTRAINT attempt_no_positive CHECK (attempt_no >= 1),
    CONSTRAINT attempt_outcome_iff_ended CHECK ((outcome IS NULL) = (ended_at IS NULL)),
    CONSTRAINT attempt_cost_not_negative CHECK (cost_cents >= 0),
    CONSTRAINT attempt_evidence_is_link CHECK (evidence_url IS NULL OR wl_is_evidence_link(evidence_url))
);
-- A unit has at most one running attempt.
CREATE UNIQUE INDEX one_live_attempt_per_unit ON work_unit_attempts (unit_id)
    WHERE outcome IS NULL;

CREATE TABLE blocking_questions (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    unit_id             uuid NOT NULL REFERENCES work_units (id),
    attempt_id          uuid REFERENCES work_unit_attempts (id),
    question            text NOT NULL,
    status              question_status NOT NULL DEFAULT 'open',
    answer              text,
    assignee_group_slug text NOT NULL DEFAULT 'agent-questions',
    external_task_id    text,
    asked_by            text,
    answered_by         text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    closed_at           timestamptz,
    CONSTRAINT question_bounded CHECK (length(question) BETWEEN 1 AND 8000),
    CONSTRAINT question_answer_bounded CHECK (length(answer) <= 8000),
    CONSTRAINT question_answer_iff_answered CHECK ((answer IS NOT NULL) = (status = 'answered')),
    CONSTRAINT question_closed_iff_not_open CHECK ((closed_at IS NULL) = (status = 'open'))
);
CREATE INDEX blocking_questions_status_idx ON blocking_questions (status, created_at, id);
CREATE INDEX blocking_questions_unit_idx ON blocking_questions (unit_id);
-- A blocked unit waits on one question at a time.
CREATE UNIQUE INDEX one_open_question_per_unit ON blocking_questions (unit_id)
    WHERE status = 'open';

CREATE TABLE work_unit_events (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    unit_id          uuid NOT NULL REFERENCES work_units (id),
    attempt_id       uuid REFERENCES work_unit_attempts (id),
    event_type       work_event_type NOT NULL,
    from_state       work_state,
    to_state         work_state,
    agent_id         text,
    cost_delta_cents bigint NOT NULL DEFAULT 0,
    detail           jsonb NOT NULL DEFAULT '{}',
    source_event_id  text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT event_cost_delta_not_negative CHECK (cost_delta_cents >= 0)
);
CREATE UNIQUE INDEX event_source_event_id_unique ON work_unit_events (source_event_id)
    WHERE source_event_id IS NOT NULL;
CREATE INDEX work_unit_events_keyset_idx ON work_unit_events (created_at DESC, id DESC);
CREATE INDEX work_unit_events_unit_idx ON work_unit_events (unit_id, id DESC);
