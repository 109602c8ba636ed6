"""Every action from every state over HTTP: DESIGN §4's map allows it, or it is a 409."""

from __future__ import annotations

from typing import Any

import httpx

from support.api_support import Api, assert_refused
from work_ledger.domain.model import DISPOSITIONS_FROM, Disposition, State
from work_ledger.service.tokens import Role

EVIDENCE = "https://ci.example/run/1"
ACTIONS: dict[str, tuple[str, dict[str, Any], frozenset[State]]] = {
    "start": ("transition", {"to": "in_progress"}, frozenset({State.CLAIMED})),
    "verify": (
        "transition",
        {"to": "verified", "evidence_url": EVIDENCE},
        frozenset({State.IN_PROGRESS}),
    ),
    "release": ("transition", {"to": "ready"}, frozenset({State.CLAIMED, State.IN_PROGRESS})),
    "block": ("block", {"question": "q"}, frozenset({State.IN_PROGRESS})),
    "unblock": ("unblock", {"answer": "a"}, frozenset({State.BLOCKED})),
    **{
        f"dispose {d}": (
            "dispose",
            {"disposition": d.value},
            frozenset(s for s, allowed in DISPOSITIONS_FROM.items() if d in allowed),
        )
        for d in Disposition
    },
}
# How to bring a fresh unit to each state: the steps after registering it.
PATHS: dict[State, list[tuple[str, dict[str, Any]]]] = {
    State.READY: [],
    State.WAITING: [],  # registered requiring an unfinished unit (_unit_in)
    State.CLAIMED: [("claim", {})],
    State.IN_PROGRESS: [("claim", {}), ("transition", {"to": "in_progress"})],
    State.BLOCKED: [
        ("claim", {}),
        ("transition", {"to": "in_progress"}),
        ("block", {"question": "q"}),
    ],
    State.VERIFIED: [
        ("claim", {}),
        ("transition", {"to": "in_progress"}),
        ("transition", {"to": "verified", "evidence_url": EVIDENCE}),
    ],
    State.DONE: [
        ("claim", {}),
        ("transition", {"to": "in_progress"}),
        ("transition", {"to": "verified", "evidence_url": EVIDENCE}),
        ("dispose", {"disposition": "MIGRATED"}),
    ],
    State.ABANDONED: [("dispose", {"disposition": "DROPPED"})],
}


async def _unit_in(api: Api, token: str, state: State, n: int) -> tuple[httpx.AsyncClient, str]:
    """A fresh unit in `state`, and an operator client acting as its own sub-agent."""
    client = api.client(token, **{"X-WL-Agent": f"op/cell{n}"})
    ref = f"cell/{n}"
    unit: dict[str, Any] = {"external_ref": ref, "fleet": "f"}
    if state is State.WAITING:
        unit["requires"] = [f"{ref}/lib"]
    units = (
        [unit, {"external_ref": f"{ref}/lib", "fleet": "f"}] if state is State.WAITING else [unit]
    )
    response = await client.post("/units", json={"units": units})
    assert response.status_code == 200, response.text
    for verb, body in PATHS[state]:
        response = await client.post(f"/units/{ref}/{verb}", json=body)
        assert response.status_code in (200, 201), (state, verb, response.text)
    assert (await client.get(f"/units/{ref}")).json()["state"] == state
    return client, ref


async def test_every_action_from_every_state_follows_the_map(api: Api) -> None:
    """Allowed cells succeed; every other cell is a 409 naming the rule, state and next steps."""
    token = await api.token(Role.OPERATOR, "op")
    n = 0
    for state in State:
        for action, (verb, body, from_states) in ACTIONS.items():
            n += 1
            client, ref = await _unit_in(api, token, state, n)
            response = await client.post(f"/units/{ref}/{verb}", json=body)
            if state in from_states:
                assert response.status_code in (200, 201), (state, action, response.text)
            else:
                refused = assert_refused(response, "unit_state_transition_allowed")
                assert refused["state"] == state, (state, action)
                assert state in refused["detail"]


async def test_named_claim_from_every_state(api: Api) -> None:
    """Another agent's named claim: only a ready unit; a held one names its holder."""
    token = await api.token(Role.OPERATOR, "op")
    for n, state in enumerate(State):
        _, ref = await _unit_in(api, token, state, n)
        other = api.client(token, **{"X-WL-Agent": f"op/other{n}"})
        response = await other.post(f"/units/{ref}/claim", json={})
        if state is State.READY:
            assert response.json()["unit"]["claimed_by"] == f"op/other{n}"
        elif state in (State.CLAIMED, State.IN_PROGRESS, State.BLOCKED):
            refused = assert_refused(response, "unit_claimed_only_when_claimable")
            assert f"held by op/cell{n}" in refused["detail"]
        elif state is State.WAITING:
            assert_refused(response, "prerequisites_unfinished")
        else:
            assert_refused(response, "unit_state_transition_allowed")
