-- API tokens and idempotency records (DESIGN §6, §7). Only an HMAC-SHA256 of a token is
-- kept; the token itself is shown once, at minting. An idempotency record keeps the
-- first outcome of a write, so that a retried request (same caller, same key) gets that
-- outcome back instead of a second effect, on whichever replica it lands.

CREATE TABLE wl_api_tokens (
    prefix      text PRIMARY KEY,
    token_hash  bytea NOT NULL,
    role        text NOT NULL,
    principal   text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    CONSTRAINT token_prefix_shape CHECK (prefix ~ '^[0-9a-f]{8}$'),
    CONSTRAINT token_hash_is_sha256 CHECK (length(token_hash) = 32),
    CONSTRAINT token_role_known CHECK (
        role IN ('agent', 'harness', 'triage', 'operator', 'projector', 'reader')),
    CONSTRAINT token_principal_shape CHECK (principal ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$')
);
CREATE UNIQUE INDEX token_hash_unique ON wl_api_tokens (token_hash);

CREATE TABLE wl_idempotency_keys (
    scope         text NOT NULL,
    key           text NOT NULL,
    request_hash  bytea NOT NULL,
    status_code   integer,
    content_type  text,
    body          bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz,
    PRIMARY KEY (scope, key),
    CONSTRAINT idempotency_key_bounded CHECK (length(key) BETWEEN 1 AND 255),
    CONSTRAINT idempotency_completed_iff_status CHECK (
        (status_code IS NULL) = (completed_at IS NULL)
        AND (status_code IS NULL) = (body IS NULL))
);
-- Expiry deletes the oldest records.
CREATE INDEX wl_idempotency_keys_created_idx ON wl_idempotency_keys (created_at);
