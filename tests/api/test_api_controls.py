"""DESIGN §13 over HTTP: POST/GET /controls, control events, the claim's refusals by a
cap, a pause and an exclusion key, the ramp gate, and `held_back_by`."""

from __future__ import annotations

import httpx

from support.api_support import Api, assert_problem, assert_refused, claimed
from work_ledger.service.tokens import Role


async def _register(operator: httpx.AsyncClient, *units: dict) -> None:
    registered = await operator.post("/units", json={"units": list(units)})
    assert registered.status_code == 200, registered.text


async def _controls(operator: httpx.AsyncClient, **body: object) -> dict:
    response = await operator.post("/controls", json=body)
    assert response.status_code == 200, response.text
    out: dict = response.json()
    return out


async def test_controls_upsert_keeps_absent_fields_and_records_events(
    api: Api, operator: httpx.AsyncClient
) -> None:
    first = await _controls(operator, fleet="f", max_live=3, reason="start small")
    assert (first["max_live"], first["paused"], first["live"], first["drained"]) == (
        3,
        False,
        0,
        False,
    )
    paused = await _controls(operator, fleet="f", paused=True, reason="weekend")
    assert (paused["max_live"], paused["paused"], paused["pause_reason"]) == (3, True, "weekend")
    assert paused["paused_since"] is not None
    assert paused["drained"] is True
    uncapped = await _controls(operator, fleet="f", max_live=None, reason="no cap")
    assert (uncapped["max_live"], uncapped["paused"], uncapped["reason"]) == (None, True, "no cap")
    resumed = await _controls(operator, fleet="f", paused=False, reason="monday")
    assert (resumed["paused"], resumed["paused_since"], resumed["pause_reason"]) == (
        False,
        None,
        None,
    )
    listed = (await operator.get("/controls")).json()["items"]
    assert [(c["fleet"], c["domain"]) for c in listed] == [("f", None)]
    events = (await operator.get("/controls/events", params={"limit": 3})).json()
    assert [e["reason"] for e in events["items"]] == ["monday", "no cap", "weekend"]
    assert events["items"][0]["before"]["paused"] is True
    assert events["items"][0]["after"]["paused"] is False
    rest = (await operator.get("/controls/events", params={"cursor": events["next_cursor"]})).json()
    assert [e["reason"] for e in rest["items"]] == ["start small"]
    assert rest["items"][0]["before"] is None


async def test_controls_bad_input_is_a_422_and_agents_may_not_read(
    api: Api, operator: httpx.AsyncClient
) -> None:
    for body in (
        {"fleet": "f", "max_live": 1},
        {"fleet": "f", "max_live": -1, "reason": "r"},
        {"fleet": "f", "max_live": 100001, "reason": "r"},
        {"fleet": "f", "max_live": "3", "reason": "r"},
        {"fleet": "f", "gate": {"max_failed_share": 2, "last_attempts": 5}, "reason": "r"},
        {"fleet": "f", "reason": ""},
    ):
        assert_problem(await operator.post("/controls", json=body), 422)
    assert (await operator.get("/controls")).json()["items"] == []
    agent = await api.as_role(Role.AGENT, "agent-1")
    assert_problem(await agent.get("/controls"), 403)
    assert_problem(await agent.get("/controls/events"), 403)
    assert_problem(await agent.post("/controls", json={"fleet": "f", "reason": "r"}), 403)
    for units in (
        [{"external_ref": "x", "fleet": "f", "exclusive": [""]}],
        [{"external_ref": "x", "fleet": "f", "exclusive": ["k" * 201]}],
        [{"external_ref": "x", "fleet": "f", "exclusive": [f"k{i}" for i in range(21)]}],
        [{"external_ref": "x", "fleet": "f", "exclusive": "k"}],
    ):
        assert_problem(await operator.post("/units", json={"units": units}), 422)


async def test_a_named_claim_at_the_cap_is_refused_and_pull_next_goes_elsewhere(
    api: Api, operator: httpx.AsyncClient
) -> None:
    await _register(
        operator,
        {"external_ref": "c-1", "fleet": "f", "domain": "d"},
        {"external_ref": "c-2", "fleet": "f", "domain": "d"},
        {"external_ref": "o-1", "fleet": "other"},
    )
    await _controls(operator, fleet="f", domain="d", max_live=1, reason="ramp")
    first = await api.as_role(Role.AGENT, "agent-1")
    second = await api.as_role(Role.AGENT, "agent-2")
    await claimed(first)
    refused = assert_refused(await second.post("/units/c-2/claim", json={}), "cap_reached")
    assert refused["code"] == "cap_reached"
    assert (refused["fleet"], refused["domain"], refused["max_live"], refused["live"]) == (
        "f",
        "d",
        1,
        1,
    )
    shown = (await operator.get("/units/c-2")).json()
    assert shown["held_back_by"] == [
        {"kind": "cap", "fleet": "f", "domain": "d", "max_live": 1, "live": 1}
    ]
    elsewhere = (await second.post("/units/claim", json={})).json()
    assert elsewhere["unit"]["external_ref"] == "o-1"


async def test_a_named_claim_in_a_paused_scope_says_do_not_retry(
    api: Api, operator: httpx.AsyncClient
) -> None:
    await _register(operator, {"external_ref": "p-1", "fleet": "f", "domain": "d"})
    await _controls(operator, fleet="f", paused=True, reason="bad model release")
    # A domain's own paused = false does not lift its fleet's pause.
    await _controls(operator, fleet="f", domain="d", paused=False, reason="domain open")
    agent = await api.as_role(Role.AGENT, "agent-1")
    refused = assert_refused(await agent.post("/units/p-1/claim", json={}), "paused")
    assert (refused["fleet"], refused["domain"], refused["pause_reason"]) == (
        "f",
        None,
        "bad model release",
    )
    assert "Do not retry" in refused["detail"]
    assert (await agent.post("/units/claim", json={})).json()["unit"] is None
    shown = (await operator.get("/units/p-1")).json()
    assert shown["held_back_by"] == [
        {"kind": "paused", "fleet": "f", "domain": None, "reason": "bad model release"}
    ]
    await _controls(operator, fleet="f", paused=False, reason="fixed")
    assert (await agent.post("/units/claim", json={})).json()["unit"]["external_ref"] == "p-1"


async def test_a_shared_key_refuses_the_named_claim_and_shows_its_holder(
    api: Api, operator: httpx.AsyncClient
) -> None:
    await _register(
        operator,
        {"external_ref": "e-1", "fleet": "f", "exclusive": ["src/billing", "db/orders"]},
        {"external_ref": "e-2", "fleet": "f", "exclusive": ["src/billing"]},
    )
    first = await api.as_role(Role.AGENT, "agent-1")
    second = await api.as_role(Role.AGENT, "agent-2")
    holder_id, _ = await claimed(first)
    refused = assert_refused(await second.post("/units/e-2/claim", json={}), "exclusive_key_held")
    assert refused["key"] == "src/billing"
    assert refused["unit"] == {"id": holder_id, "external_ref": "e-1", "state": "claimed"}
    assert "Take another unit" in refused["detail"]
    shown = (await operator.get("/units/e-2")).json()
    assert shown["exclusive"] == ["src/billing"]
    assert shown["held_back_by"] == [
        {
            "kind": "exclusive",
            "key": "src/billing",
            "unit": {"id": holder_id, "external_ref": "e-1", "state": "claimed"},
        }
    ]
    assert (await operator.get("/units/e-1")).json()["held_back_by"] == []
    assert (await second.post("/units/claim", json={})).json()["unit"] is None


async def test_split_children_take_the_parents_keys_unless_given(
    api: Api, operator: httpx.AsyncClient
) -> None:
    await _register(operator, {"external_ref": "big", "fleet": "f", "exclusive": ["mod"]})
    agent = await api.as_role(Role.AGENT, "agent-1")
    unit_id, attempt_id = await claimed(agent, start=True)
    split = await agent.post(
        f"/units/{unit_id}/split",
        json={
            "attempt_id": attempt_id,
            "units": [
                {"external_ref": "part-1"},
                {"external_ref": "part-2", "exclusive": ["other"]},
                {"external_ref": "part-3", "exclusive": []},
            ],
        },
    )
    assert split.status_code == 201, split.text
    shown = [(await operator.get(f"/units/part-{i}")).json()["exclusive"] for i in (1, 2, 3)]
    assert shown == [["mod"], ["other"], []]


async def test_the_ramp_gate_refuses_a_raise_until_attempts_end_well(
    api: Api, operator: httpx.AsyncClient
) -> None:
    gate = {"max_failed_share": 0.5, "last_attempts": 2}
    await _controls(operator, fleet="f", max_live=1, gate=gate, reason="ramp 1")
    refused = await operator.post("/controls", json={"fleet": "f", "max_live": 2, "reason": "up"})
    body = assert_problem(refused, 409, "ramp_gate_closed")
    assert (body["ended_attempts"], body["last_attempts"], body["max_failed_share"]) == (0, 2, 0.5)
    assert body["failed_share"] is None
    # Lowering is never gated; removing the cap is a raise.
    assert_problem(
        await operator.post("/controls", json={"fleet": "f", "max_live": None, "reason": "x"}),
        409,
        "ramp_gate_closed",
    )
    await _register(operator, *({"external_ref": f"g-{i}", "fleet": "f"} for i in range(3)))
    agent = await api.as_role(Role.AGENT, "agent-1")
    for _ in range(2):
        unit_id, attempt_id = await claimed(agent, start=True)
        verified = await agent.post(
            f"/units/{unit_id}/transition",
            json={"to": "verified", "attempt_id": attempt_id, "evidence_url": "https://e/1"},
        )
        assert verified.status_code == 200, verified.text
    raised = await _controls(operator, fleet="f", max_live=2, reason="gate open")
    assert raised["max_live"] == 2
    # The cap changed: the gate counts again from zero, and force records the figures.
    forced = await _controls(operator, fleet="f", max_live=4, force=True, reason="push")
    assert forced["max_live"] == 4
    [event, *_] = (await operator.get("/controls/events")).json()["items"]
    assert event["forced"] is True
    assert event["gate_figures"]["ended_attempts"] == 0
