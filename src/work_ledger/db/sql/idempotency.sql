-- Idempotency records (DESIGN §6): one per (caller, Idempotency-Key).

-- name: idempotency_reserve
-- Reserve the key for this request, or return the record that holds it. $1 scope (the
-- acting caller), $2 key, $3 hash of the request, $4 seconds after which an unfinished
-- reservation (committed without an outcome) may be taken over (0: at once, even inside
-- a transaction that began before it). `reserved` is true for the caller
-- that must run the request. Zero rows: a concurrent reservation committed after this
-- statement's snapshot; look it up.
WITH reserved AS (
    INSERT INTO wl_idempotency_keys AS k (scope, key, request_hash)
    VALUES ($1, $2, $3)
    ON CONFLICT (scope, key) DO UPDATE
        SET request_hash = excluded.request_hash, created_at = now()
        WHERE k.status_code IS NULL
          AND k.created_at < clock_timestamp() - make_interval(secs => $4)
    RETURNING true AS reserved, k.request_hash, k.status_code, k.content_type, k.body
)
SELECT reserved, request_hash, status_code, content_type, body FROM reserved
UNION ALL
SELECT false, request_hash, status_code, content_type, body
FROM wl_idempotency_keys
WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM reserved);

-- name: idempotency_lookup
SELECT false AS reserved, request_hash, status_code, content_type, body
FROM wl_idempotency_keys
WHERE scope = $1 AND key = $2;

-- name: idempotency_complete
-- $1 scope, $2 key, $3 status code, $4 content type, $5 body.
UPDATE wl_idempotency_keys
SET status_code = $3, content_type = $4, body = $5, completed_at = now()
WHERE scope = $1 AND key = $2 AND status_code IS NULL;

-- name: idempotency_release
-- Give the key back after a failure that changed nothing (5xx), so a retry runs again.
DELETE FROM wl_idempotency_keys
WHERE scope = $1 AND key = $2 AND status_code IS NULL;

-- name: idempotency_expire
-- $1 age in seconds after which records are forgotten.
DELETE FROM wl_idempotency_keys
WHERE created_at < now() - make_interval(secs => $1);
