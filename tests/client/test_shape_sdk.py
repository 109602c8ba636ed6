"""The SDK side of DESIGN §12, without a server: what each new method sends, and how the
new fields parse (and default when an older server leaves them out)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from work_ledger.client import (
    AsyncClient,
    Budget,
    Client,
    CostRecord,
    ModelCost,
    NewChild,
    NewUnit,
    UnitDetail,
    UnitRef,
    Waiting,
)

UNIT = {"id": "u-1", "external_ref": "svc/a", "fleet": "f", "domain": "d", "state": "waiting"}
ATTEMPT = {"id": "a-1", "unit_id": "u-1", "attempt_no": 1, "agent_id": "x", "outcome": None}
LIB = {"id": "u-0", "external_ref": "lib", "state": "in_progress", "disposition": None}
ANSWERS: dict[tuple[str, str], Any] = {
    ("POST", "/units/svc%2Fa/split"): {
        "unit": UNIT,
        "children": [{"id": "c-1", "external_ref": "svc/a/1"}],
    },
    ("POST", "/units/svc%2Fa/waive"): {"unit": {**UNIT, "state": "ready"}},
    ("POST", "/budgets"): {"fleet": "f", "domain": None, "cap_cents": 500, "spent_cents": 120},
    ("GET", "/budgets"): {
        "items": [{"fleet": "f", "domain": "d", "cap_cents": 100, "spent_cents": 100}]
    },
    ("POST", "/attempts/a-1/cost"): {"unit": UNIT, "attempt": ATTEMPT},
    ("POST", "/units"): {"created": 1, "existing": 0, "units": []},
}


class Recorder:
    """A MockTransport that answers from ANSWERS and keeps what was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.raw_path.decode().split("?")[0]
        body = json.loads(request.content) if request.content else None
        self.sent.append((request.method, path, body))
        return httpx.Response(200, json=ANSWERS[(request.method, path)])


def exercise(call: Callable[[str, Any], Any]) -> list[Any]:
    """Every new method once, through `call(name, *args, **kwargs)`-style dispatch."""
    return [
        call(
            "split", "svc/a", ["svc/a/1", NewChild("svc/a/2", requires=("svc/a/1",))], reason="big"
        ),
        call("waive", "svc/a", "lib", reason="lib is dead"),
        call("set_budget", "f", 500),
        call("budgets"),
        call("record_cost", "a-1", 0, model="m", input_tokens=10, estimated=True),
        call("register", [NewUnit("svc/a", "f", requires=("lib",), max_attempts=3)]),
    ]


EXPECTED_BODIES = [
    {
        "units": [
            {"external_ref": "svc/a/1"},
            {"external_ref": "svc/a/2", "requires": ["svc/a/1"]},
        ],
        "reason": "big",
    },
    {"prerequisite": "lib", "reason": "lib is dead"},
    {"fleet": "f", "cap_cents": 500},
    None,
    {"cost_cents": 0, "model": "m", "input_tokens": 10, "estimated": True},
    {"units": [{"external_ref": "svc/a", "fleet": "f", "requires": ["lib"], "max_attempts": 3}]},
]


def check(recorder: Recorder, answers: list[Any]) -> None:
    assert [body for _, _, body in recorder.sent] == EXPECTED_BODIES
    split, waived, budget, budgets = answers[:4]
    assert [c.external_ref for c in split.children] == ["svc/a/1"]
    assert (split.unit.state, waived.state) == ("waiting", "ready")
    assert budget == Budget("f", None, 500, 120, 380)
    assert budgets == [Budget("f", "d", 100, 100, 0)]
    assert budgets[0].exhausted


def test_sync_client_sends_the_new_calls() -> None:
    """split, waive, set_budget, budgets, record_cost by model, register with requires."""
    recorder = Recorder()
    with Client("http://ledger.test", transport=httpx.MockTransport(recorder)) as client:
        answers = exercise(lambda name, *a, **kw: getattr(client, name)(*a, **kw))
    check(recorder, answers)


async def test_async_client_sends_the_same_calls() -> None:
    """The async client, generated the other way round, sends exactly the same."""
    recorder = Recorder()
    async with AsyncClient("http://ledger.test", transport=httpx.MockTransport(recorder)) as aio:
        answers = [
            await pending for pending in exercise(lambda n, *a, **kw: getattr(aio, n)(*a, **kw))
        ]
    check(recorder, answers)


def test_unit_detail_without_section_12_fields_defaults() -> None:
    """A server before §12: nothing waits, no split, no limit, no cost by model."""
    detail = UnitDetail.from_json({**UNIT, "state": "ready", "attempts": [ATTEMPT]})
    assert (detail.waiting_on, detail.requires, detail.parent, detail.children) == (
        [],
        [],
        None,
        [],
    )
    assert (detail.subtree_cost_cents, detail.unit.max_attempts) == (None, None)
    assert detail.attempts[0].cost_by_model == []


def test_unit_detail_parses_section_12_fields() -> None:
    """waiting_on, requires, parent, children, subtree cost, the limit and cost by model."""
    by_model = {"model": "m", "cost_cents": 7, "estimated_cents": 7, "input_tokens": 9}
    detail = UnitDetail.from_json(
        {
            **UNIT,
            "max_attempts": 5,
            "failed_attempts": 2,
            "attempts_allowed": 5,
            "waiting_on": [
                {"kind": "prerequisite", "unit": LIB},
                {"kind": "answer", "question_id": "q-1"},
            ],
            "requires": [LIB],
            "parent": {"id": "p-1", "external_ref": "svc"},
            "children": [{**LIB, "id": "c-1", "external_ref": "svc/a/1", "state": "done"}],
            "subtree_cost_cents": 42,
            "attempts": [{**ATTEMPT, "cost_by_model": [by_model, {"model": None}]}],
            "questions": [],
        }
    )
    lib = UnitRef("u-0", "lib", "in_progress", None)
    assert detail.waiting_on == [Waiting("prerequisite", lib), Waiting("answer", None, "q-1")]
    assert [w.describe() for w in detail.waiting_on] == [
        "prerequisite lib (in_progress)",
        "the answer to question q-1",
    ]
    assert (detail.requires, detail.parent) == ([lib], UnitRef("p-1", "svc"))
    assert detail.children[0].finished
    assert (detail.subtree_cost_cents, detail.unit.attempts_allowed) == (42, 5)
    assert detail.attempts[0].cost_by_model == [
        ModelCost("m", 7, 7, 9),
        ModelCost(None),
    ]


@pytest.mark.parametrize(
    ("record", "body", "empty"),
    [
        (CostRecord(5), {"cost_cents": 5}, False),
        (CostRecord(0, output_tokens=3), {"cost_cents": 0, "output_tokens": 3}, False),
        (
            CostRecord(0, "m", 0, 0, 0, 0),
            {
                "cost_cents": 0,
                "model": "m",
                **dict.fromkeys(
                    ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"), 0
                ),
            },
            True,
        ),
    ],
)
def test_cost_record_sends_only_what_is_set(
    record: CostRecord, body: dict[str, Any], empty: bool
) -> None:
    """Unset fields and `estimated` false stay out of the body; 0 cents, no tokens is empty."""
    assert (record.to_json(), record.empty) == (body, empty)


def test_register_fills_each_unit_without_its_own_from_the_batch() -> None:
    """`register(..., requires=, max_attempts=)`: the batch's values go to each unit that
    names none of its own; a unit's own win."""
    recorder = Recorder()
    own = NewUnit("b", "f", requires=("core",), max_attempts=9)
    with Client("http://ledger.test", transport=httpx.MockTransport(recorder)) as client:
        client.register([NewUnit("a", "f"), own], requires=["lib"], max_attempts=2)
    ((_, _, body),) = recorder.sent
    assert body["units"] == [
        {"requires": ["lib"], "max_attempts": 2, "external_ref": "a", "fleet": "f"},
        {"requires": ["core"], "max_attempts": 9, "external_ref": "b", "fleet": "f"},
    ]
