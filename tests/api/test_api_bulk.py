"""POST /units/bulk over HTTP (DESIGN §13): operator only, dry run by default, a real run
replayed by its Idempotency-Key, input refused with a 422 that changes nothing."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from support.api_support import Api, assert_problem, claimed
from work_ledger.service.tokens import Role

DEFER = {
    "filter": {"fleet": "legacy", "domain": "orders"},
    "action": "dispose",
    "disposition": "DEFERRED",
    "reason": "the orders system was switched off",
}


async def register(operator: httpx.AsyncClient, *refs: str, domain: str = "orders") -> None:
    units = [{"external_ref": r, "fleet": "legacy", "domain": domain} for r in refs]
    done = await operator.post("/units", json={"units": units})
    assert done.status_code == 200, done.text


def without_run(body: dict[str, Any]) -> dict[str, Any]:
    """A bulk answer less what differs between a dry and a real run."""
    return {k: v for k, v in body.items() if k not in ("dry_run", "operation_id")}


async def test_dry_run_then_real_run(
    api: Api, operator: httpx.AsyncClient, raw: asyncpg.Connection
) -> None:
    """The dry run (the default) answers what the real run then does, field for field; the
    held unit is skipped with the rule; the events carry the run's operation id."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    await register(operator, "orders/a", "orders/b", "orders/c")
    await register(operator, "billing/a", domain="billing")
    await agent.post("/units/orders/c/claim", json={})
    dry = await operator.post("/units/bulk", json=DEFER)
    assert dry.status_code == 200, dry.text
    assert await raw.fetchval("SELECT count(*) FROM work_units WHERE state = 'abandoned'") == 0
    real = await operator.post("/units/bulk", json={**DEFER, "dry_run": False})
    assert real.status_code == 200, real.text
    assert without_run(dry.json()) == without_run(real.json())
    body = real.json()
    assert (dry.json()["dry_run"], dry.json()["operation_id"], body["dry_run"]) == (
        True,
        None,
        False,
    )
    assert body["matched"] == 3
    assert [(c["external_ref"], c["from"], c["to"]) for c in body["changed"]] == [
        ("orders/a", "ready", "abandoned"),
        ("orders/b", "ready", "abandoned"),
    ]
    [skipped] = body["skipped"]
    assert (skipped["external_ref"], skipped["state"], skipped["rule"]) == (
        "orders/c",
        "claimed",
        "unit_state_transition_allowed",
    )
    assert "dispose DEFERRED needs it" in skipped["reason"]
    events = (await operator.get("/units/orders/a/events")).json()["items"]
    assert events[0]["event_type"] == "disposed"
    assert events[0]["detail"]["bulk"] == {
        "operation": body["operation_id"],
        "reason": DEFER["reason"],
    }
    shown = (await operator.get("/units/orders/a")).json()
    assert (shown["state"], shown["disposition"]) == ("abandoned", "DEFERRED")


async def test_release_frees_an_agents_units(api: Api, operator: httpx.AsyncClient) -> None:
    """A bulk release of what one agent holds: its attempt ends abandoned, the unit is
    ready again and another agent claims it."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    other = await api.as_role(Role.AGENT, "agent-2")
    await register(operator, "orders/a")
    unit_id, _ = await claimed(agent, start=True)
    released = await operator.post(
        "/units/bulk",
        json={
            "filter": {"fleet": "legacy", "held_by": "agent-1"},
            "action": "release",
            "reason": "model release 4.1 is bad",
            "dry_run": False,
        },
    )
    assert released.status_code == 200, released.text
    assert [(c["id"], c["from"], c["to"]) for c in released.json()["changed"]] == [
        (unit_id, "in_progress", "ready")
    ]
    shown = (await operator.get("/units/orders/a")).json()
    assert shown["attempts"][-1]["outcome"] == "abandoned"
    again, _ = await claimed(other)
    assert again == unit_id


async def test_real_run_replays_with_its_key(
    operator: httpx.AsyncClient, raw: asyncpg.Connection
) -> None:
    """The same real run under the same Idempotency-Key answers the first answer byte for
    byte and appends no second event; a different request under it is refused."""
    await register(operator, "orders/a", "orders/b")
    request = {**DEFER, "dry_run": False}
    headers = {"Idempotency-Key": "bulk-1"}
    first = await operator.post("/units/bulk", json=request, headers=headers)
    assert first.status_code == 200, first.text
    # New units in the scope since: a rerun would change them; a replay does not.
    await register(operator, "orders/c")
    second = await operator.post("/units/bulk", json=request, headers=headers)
    assert (second.status_code, second.content) == (200, first.content)
    assert second.headers["Idempotent-Replayed"] == "true"
    assert await raw.fetchval("SELECT count(*) FROM work_unit_events WHERE detail ? 'bulk'") == 2
    assert (await operator.get("/units/orders/c")).json()["state"] == "ready"
    other = await operator.post("/units/bulk", json={**request, "limit": 5}, headers=headers)
    assert_problem(other, 422, "idempotency_key_reused")


async def test_more_matches_than_limit_is_422_naming_the_count(
    operator: httpx.AsyncClient, raw: asyncpg.Connection
) -> None:
    """Three matches against limit 2: a 422 naming 3, nothing changed (keyed or not), and
    the key is free for the corrected request."""
    await register(operator, "orders/a", "orders/b", "orders/c")
    request = {**DEFER, "dry_run": False, "limit": 2}
    for headers in ({}, {"Idempotency-Key": "bulk-2"}):
        refused = await operator.post("/units/bulk", json=request, headers=headers)
        body = assert_problem(refused, 422, "invalid_input")
        assert "matches 3 units, more than limit 2" in body["detail"]
        assert (body["matched"], body["limit"], body["invariant"]) == (3, 2, "bulk_limit")
    assert await raw.fetchval("SELECT count(*) FROM work_units WHERE state = 'ready'") == 3
    fixed = await operator.post(
        "/units/bulk", json={**request, "limit": 3}, headers={"Idempotency-Key": "bulk-2"}
    )
    assert (fixed.status_code, len(fixed.json()["changed"])) == (200, 3)


async def test_a_failure_midway_changes_nothing(
    operator: httpx.AsyncClient, raw: asyncpg.Connection
) -> None:
    """A raw-SQL trigger that refuses the second unit's change: the run is refused (409,
    naming that rule) and the first unit is unchanged too."""
    await register(operator, "orders/a", "orders/b", "orders/c")
    await raw.execute(
        """
        CREATE SEQUENCE test_seen;
        CREATE FUNCTION test_refuse_second() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF nextval('test_seen') = 2 THEN
                RAISE EXCEPTION 'the second one' USING CONSTRAINT = 'test_refuse_second';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER test_refuse_second BEFORE UPDATE ON work_units
            FOR EACH ROW EXECUTE FUNCTION test_refuse_second();
        """
    )
    refused = await operator.post(
        "/units/bulk", json={**DEFER, "dry_run": False}, headers={"Idempotency-Key": "k"}
    )
    assert assert_problem(refused, 409)["invariant"] == "test_refuse_second"
    assert await raw.fetchval("SELECT count(*) FROM work_units WHERE state = 'ready'") == 3
    assert await raw.fetchval("SELECT count(*) FROM work_unit_events WHERE detail ? 'bulk'") == 0


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"filter": {"domain": "orders"}}, "filter.fleet"),
        ({"reason": None}, "reason"),
        ({"reason": ""}, "reason"),
        ({"disposition": "LOST"}, "disposition"),
        ({"disposition": None}, "needs a disposition"),
        ({"action": "release"}, "takes no disposition"),
        ({"action": "verify"}, "action"),
        ({"limit": 0}, "limit"),
        ({"limit": 10_001}, "limit"),
        ({"dry_run": "no"}, "dry_run"),
        ({"filter": {"fleet": "legacy", "state": ["gone"]}}, "filter.state"),
        ({"filter": {"fleet": "legacy", "owner": "x"}}, "filter.owner"),
    ],
)
async def test_bad_input_is_422_and_changes_nothing(
    operator: httpx.AsyncClient,
    raw: asyncpg.Connection,
    change: dict[str, Any],
    says: str,
) -> None:
    """Each bad field is a 422 naming it; nothing changes."""
    await register(operator, "orders/a")
    request = {**DEFER, "dry_run": False, **change}
    request = {k: v for k, v in request.items() if v is not None}
    body = assert_problem(await operator.post("/units/bulk", json=request), 422)
    assert says in body["detail"], body
    assert await raw.fetchval("SELECT state::text FROM work_units") == "ready"


async def test_only_an_operator_may_bulk(api: Api, operator: httpx.AsyncClient) -> None:
    """An agent (or triage, or reader) is refused with a 403; a dry run included."""
    await register(operator, "orders/a")
    for role in (Role.AGENT, Role.TRIAGE, Role.READER):
        client = await api.as_role(role, f"{role}-1")
        assert_problem(await client.post("/units/bulk", json=DEFER), 403, "forbidden")
    assert (await operator.get("/units/orders/a")).json()["state"] == "ready"


async def test_route_has_its_operation_id(api: Api) -> None:
    """The route is `bulkUnits` in the OpenAPI document, its body and answer described."""
    async with httpx.AsyncClient(base_url=api.url) as client:
        document = (await client.get("/openapi.json")).json()
    operation = document["paths"]["/units/bulk"]["post"]
    assert operation["operationId"] == "bulkUnits"
    answer = document["components"]["schemas"]["BulkChanged"]["properties"]
    assert {"from", "to"} <= answer.keys()


async def test_a_unit_named_bulk_is_still_read(operator: httpx.AsyncClient) -> None:
    """GET /units/bulk is the unit whose external_ref is `bulk`: only POST is the route."""
    await register(operator, "bulk")
    shown = await operator.get("/units/bulk")
    assert (shown.status_code, shown.json()["external_ref"]) == (200, "bulk")
