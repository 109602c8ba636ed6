-- API tokens (DESIGN §7). Only the HMAC-SHA256 of a token is stored.

-- name: insert_token
-- $1 prefix, $2 HMAC of the whole token, $3 role, $4 principal.
INSERT INTO wl_api_tokens (prefix, token_hash, role, principal)
VALUES ($1, $2, $3, $4)
RETURNING prefix, role, principal, created_at, revoked_at;

-- name: token_prefixes
-- Every prefix minted (live or revoked): a prefix outside it is refused with no lookup.
SELECT prefix FROM wl_api_tokens;

-- name: token_by_prefix
SELECT prefix, token_hash, role, principal, created_at, revoked_at
FROM wl_api_tokens
WHERE prefix = $1;

-- name: list_tokens
SELECT prefix, role, principal, created_at, revoked_at
FROM wl_api_tokens
ORDER BY created_at, prefix;

-- name: revoke_token
UPDATE wl_api_tokens
SET revoked_at = coalesce(revoked_at, now())
WHERE prefix = $1
RETURNING prefix, role, principal, created_at, revoked_at;

-- name: count_live_tokens
SELECT count(*) AS live FROM wl_api_tokens WHERE revoked_at IS NULL;

-- name: lock_first_token
-- Replicas started together on an empty ledger queue here, so only the first mints the
-- first operator token; held until the transaction ends.
SELECT pg_advisory_xact_lock(7310425617700341001);

-- name: insert_first_token
-- As insert_token, but only while no live token exists (run after lock_first_token, in
-- the same transaction: its snapshot then sees a token minted by a replica ahead of it).
INSERT INTO wl_api_tokens (prefix, token_hash, role, principal)
SELECT $1, $2, $3, $4
WHERE NOT EXISTS (SELECT 1 FROM wl_api_tokens WHERE revoked_at IS NULL)
RETURNING prefix, role, principal, created_at, revoked_at;
