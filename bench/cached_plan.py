"""The plan a long-lived connection keeps for `claim_unit`, after many claims (not part of
run.py; its own embedded PostgreSQL).

    uv run --group bench python bench/cached_plan.py [claims]

Seeds ready units as the claims section does (attempts table empty), prepares
`claim_unit` by name, runs it `claims` times (a new agent each time, as the claim-only
loop does), then EXPLAIN ANALYZE EXECUTEs the same prepared statement: EXPLAIN EXECUTE
runs the plan PostgreSQL has cached for it, i.e. the one asyncpg's connection uses. The
`superseded` CTE's scan of work_unit_attempts is printed with its row counts.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import asyncpg
from claims import LEASE_SECONDS, seed_ledger
from harness import start_embedded

from work_ledger.db.connect import with_database
from work_ledger.db.queries import QUERIES
from work_ledger.runtime import migrate_database


async def main(claims: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="wl-plan-"))
    try:
        admin_url = start_embedded(home)
        admin = await asyncpg.connect(admin_url)
        await admin.execute('CREATE DATABASE "plan"')
        await admin.close()
        url = with_database(admin_url, "plan")
        await migrate_database(url)
        conn = await asyncpg.connect(url)
        try:
            await seed_ledger(conn, 40_000)
            await conn.execute(
                "PREPARE claim(text, text, integer, uuid) AS " + QUERIES["claim_unit"]
            )
            for i in range(claims):
                await conn.execute(f"EXECUTE claim('agent-{i}', NULL, {LEASE_SECONDS}, NULL)")
                if i + 1 in (10, claims):
                    plan = [
                        r[0]
                        for r in await conn.fetch(
                            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "
                            f"EXECUTE claim('explain-{i}', NULL, {LEASE_SECONDS}, NULL)"
                        )
                    ]
                    print(f"--- after {i + 1} claims ---")
                    for j, line in enumerate(plan):
                        if "work_unit_attempts a" in line or line.startswith(
                            ("Planning", "Execution", "Buffers")
                        ):
                            print("\n".join(plan[max(0, j - 1) : j + 3]))
                            print("  ...")
            counts = await conn.fetch(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            )
            print("plans used:", [dict(r) for r in counts])
        finally:
            await conn.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
