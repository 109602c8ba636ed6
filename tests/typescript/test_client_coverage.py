"""Every operation of /openapi.json has a method in the TypeScript client and in the
Python SDK (the TS side's own check, tsc over `METHODS`, runs in `npm run typecheck`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from support import served_app
from work_ledger.api.app import create_app
from work_ledger.client import AsyncClient, Client

METHODS_TS = Path(__file__).resolve().parents[2] / "clients/typescript/src/methods.ts"
# operationId -> the SDK method that sends it (sync and async share names).
PYTHON = {
    "blockUnit": "block",
    "cancelQuestion": "cancel_question",
    "claimNext": "claim_next",
    "claimUnit": "claim_unit",
    "disposeUnit": "dispose",
    "getQuestion": "get_question",
    "getUnit": "get_unit",
    "healthz": "healthz",
    "heartbeat": "heartbeat",
    "listBudgets": "budgets",
    "listEvents": "list_events",
    "listQuestions": "list_questions",
    "listUnitEvents": "list_events",
    "listUnits": "list_units",
    "projectEvents": "project_events",
    "readyz": "readyz",
    "recordCost": "record_cost",
    "registerUnits": "register",
    "routeQuestion": "route_question",
    "setBudget": "set_budget",
    "splitUnit": "split",
    "transitionUnit": "release",
    "unblockUnit": "unblock",
    "waivePrerequisite": "waive",
    # DESIGN §13's, as their branches name them (checked once the routes exist).
    "setControls": "set_controls",
    "listControls": "list_controls",
    "listControlEvents": "list_control_events",
    "bulkUnits": "bulk",
}
# Left out on purpose: Prometheus scrapes /metrics, and OpenTelemetry exporters speak
# OTLP themselves; neither is an agent's call.
NOT_PYTHON = {"metrics", "exportOtlpLogs"}
NOT_TYPESCRIPT = {"exportOtlpLogs"}


@pytest.fixture(scope="module")
def operation_ids(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    home = tmp_path_factory.mktemp("home")
    settings = served_app.settings_for(
        "postgresql://unused@127.0.0.1:1/unused", home, secret="coverage-test"
    )
    schema: dict[str, Any] = create_app(settings).openapi()
    return {op["operationId"] for ops in schema["paths"].values() for op in ops.values()}


def test_every_operation_has_a_python_method(operation_ids: set[str]) -> None:
    """Each operation names an SDK method that both clients have."""
    missing = sorted(
        op
        for op in operation_ids - NOT_PYTHON
        if not all(callable(getattr(c, PYTHON.get(op, "-"), None)) for c in (Client, AsyncClient))
    )
    assert missing == []


def test_every_operation_has_a_typescript_method(operation_ids: set[str]) -> None:
    """Each operation is a key of the TS client's METHODS table."""
    table = METHODS_TS.read_text().split("export const METHODS", 1)[1]
    keys = set(re.findall(r"^\s+(\w+): \"\w+\.\w+\",$", table, re.MULTILINE))
    assert sorted(operation_ids - NOT_TYPESCRIPT - keys) == []
