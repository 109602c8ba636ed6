-- Who holds what a migration waits for: the migration lock, or any lock on a ledger table
-- (an ALTER waits behind every open transaction that touched its table). $1 = lock key.
-- name: migration_lock_holders
SELECT DISTINCT a.pid, a.application_name, a.client_addr::text AS client_addr,
       a.state, a.xact_start, a.query_start, left(a.query, 200) AS query
FROM pg_locks AS l
JOIN pg_stat_activity AS a ON a.pid = l.pid
LEFT JOIN pg_class AS c ON c.oid = l.relation
WHERE l.granted
  AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND ((l.locktype = 'advisory' AND l.classid = ($1::bigint >> 32)::oid
        AND l.objid = ($1::bigint & 4294967295)::oid AND l.objsubid = 1)
       OR c.relnamespace = 'public'::regnamespace)
ORDER BY a.xact_start NULLS LAST
