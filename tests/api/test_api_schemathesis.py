"""schemathesis against /openapi.json of a running server: no 5xx, responses conform.

A small budget per operation keeps this in CI time; WL_FUZZ_EXAMPLES raises it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import hypothesis
import hypothesis.errors
import schemathesis
from api_support import Api, register
from hypothesis import HealthCheck, Phase
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from work_ledger.auth import Role

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


def _fuzz(url: str, token: str) -> tuple[int, list[str]]:
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    headers = {"Authorization": f"Bearer {token}"}
    calls = 0
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

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
                nonlocal calls
                _no_long_waits(case)
                response = case.call(base_url=url, headers=headers, timeout=15)
                calls += 1
                case.validate_response(response, checks=CHECKS)

            try:
                run()
            except hypothesis.errors.Unsatisfiable:
                continue  # nothing to negate (no parameters and no body): nothing to test
            except Exception as exc:  # collect every operation's failure, report them all
                failures.append(f"{operation.label} [{mode.value}]: {exc}"[:2000])
    return calls, failures


async def test_schemathesis_finds_no_5xx_and_responses_conform(api: Api) -> None:
    """Positive and negative cases for every operation: no 5xx, documented statuses and bodies."""
    operator = await api.as_role(Role.OPERATOR, "op")
    await register(operator, "orders/a", "orders/b")
    token = await api.token(Role.OPERATOR, "fuzzer")
    calls, failures = await asyncio.to_thread(_fuzz, api.url, token)
    assert failures == [], "\n\n".join(failures)
    assert calls > 100
    print(f"schemathesis: {calls} calls, no failures")
