"""Everything that talks to PostgreSQL: the server, the pool, migrations and named SQL."""
