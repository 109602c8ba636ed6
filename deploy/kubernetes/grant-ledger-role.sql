-- Run once, as a superuser, in the ledger's database, before the first `work-ledger
-- migrate`, when the ledger's role (WL_DATABASE_URL's user, here `work_ledger`) is not a
-- superuser: a managed or operator-run PostgreSQL (CloudNativePG's `app` owner).
-- Migration 0008 takes large objects and session advisory locks away from every role but
-- the ledger's own (docs/security.md). pg_catalog's functions belong to the superuser, and
-- lo_import is PUBLIC's by no grant at all, so the ledger's role cannot take them by itself:
-- it gets them here with the grant option, and 0008 then keeps them for it (and only warns
-- where it cannot revoke).
DO $$
DECLARE
    fn regprocedure;
BEGIN
    FOR fn IN
        SELECT p.oid::regprocedure FROM pg_proc AS p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace
          AND (p.proname IN ('lo_create', 'lo_creat', 'lo_from_bytea', 'lo_import', 'lo_put',
                             'lowrite', 'lo_truncate', 'lo_truncate64', 'lo_unlink')
               OR p.proname LIKE 'pg\_advisory\_lock%'
               OR p.proname LIKE 'pg\_try\_advisory\_lock%')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO work_ledger WITH GRANT OPTION', fn);
    END LOOP;
END $$;
