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

-- name: idempotency_begin_reserve
-- A keyed write's first round trip: begin its transaction and reserve the key in it, as
-- idempotency_reserve does, through wl_reserve_key (0033), whose INSERT each backend plans
-- once. Several commands, so no parameters: {scope}, {key}, {digest} and {takeover} are
-- literals written in by `commands` (db/store.py). The SELECT's status says whether this
-- request owns the key ("SELECT 1"); if not, the write runs idempotency_reserve in the same
-- transaction to learn why.
BEGIN;
SELECT FROM wl_reserve_key({scope}, {key}, {digest}, {takeover}) AS reserved WHERE reserved;

-- name: idempotency_lookup
SELECT false AS reserved, request_hash, status_code, content_type, body
FROM wl_idempotency_keys
WHERE scope = $1 AND key = $2;

-- name: idempotency_complete
-- $1 scope, $2 key, $3 status code, $4 content type, $5 body.
UPDATE wl_idempotency_keys
SET status_code = $3, content_type = $4, body = $5, completed_at = now()
WHERE scope = $1 AND key = $2 AND status_code IS NULL;

-- name: idempotency_complete_commit
-- A keyed write's last round trip: store its outcome, as idempotency_complete does,
-- through wl_complete_key (0033), and commit. Literals as in idempotency_begin_reserve. If
-- the call fails, PostgreSQL skips the COMMIT and the caller rolls back.
SELECT wl_complete_key({scope}, {key}, {status}, {content_type}, {body});
COMMIT;

-- name: idempotency_store
-- A refusal stored on its own, after its transaction rolled back: the key with its
-- outcome, unless a concurrent request under the key holds it (that record is returned:
-- `reserved` false). $1 scope, $2 key, $3 hash, $4 status, $5 content type, $6 body.
-- Zero rows: that record committed after this statement's snapshot; look it up.
WITH stored AS (
    INSERT INTO wl_idempotency_keys AS k
        (scope, key, request_hash, status_code, content_type, body, completed_at)
    VALUES ($1, $2, $3, $4, $5, $6, now())
    ON CONFLICT (scope, key) DO NOTHING
    RETURNING true AS reserved, k.request_hash, k.status_code, k.content_type, k.body
)
SELECT reserved, request_hash, status_code, content_type, body FROM stored
UNION ALL
SELECT false, request_hash, status_code, content_type, body
FROM wl_idempotency_keys
WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM stored);

-- name: idempotency_release
-- Give the key back after a failure that changed nothing (5xx), so a retry runs again.
DELETE FROM wl_idempotency_keys
WHERE scope = $1 AND key = $2 AND status_code IS NULL;

-- name: idempotency_expire
-- $1 age in seconds after which records are forgotten.
DELETE FROM wl_idempotency_keys
WHERE created_at < now() - make_interval(secs => $1);
