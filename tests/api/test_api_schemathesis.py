"""schemathesis against /openapi.json of a running server: no 5xx, responses conform.

A small budget per operation keeps this in CI time; WL_FUZZ_EXAMPLES raises it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
from collections.abc import Callable
from typing import Any

import hypothesis
import hypothesis.errors
import schemathesis
from hypothesis import HealthCheck, Phase
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from support.api_support import Api, register
from work_ledger.service.tokens import Role

EXAMPLES = int(os.environ.get("WL_FUZZ_EXAMPLES", "10"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _no_long_waits(case: Any) -> None:
    """Long-polls would only slow the run down: wait at most 0 seconds."""
    if isinstance(case.body, dict) and "wait_seconds" in case.body:
        case.body["wait_seconds"] = 0
    if isinstance(case.query, dict) and "wait_seconds" in case.query:
        case.query["wait_seconds"] = 0


@dataclasses.dataclass
class Fuzzed:
    """What the run did: calls per (operation, mode), modes hypothesis could not satisfy,
    and failures."""

    calls: collections.Counter[tuple[str, str]] = dataclasses.field(
        default_factory=collections.Counter
    )
    operations: dict[str, bool] = dataclasses.field(default_factory=dict)  # label: has inputs
    unsatisfiable: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    failures: list[str] = dataclasses.field(default_factory=list)

    def never_called(self, mode: GenerationMode) -> list[str]:
        return [op for op in self.operations if not self.calls[op, mode.value]]


def _has_inputs(operation: Any) -> bool:
    """Whether the operation takes anything a negative case could break."""
    groups = (operation.path_parameters, operation.query, operation.headers, operation.body)
    return any(len(group) for group in groups)


def _runner(
    operation: Any, mode: GenerationMode, url: str, headers: dict[str, str], fuzzed: Fuzzed
) -> Callable[[], None]:
    """Hypothesis's run of one operation in one mode, each call counted."""

    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        _no_long_waits(case)
        response = case.call(base_url=url, headers=headers, timeout=15)
        fuzzed.calls[operation.label, mode.value] += 1
        case.validate_response(response, checks=CHECKS)

    return run


def _fuzz(url: str, token: str) -> Fuzzed:
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    headers = {"Authorization": f"Bearer {token}"}
    fuzzed = Fuzzed()
    for result in schema.get_all_operations():
        operation = result.ok()
        fuzzed.operations[operation.label] = _has_inputs(operation)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _runner(operation, mode, url, headers, fuzzed)()
            except hypothesis.errors.Unsatisfiable:
                fuzzed.unsatisfiable.append((operation.label, mode.value))
            except Exception as exc:  # collect every operation's failure, report them all
                fuzzed.failures.append(f"{operation.label} [{mode.value}]: {exc}"[:2000])
    return fuzzed


async def test_schemathesis_finds_no_5xx_and_responses_conform(api: Api) -> None:
    """Positive and negative cases for every operation: no 5xx, documented statuses and bodies.
    Every operation is called; only one with no input at all may have no negative case."""
    operator = await api.as_role(Role.OPERATOR, "op")
    await register(operator, "orders/a", "orders/b")
    token = await api.token(Role.OPERATOR, "fuzzer")
    fuzzed = await asyncio.to_thread(_fuzz, api.url, token)
    unsatisfiable = ", ".join(f"{op} [{mode}]" for op, mode in fuzzed.unsatisfiable)
    print(
        f"schemathesis: {sum(fuzzed.calls.values())} calls over {len(fuzzed.operations)} "
        f"operations; unsatisfiable: {unsatisfiable or 'none'}"
    )
    assert fuzzed.failures == [], "\n\n".join(fuzzed.failures)
    assert fuzzed.never_called(GenerationMode.POSITIVE) == []
    without_negatives = fuzzed.never_called(GenerationMode.NEGATIVE)
    assert [op for op in without_negatives if fuzzed.operations[op]] == [], unsatisfiable
