-- The reader role is read-only for real (docs/security.md), not only by its default of
-- read-only transactions, which any session may SET off. With that default off, what a
-- role without table privileges could still write is closed here for every role but the
-- ledger's own: temporary tables, large objects, and session advisory locks (a reader
-- holding the migrator's lock would stall every later `migrate` and `serve`).
-- NOTIFY needs no privilege and cannot be revoked: the long-poll listeners treat a
-- notification as a hint and re-read the tables, so a forged one wakes a waiter for
-- nothing (tests/read/test_read_role.py).
-- Revoking what PUBLIC holds on pg_catalog functions needs their owner (a superuser, as
-- the embedded server's role is); run as a lesser role, these statements only warn, and
-- docs/security.md says what to run as a superuser.

CREATE FUNCTION wl_seal_database() RETURNS void
    LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
    EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO %I', current_database(), current_user);
END $$;
REVOKE EXECUTE ON FUNCTION wl_seal_database() FROM PUBLIC;

DO $$
DECLARE
    fn regprocedure;
BEGIN
    PERFORM wl_seal_database();
    FOR fn IN
        SELECT p.oid::regprocedure FROM pg_proc AS p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace
          AND (p.proname IN ('lo_create', 'lo_creat', 'lo_from_bytea', 'lo_import', 'lo_put',
                             'lowrite', 'lo_truncate', 'lo_truncate64', 'lo_unlink')
               OR p.proname LIKE 'pg\_advisory\_lock%'
               OR p.proname LIKE 'pg\_try\_advisory\_lock%')
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', fn);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', fn, current_user);
    END LOOP;
END $$;

-- A database copied from a template (CREATE DATABASE ... TEMPLATE) does not copy the
-- template's database-level grants: making a reader seals the database it is made in.
ALTER FUNCTION wl_grant_reader(text, text) RENAME TO wl_grant_reader_views;

CREATE FUNCTION wl_grant_reader(role_name text, password_verifier text) RETURNS text[]
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM wl_seal_database();
    RETURN wl_grant_reader_views(role_name, password_verifier);
END $$;
REVOKE EXECUTE ON FUNCTION wl_grant_reader(text, text) FROM PUBLIC;
