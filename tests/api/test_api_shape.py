"""DESIGN §12 over HTTP: prerequisites, `waiting`, waive and split."""

from __future__ import annotations

from typing import Any

import httpx

from support.api_support import Api, assert_problem, assert_refused, claimed, register
from work_ledger.service.tokens import Role


async def _units(operator: httpx.AsyncClient, *units: dict[str, Any]) -> httpx.Response:
    return await operator.post("/units", json={"units": [{"fleet": "fleet-a", **u} for u in units]})


async def _finish(agent: httpx.AsyncClient, unit_id: str, attempt_id: str) -> None:
    verified = await agent.post(
        f"/units/{unit_id}/transition",
        json={"to": "verified", "evidence_url": "https://ci.example/1", "attempt_id": attempt_id},
    )
    assert verified.status_code == 200, verified.text
    done = await agent.post(f"/units/{unit_id}/dispose", json={"disposition": "MIGRATED"})
    assert done.status_code == 200, done.text


async def test_dependents_wait_until_their_library_is_done(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """A service registered requiring a library waits; the library done, it is ready."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    registered = await _units(
        operator,
        {"external_ref": "svc-a", "requires": ["lib"]},
        {"external_ref": "lib"},
        {"external_ref": "svc-b", "requires": ["lib", "svc-a"]},
    )
    assert registered.status_code == 200, registered.text
    shown = (await agent.get("/units/svc-a")).json()
    assert (shown["state"], shown["requires"][0]["external_ref"]) == ("waiting", "lib")
    assert shown["waiting_on"] == [
        {
            "kind": "prerequisite",
            "unit": {
                "id": shown["requires"][0]["id"],
                "external_ref": "lib",
                "state": "ready",
                "disposition": None,
            },
        }
    ]
    refused = await agent.post("/units/svc-a/claim", json={})
    body = assert_refused(refused, "prerequisites_unfinished")
    assert (body["code"], body["waiting_on"][0]["unit"]["external_ref"]) == (
        "prerequisites_unfinished",
        "lib",
    )
    unit_id, attempt_id = await claimed(agent, start=True)
    assert unit_id == shown["requires"][0]["id"]  # pull-next never returns a waiting unit
    await _finish(agent, unit_id, attempt_id)
    svc_a = (await agent.get("/units/svc-a")).json()
    assert (svc_a["state"], svc_a["waiting_on"]) == ("ready", [])
    assert (await agent.get("/units/svc-b")).json()["state"] == "waiting"
    events = (await agent.get("/units/svc-a/events")).json()["items"]
    assert (events[0]["event_type"], events[0]["detail"]["prerequisite"]) == (
        "transitioned",
        "lib",
    )
    assert (events[0]["from_state"], events[0]["to_state"]) == ("waiting", "ready")


async def test_unknown_prerequisite_or_cycle_writes_nothing(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """An unknown ref and a cycle (self included) are 422s naming them; nothing written."""
    unknown = await _units(
        operator, {"external_ref": "a"}, {"external_ref": "b", "requires": ["nowhere"]}
    )
    body = assert_problem(unknown, 422, "unknown_prerequisite")
    assert "nowhere" in body["detail"]
    cycle = await _units(
        operator,
        {"external_ref": "x", "requires": ["y"]},
        {"external_ref": "y", "requires": ["z"]},
        {"external_ref": "z", "requires": ["x"]},
    )
    body = assert_problem(cycle, 422, "prerequisite_cycle")
    assert {"x", "y", "z"} <= set(body["units"])
    itself = await _units(operator, {"external_ref": "s", "requires": ["s"]})
    assert_problem(itself, 422, "prerequisite_cycle")
    listed = (await operator.get("/units")).json()["items"]
    assert listed == []


async def test_reregistering_changes_nothing_and_bad_max_attempts_is_422(
    operator: httpx.AsyncClient,
) -> None:
    """A known unit listed again with requires stays as it was; max_attempts is 1..100."""
    await register(operator, "lib", "svc")
    again = await _units(operator, {"external_ref": "svc", "requires": ["lib"]})
    assert again.json()["existing"] == 1
    shown = (await operator.get("/units/svc")).json()
    assert (shown["state"], shown["requires"], shown["max_attempts"]) == ("ready", [], 5)
    for bad in (0, 101, "3", 2.5, True):
        refused = await _units(operator, {"external_ref": "m", "max_attempts": bad})
        assert_problem(refused, 422)


async def test_dead_prerequisite_holds_until_waived(api: Api, operator: httpx.AsyncClient) -> None:
    """A DEAD prerequisite never finishes; waive makes the dependent ready, one event."""
    await register(operator, "lib")
    await _units(operator, {"external_ref": "svc", "requires": ["lib"]})
    dead = await operator.post("/units/lib/dispose", json={"disposition": "DEAD"})
    assert dead.status_code == 200, dead.text
    shown = (await operator.get("/units/svc")).json()
    assert shown["waiting_on"][0]["unit"]["disposition"] == "DEAD"
    agent = await api.as_role(Role.AGENT, "agent-1")
    forbidden = await agent.post("/units/svc/waive", json={"prerequisite": "lib"})
    assert_problem(forbidden, 403)
    waived = await operator.post(
        "/units/svc/waive", json={"prerequisite": "lib", "reason": "rewritten"}
    )
    assert (waived.status_code, waived.json()["unit"]["state"]) == (200, "ready")
    events = (await operator.get("/units/svc/events")).json()["items"]
    assert [e["event_type"] for e in events] == ["waived", "registered"]


async def test_split_hands_back_children_and_the_parent_waits(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """The holder splits its unit: children registered, attempt ended split, parent waits
    on them, then comes back ready; GET shows parent, children and subtree cost."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    await register(operator, "billing", domain="payments")
    unit_id, attempt_id = await claimed(agent, start=True)
    await agent.post(f"/attempts/{attempt_id}/cost", json={"cost_cents": 40})
    split = await agent.post(
        "/units/billing/split",
        json={
            "units": [
                {"external_ref": "billing/api"},
                {"external_ref": "billing/ui", "requires": ["billing/api"], "domain": "web"},
            ],
            "reason": "too big",
            "attempt_id": attempt_id,
        },
        headers={"Idempotency-Key": "split-1"},
    )
    assert split.status_code == 201, split.text
    body = split.json()
    assert body["unit"]["state"] == "waiting"
    assert [c["external_ref"] for c in body["children"]] == ["billing/api", "billing/ui"]
    replay = await agent.post(
        "/units/billing/split",
        json={
            "units": [
                {"external_ref": "billing/api"},
                {"external_ref": "billing/ui", "requires": ["billing/api"], "domain": "web"},
            ],
            "reason": "too big",
            "attempt_id": attempt_id,
        },
        headers={"Idempotency-Key": "split-1"},
    )
    assert (replay.status_code, replay.headers.get("Idempotent-Replayed")) == (201, "true")
    parent = (await agent.get("/units/billing")).json()
    assert parent["attempts"][0]["outcome"] == "split"
    assert [c["external_ref"] for c in parent["children"]] == ["billing/api", "billing/ui"]
    ui = (await agent.get("/units/billing/ui")).json()
    assert (ui["parent"]["external_ref"], ui["domain"], ui["state"]) == (
        "billing",
        "web",
        "waiting",
    )
    api_child = (await agent.get("/units/billing/api")).json()
    assert (api_child["domain"], api_child["fleet"], api_child["state"]) == (
        "payments",
        "fleet-a",
        "ready",
    )
    events = (await agent.get("/units/billing/events")).json()["items"]
    assert (events[0]["event_type"], events[0]["detail"]["children"]) == (
        "split",
        ["billing/api", "billing/ui"],
    )
    child_events = (await agent.get("/units/billing/api/events")).json()["items"]
    assert child_events[0]["detail"]["parent"] == "billing"
    for _ in range(2):
        child_id, child_attempt = await claimed(agent, start=True)
        await agent.post(f"/attempts/{child_attempt}/cost", json={"cost_cents": 5})
        await _finish(agent, child_id, child_attempt)
    parent = (await agent.get("/units/billing")).json()
    assert (parent["state"], parent["subtree_cost_cents"], parent["cost_cents"]) == (
        "ready",
        50,
        40,
    )
    again_id, _ = await claimed(agent)
    assert again_id == unit_id


async def test_split_refusals_write_nothing(api: Api, operator: httpx.AsyncClient) -> None:
    """A taken child ref is 409 external_ref_taken; a stale attempt_id 409
    attempt_superseded; a unit not in_progress cannot be split."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    await register(operator, "taken", "big")
    taken_id, taken_attempt = await claimed(agent, start=True)
    await _finish(agent, taken_id, taken_attempt)
    unit_id, attempt_id = await claimed(agent)
    not_started = await agent.post("/units/big/split", json={"units": [{"external_ref": "big/1"}]})
    assert_refused(not_started, "unit_state_transition_allowed")
    await agent.post(
        f"/units/{unit_id}/transition", json={"to": "in_progress", "attempt_id": attempt_id}
    )
    refused = await agent.post(
        "/units/big/split",
        json={"units": [{"external_ref": "big/1"}, {"external_ref": "taken"}]},
    )
    body = assert_problem(refused, 409, "external_ref_taken")
    assert "taken" in body["detail"]
    assert (await agent.get("/units/big/1")).status_code == 404
    released = await agent.post(
        "/units/big/transition", json={"to": "ready", "outcome": "failed", "attempt_id": attempt_id}
    )
    assert released.status_code == 200, released.text
    await claimed(agent, start=True)
    fenced = await agent.post(
        "/units/big/split",
        json={"units": [{"external_ref": "big/1"}], "attempt_id": attempt_id},
    )
    assert_problem(fenced, 409, "attempt_superseded")
    assert (await agent.get("/units/big")).json()["state"] == "in_progress"
    assert (await agent.get("/units/big/1")).status_code == 404


async def test_split_children_requires_are_checked(api: Api, operator: httpx.AsyncClient) -> None:
    """A child requiring an unknown unit is 422 unknown_prerequisite, one requiring its
    parent 422 prerequisite_cycle; either way nothing is written and the unit stays."""
    agent = await api.as_role(Role.AGENT, "agent-1")
    await register(operator, "whole")
    await claimed(agent, start=True)
    unknown = await agent.post(
        "/units/whole/split", json={"units": [{"external_ref": "w/1", "requires": ["ghost"]}]}
    )
    assert_problem(unknown, 422, "unknown_prerequisite")
    cycle = await agent.post(
        "/units/whole/split", json={"units": [{"external_ref": "w/1", "requires": ["whole"]}]}
    )
    assert_problem(cycle, 422, "prerequisite_cycle")
    assert (await agent.get("/units/w/1")).status_code == 404
    assert (await agent.get("/units/whole")).json()["state"] == "in_progress"
