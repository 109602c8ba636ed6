"""wl_unit_ranks (migrations 0017 and 0021) holds a row for exactly the units the top lists
can show, those that cost something or were claimed more than once, as of the last fold;
registering units writes none, and the audit names a row too many or too few."""

from __future__ import annotations

import asyncpg

from work_ledger.domain.model import Actor, NewUnit
from work_ledger.service.ledger import Ledger

OPERATOR = Actor("operator", privileged=True)
RANKED = "SELECT id FROM work_units WHERE cost_cents > 0 OR attempt_count > 1 ORDER BY id"
ROWS = "SELECT unit_id FROM wl_unit_ranks ORDER BY unit_id"


async def _fold(raw: asyncpg.Connection) -> None:
    await raw.fetchval("SELECT wl_fold_read_summaries()")
    assert await raw.fetchval("SELECT count(*) FROM wl_unit_changes") == 0


async def _rank_drift(raw: asyncpg.Connection) -> list[tuple[str, str, str]]:
    rows = await raw.fetch(
        "SELECT key, kept, actual FROM wl_read_summary_drift()"
        " WHERE summary = 'wl_unit_ranks' ORDER BY key"
    )
    return [(r["key"], r["kept"], r["actual"]) for r in rows]


async def test_rank_rows_are_the_ranked_units(seeded: Ledger, raw: asyncpg.Connection) -> None:
    await _fold(raw)
    ranked = [r["id"] for r in await raw.fetch(RANKED)]
    unranked = await raw.fetchval("SELECT count(*) FROM work_units") - len(ranked)
    assert ranked
    assert unranked > 0
    assert [r["unit_id"] for r in await raw.fetch(ROWS)] == ranked

    await seeded.register(
        [NewUnit(f"rank-new-{i}", "fleet-a", "ranks") for i in range(5)], OPERATOR
    )
    await _fold(raw)
    assert [r["unit_id"] for r in await raw.fetch(ROWS)] == ranked
    assert await _rank_drift(raw) == []


async def test_a_unit_gets_its_row_when_it_first_ranks(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    """Claimed once at no cost: no row. Claimed a second time: a row among the most
    attempted. Another unit, claimed once: a row when it first costs something."""
    await seeded.register(
        [NewUnit(ref, "fleet-a", "ranks") for ref in ("rank-twice", "rank-cost")], OPERATOR
    )
    agent = Actor("rank-agent")
    claim = await seeded.claim_named("rank-twice", agent.name, lease_seconds=600)
    assert claim.unit is not None
    twice = claim.unit.id
    await _fold(raw)
    assert await raw.fetchval("SELECT count(*) FROM wl_unit_ranks WHERE unit_id = $1", twice) == 0
    await seeded.release(str(twice), agent)
    assert (await seeded.claim_named("rank-twice", agent.name, lease_seconds=600)).unit
    claim = await seeded.claim_named("rank-cost", "rank-agent-2", lease_seconds=600)
    assert claim.unit is not None
    assert claim.attempt is not None
    costed = claim.unit.id
    await seeded.start(str(costed), Actor("rank-agent-2"), attempt_id=claim.attempt.id)
    await seeded.record_cost(claim.attempt.id, 9, Actor("rank-agent-2"))
    await _fold(raw)
    rows = await raw.fetch(
        "SELECT unit_id, cost_cents, attempts FROM wl_unit_ranks WHERE unit_id = ANY ($1)",
        [twice, costed],
    )
    assert {r["unit_id"]: (r["cost_cents"], r["attempts"]) for r in rows} == {
        twice: (0, 2),
        costed: (9, 1),
    }
    assert await _rank_drift(raw) == []


async def test_the_audit_names_a_rank_row_too_many_and_one_missing(
    seeded: Ledger, raw: asyncpg.Connection
) -> None:
    await _fold(raw)
    extra = await raw.fetchrow(
        "SELECT id, domain, external_ref FROM work_units"
        " WHERE cost_cents = 0 AND attempt_count <= 1 ORDER BY external_ref LIMIT 1"
    )
    missing = await raw.fetchrow(
        "DELETE FROM wl_unit_ranks WHERE unit_id = (SELECT unit_id FROM wl_unit_ranks"
        " ORDER BY external_ref LIMIT 1) RETURNING external_ref, domain, cost_cents, attempts"
    )
    assert extra is not None
    assert missing is not None
    await raw.execute(
        "INSERT INTO wl_unit_ranks VALUES ($1, $2, $3, 0, 0)",
        extra["id"],
        extra["domain"],
        extra["external_ref"],
    )
    actual = f"({missing['domain']},{missing['cost_cents']},{missing['attempts']})"
    assert await _rank_drift(raw) == sorted(
        [
            (
                extra["external_ref"],
                f"({extra['domain']},0,0)",
                "no rank row: no cost and at most one attempt",
            ),
            (missing["external_ref"], "no rank row", actual),
        ]
    )
    details = [v.detail for v in await seeded.audit() if v.rule == "read_summary_exact"]
    for ref in (extra["external_ref"], missing["external_ref"]):
        assert any(f"wl_unit_ranks {ref} keeps" in d for d in details), details
    await raw.execute("SELECT wl_rebuild_read_summaries()")
    assert await _rank_drift(raw) == []
