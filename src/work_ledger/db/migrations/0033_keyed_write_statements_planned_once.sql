-- A keyed write's first and last round trips plan no statement (issue 43).
--
-- A keyed write begins its transaction with its key's reservation and ends it with the
-- outcome and COMMIT, each sent as several commands in one simple-query message
-- (db/store.commands), which takes no parameters: PostgreSQL parsed and planned that
-- INSERT ... ON CONFLICT and that UPDATE anew on every keyed write. Called as functions, a
-- backend plans each once and keeps the plan; what is planned per call is a SELECT of the
-- function. On the embedded PostgreSQL 18, 500 keyed writes in a row on one connection: 420
-- µs of the server's CPU for the two round trips before, 340 µs through these functions.
-- The statements are idempotency_reserve's and idempotency_complete's
-- (db/sql/idempotency.sql), which the other ways of keying a write still run.

-- True if the caller now holds the key: inserted, or an unfinished reservation older than
-- `takeover_seconds` taken over (0: at once).
CREATE FUNCTION wl_reserve_key(scope text, key text, request_hash bytea,
                               takeover_seconds double precision) RETURNS boolean
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wl_idempotency_keys AS k (scope, key, request_hash)
    VALUES (wl_reserve_key.scope, wl_reserve_key.key, wl_reserve_key.request_hash)
    ON CONFLICT ON CONSTRAINT wl_idempotency_keys_pkey DO UPDATE
        SET request_hash = excluded.request_hash, created_at = now()
        WHERE k.status_code IS NULL
          AND k.created_at < clock_timestamp() - make_interval(secs => takeover_seconds);
    RETURN FOUND;
END
$$;

-- The outcome stored under a reserved key (a key already answered is left as it is).
CREATE FUNCTION wl_complete_key(scope text, key text, status_code integer, content_type text,
                                body bytea) RETURNS void
    LANGUAGE plpgsql AS $$
BEGIN
    UPDATE wl_idempotency_keys AS k
    SET status_code = wl_complete_key.status_code,
        content_type = wl_complete_key.content_type,
        body = wl_complete_key.body, completed_at = now()
    WHERE k.scope = wl_complete_key.scope AND k.key = wl_complete_key.key
      AND k.status_code IS NULL;
END
$$;
