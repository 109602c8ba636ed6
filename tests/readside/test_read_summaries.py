"""The kept summaries (migration 0012) say what a full scan of the tables says: every
summarised view equals its full-scan definition (the last one before migration 0012, read
from the migration files), after the service's writes, raw SQL edits and concurrent
writers; the audit reports a tally that drifts, and the rebuild repairs it."""

from __future__ import annotations

import asyncio
import re
from importlib import resources

import asyncpg
import pytest

from work_ledger.db.queries import QUERIES
from work_ledger.domain.model import Actor, Disposition, NewUnit
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
SUMMARISED = (
    "v_queue_depth",
    "v_cost_per_unit",
    "v_rework",
    "v_disposition_summary",
    "v_cost_by_model",
)
# v_disposition_summary lists the first 20 links; the full scan lists them all.
FIRST_LINKS = {"v_disposition_summary": "evidence_urls[1:20] AS evidence_urls"}


def full_scan_views() -> dict[str, str]:
    """Each summarised view's last definition before the tallies (migration 0012): a scan
    of the tables, as the migrations before 0012 left it."""
    folder = resources.files("work_ledger.db") / "migrations"
    files = sorted(f.name for f in folder.iterdir() if f.name.endswith(".sql") and f.name < "0012")
    found: dict[str, str] = {}
    for file in files:
        text = (folder / file).read_text(encoding="utf-8")
        for name in SUMMARISED:
            head = rf"CREATE (?:OR REPLACE )?VIEW {name} WITH \(security_barrier\) AS\n"
            for match in re.finditer(head + r"(.*?);\nCOMMENT", text, re.S):
                found[name] = match[1]
    assert sorted(found) == sorted(SUMMARISED)
    return found


async def _install_full_scans(raw: asyncpg.Connection) -> None:
    for name, body in full_scan_views().items():
        await raw.execute(f"CREATE OR REPLACE VIEW full_scan_{name} AS {body}")


async def _differences(raw: asyncpg.Connection) -> dict[str, list[str]]:
    """Rows in one side and not the other, per view (empty lists: the same rows)."""
    found = {}
    for name in SUMMARISED:
        # The full scan's columns: a view may have gained columns since (v_queue_depth's
        # live, max_live and paused in 0026, which no tally keeps).
        columns = [
            r["attname"]
            for r in await raw.fetch(
                "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass"
                " AND attnum > 0 ORDER BY attnum",
                f"full_scan_{name}",
            )
        ]
        kept = f"SELECT {', '.join(columns)} FROM {name}"
        picked = [FIRST_LINKS.get(name, c) if c == "evidence_urls" else c for c in columns]
        scan = f"SELECT {', '.join(picked)} FROM full_scan_{name}"
        rows = await raw.fetch(
            f"(SELECT 'kept' AS side, * FROM ({kept}) k"
            f" EXCEPT ALL SELECT 'kept', * FROM ({scan}) s)"
            f" UNION ALL (SELECT 'scan', * FROM ({scan}) s"
            f" EXCEPT ALL SELECT 'scan', * FROM ({kept}) k)"
        )
        found[name] = [str(dict(r)) for r in rows]
    return found


async def _drift(raw: asyncpg.Connection) -> list[asyncpg.Record]:
    return list(await raw.fetch("SELECT * FROM wl_read_summary_drift()"))


async def _assert_exact(raw: asyncpg.Connection) -> None:
    assert {name: [] for name in SUMMARISED} == await _differences(raw)
    assert await _drift(raw) == []


async def test_summaries_equal_full_scans_after_the_service_writes(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """Every state, disposition, stale reclaim, release and block of the seeded ledger."""
    await _install_full_scans(raw)
    await _assert_exact(raw)


async def test_summaries_follow_raw_sql_edits(seeded: Ledger, raw: asyncpg.Connection) -> None:
    """A person with psql moves units between domains and rewrites evidence, several rows
    per statement: the tallies follow, first and last disposal included."""
    await _install_full_scans(raw)
    await raw.execute("UPDATE work_units SET domain = 'orders' WHERE external_ref = 'b1'")
    await raw.execute("UPDATE work_units SET domain = 'archive' WHERE domain = 'search'")
    await raw.execute(
        "UPDATE work_units SET evidence_urls = '{https://review.example/shared}'"
        " WHERE external_ref IN ('b2', 'o1', 'b3')"
    )
    await raw.execute("UPDATE work_units SET evidence_urls = '{}' WHERE external_ref = 'b2'")
    await _assert_exact(raw)


async def test_a_drifted_tally_is_reported_by_audit_and_repaired_by_rebuild(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """Break a tally with raw SQL: audit names it; the rebuild makes it exact again."""
    await _install_full_scans(raw)
    assert await raw.fetchval("SELECT wl_fold_read_summaries()") > 0
    await raw.execute(
        "UPDATE wl_unit_tallies SET units = units + 1 WHERE (domain, state) = ('billing', 'ready')"
    )
    await raw.execute("UPDATE wl_link_tallies SET links = links + 5 WHERE domain = '(all)'")
    drift = {r["summary"] for r in await _drift(raw)}
    assert {"wl_unit_tallies", "wl_link_tallies"} == drift
    rules = {(v.rule, v.external_ref) for v in await seeded.audit()}
    assert ("read_summary_exact", "(summary)") in rules
    await raw.execute("SELECT wl_rebuild_read_summaries()")
    await _assert_exact(raw)
    assert await seeded.audit() == []


async def _life(ledger: Ledger, agent: str, rounds: int) -> None:
    """Claim, start, cost, verify, dispose; every third unit released once first."""
    actor = Actor(agent)
    for i in range(rounds):
        claim = await ledger.claim(agent, lease_seconds=600)
        if claim.unit is None or claim.attempt is None:
            return
        unit, attempt = str(claim.unit.id), claim.attempt.id
        await ledger.start(unit, actor, attempt_id=attempt)
        await ledger.record_cost(attempt, 7 + i, actor)
        if i % 3 == 0:
            await ledger.release(unit, actor)
            continue
        await ledger.verify(unit, actor, f"https://ci.example/{unit}", attempt_id=attempt)
        await ledger.dispose(unit, Disposition.MIGRATED, actor, attempt_id=attempt)


@pytest.mark.timeout(300)
async def test_summaries_stay_exact_under_concurrent_writers(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """Eight agents on their own connections work one domain at once, over many rounds:
    no lost update, no deadlock, the same numbers as a scan."""
    await _install_full_scans(raw)
    units = [NewUnit(f"c{i}", "fleet-a", "hot") for i in range(400)]
    await ledger.register(units, OPERATOR)
    agents = asyncio.gather(*(_life(ledger, f"agent-{n}", 40) for n in range(8)))
    folds = 0
    while not agents.done():
        # A fold beside the writers, as `serve` runs it: every read stays exact.
        folds += await raw.fetchval("SELECT wl_fold_read_summaries()") > 0
        await _assert_exact(raw)
        await asyncio.sleep(0.05)
    await agents
    assert folds > 0
    await _assert_exact(raw)
    depth = await raw.fetchrow("SELECT * FROM v_queue_depth WHERE domain = 'hot'")
    assert depth is not None
    assert depth["units"] == 400
    assert depth["done"] > 0


async def test_views_are_exact_before_and_after_each_fold(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """Folded tallies plus the change rows not yet folded say what the tables say: with
    nothing folded, after a fold, after more writes on top of a fold, and after folding
    those; and the fold empties the change rows it counted."""
    await _install_full_scans(raw)
    await _assert_exact(raw)
    assert await raw.fetchval("SELECT wl_fold_read_summaries()") > 0
    assert await raw.fetchval("SELECT count(*) FROM wl_unit_changes") == 0
    await _assert_exact(raw)
    await seeded.register([NewUnit("f1", "fleet-a", "billing")], OPERATOR)
    await _life(seeded, "folder-agent", 3)
    await raw.execute("UPDATE work_units SET evidence_urls = '{}' WHERE external_ref = 'b1'")
    assert await raw.fetchval("SELECT count(*) FROM wl_unit_changes") > 0
    await _assert_exact(raw)
    await raw.fetchval("SELECT wl_fold_read_summaries()")
    await _assert_exact(raw)


async def test_a_fresh_registration_is_counted_in_its_statement(
    ledger: Ledger, raw: asyncpg.Connection
) -> None:
    """The tallies change with the write, not later: no refresh to wait for."""
    await ledger.register(
        [NewUnit("n1", "fleet-a", "new"), NewUnit("n2", "fleet-a", "new")], OPERATOR
    )
    row = await raw.fetchrow("SELECT ready, units FROM v_queue_depth WHERE domain = 'new'")
    assert row is not None
    assert (row["ready"], row["units"]) == (2, 2)


async def test_cost_by_model_follows_records_and_moved_units(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """Records with a model and some tokens (others left null), estimated or not, then the
    unit moved to another domain by raw SQL: v_cost_by_model equals its full scan."""
    from work_ledger.domain.shape import CostRecord

    await _install_full_scans(raw)
    attempt = (await seeded.get_unit("o3")).attempts[-1].id
    agent = Actor("agent-f")
    await seeded.record_cost(attempt, CostRecord(40, "model-a", 1_000, 200), agent)
    await seeded.record_cost(attempt, CostRecord(60, "model-a", estimated=True), agent)
    await seeded.record_cost(attempt, CostRecord(0, "model-b", cache_read_tokens=5), agent)
    await _assert_exact(raw)
    await raw.execute("UPDATE work_units SET domain = 'archive' WHERE external_ref = 'o3'")
    await _assert_exact(raw)
    row = await raw.fetchrow(
        "SELECT * FROM v_cost_by_model WHERE domain = 'archive' AND model = 'model-a'"
    )
    assert row is not None
    assert (row["cost_cents"], row["estimated_cents"], row["units"]) == (100, 60, 1)


async def test_the_top_lists_read_ranks_and_equal_a_full_sort(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """The report's costliest and most-attempted units (v_costliest_units and
    v_most_attempted_units as of the last fold, plus the units changed since) are those a
    sort of every unit gives, before and after a fold and after a raw edit that moves a
    folded unit to another domain."""
    costliest = QUERIES["read_costliest_units"]
    reworked = QUERIES["read_reworked_units"]
    by_cost = (
        "SELECT unit_id FROM v_cost_per_unit WHERE scope = 'unit' AND cost_cents > 0"
        " AND ($1::text IS NULL OR domain = $1) ORDER BY cost_cents DESC, external_ref LIMIT $2"
    )
    by_attempts = (
        "SELECT unit_id FROM v_cost_per_unit WHERE scope = 'unit' AND attempts > 1"
        " AND ($1::text IS NULL OR domain = $1) ORDER BY attempts DESC, external_ref LIMIT $2"
    )

    async def check() -> None:
        domains = [r[0] for r in await raw.fetch("SELECT DISTINCT domain FROM work_units")]
        for domain in (None, *domains):
            for limit in (1, 3, 20):
                got = [r["unit_id"] for r in await raw.fetch(costliest, domain, limit)]
                assert got == [r["unit_id"] for r in await raw.fetch(by_cost, domain, limit)]
                got = [r["unit_id"] for r in await raw.fetch(reworked, domain, limit)]
                assert got == [r["unit_id"] for r in await raw.fetch(by_attempts, domain, limit)]

    assert await raw.fetchval("SELECT count(*) FROM wl_unit_changes") > 0
    await check()
    await raw.fetchval("SELECT wl_fold_read_summaries()")
    await check()
    # A unit not yet disposed (moving a disposed one folds at once), among those with cost.
    top = await raw.fetchrow(
        "SELECT id, domain FROM work_units WHERE disposition IS NULL AND cost_cents > 0"
        " ORDER BY cost_cents DESC LIMIT 1"
    )
    assert top is not None
    moved_to = "orders" if top["domain"] != "orders" else "billing"
    await raw.execute("UPDATE work_units SET domain = $2 WHERE id = $1", top["id"], moved_to)
    assert await raw.fetchval("SELECT count(*) FROM wl_unit_changes") == 1
    await check()
    await raw.fetchval("SELECT wl_fold_read_summaries()")
    await check()
    assert await _drift(raw) == []


async def test_stall_counts_equal_the_stall_list(seeded: Ledger, raw: asyncpg.Connection) -> None:
    """v_stall_counts (leased units from the tallies, less those heard from lately and those
    never heard from) counts what v_stall_list lists, per domain, as leases go silent, with
    changes folded or not."""
    compare = (
        "SELECT domain, count(*) FROM v_stall_list GROUP BY domain {}"
        " SELECT domain, stalled_units FROM v_stall_counts"
    )

    async def check() -> int:
        assert await raw.fetch(compare.format("EXCEPT ALL")) == []
        swapped = (
            "SELECT domain, stalled_units FROM v_stall_counts EXCEPT ALL"
            " SELECT domain, count(*) FROM v_stall_list GROUP BY domain"
        )
        assert await raw.fetch(swapped) == []
        return int(await raw.fetchval("SELECT count(*) FROM v_stall_list"))

    await seeded.register([NewUnit(f"st{i}", "fleet-a", "stalls") for i in range(3)], OPERATOR)
    for i in range(3):
        assert (await seeded.claim(f"stall-agent-{i}", lease_seconds=600)).unit is not None
    leased = await raw.fetch(
        "SELECT id FROM work_units WHERE state IN ('claimed', 'in_progress')"
        " AND last_heartbeat_at > now() - interval '1 minute' ORDER BY external_ref"
    )
    assert len(leased) >= 2
    before = await check()
    await raw.execute(
        "UPDATE work_units SET last_heartbeat_at = now() - interval '2 days' WHERE id = $1",
        leased[0]["id"],
    )
    assert await check() == before + 1
    await raw.fetchval("SELECT wl_fold_read_summaries()")
    assert await check() == before + 1
    await raw.execute(
        "UPDATE work_units SET last_heartbeat_at = NULL WHERE id = $1", leased[1]["id"]
    )
    assert await check() == before + 1
    await raw.execute(
        "UPDATE work_units SET last_heartbeat_at = now() - interval '2 days'"
        " WHERE state IN ('claimed', 'in_progress') AND last_heartbeat_at IS NOT NULL"
    )
    assert await check() == before + len(leased) - 1
