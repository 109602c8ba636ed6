"""The OpenAPI document is a contract a generator can use (clients/typescript reads it):
stable operation ids, every problem code, the statuses middleware answers, Retry-After."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support import served_app
from work_ledger.api import problems
from work_ledger.api.app import create_app
from work_ledger.errors import (
    InvariantViolation,
    NotFound,
    Unavailable,
    WorkLedgerError,
    all_error_classes,
)

CAMEL = re.compile(r"[a-z][a-zA-Z0-9]*")


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The document of an app that is built, never started (no database)."""
    home = tmp_path_factory.mktemp("home")
    settings = served_app.settings_for(
        "postgresql://unused@127.0.0.1:1/unused", home, secret="contract-test"
    )
    return create_app(settings).openapi()


def contract_gaps(schema: dict[str, Any]) -> list[str]:
    """Each way an operation falls short of the contract, as `METHOD path: what`."""
    gaps: list[str] = []
    seen: set[str] = set()
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            where = f"{method.upper()} {path}"
            responses = op.get("responses", {})
            op_id = op.get("operationId", "")
            if not CAMEL.fullmatch(op_id):
                gaps.append(f"{where}: operationId {op_id!r} is not an explicit camelCase id")
            if op_id in seen:
                gaps.append(f"{where}: operationId {op_id!r} is used twice")
            seen.add(op_id)
            needed = {"503"}
            needed |= {"413"} if "requestBody" in op else set()
            needed |= {"429"} if "security" in op else set()
            gaps += [
                f"{where}: {status} undocumented" for status in sorted(needed - set(responses))
            ]
            for status in sorted({"409", "429", "503"} & set(responses)):
                if "Retry-After" not in responses[status].get("headers", {}):
                    gaps.append(f"{where}: {status} documents no Retry-After")
    return gaps


def test_every_operation_meets_the_contract(schema: dict[str, Any]) -> None:
    """Every route has its own camelCase operationId, 413/429/503 and Retry-After."""
    assert contract_gaps(schema) == []


def test_contract_gaps_names_what_a_route_lacks(schema: dict[str, Any]) -> None:
    """A FastAPI default id, a missing 503 and a 409 without Retry-After are each caught."""
    broken = copy.deepcopy(schema)
    claim = broken["paths"]["/units/claim"]["post"]
    claim["operationId"] = "claim_next_units_claim_post"
    del claim["responses"]["503"]
    del claim["responses"]["409"]["headers"]
    assert contract_gaps(broken) == [
        "POST /units/claim: operationId 'claim_next_units_claim_post' is not an explicit "
        "camelCase id",
        "POST /units/claim: 503 undocumented",
        "POST /units/claim: 409 documents no Retry-After",
    ]


def test_claim_and_register_have_their_stable_ids(schema: dict[str, Any]) -> None:
    """The ids clients are generated against do not follow Python renames."""
    assert schema["paths"]["/units/claim"]["post"]["operationId"] == "claimNext"
    assert schema["paths"]["/units"]["post"]["operationId"] == "registerUnits"
    assert schema["paths"]["/units"]["get"]["operationId"] == "listUnits"


def test_problem_code_is_the_enum_of_every_server_code(schema: dict[str, Any]) -> None:
    """Every class of the server's tree is in the enum; the SDK's client-side ones are not."""
    import work_ledger.client.errors  # noqa: F401  (its subclasses join the tree)

    enum = schema["components"]["schemas"]["Problem"]["properties"]["code"]["enum"]
    server = {c.code for c in all_error_classes() if c.__module__ == WorkLedgerError.__module__}
    assert server <= set(enum)
    assert {"internal_error", "method_not_allowed", "headers_too_large"} <= set(enum)
    assert not {"nothing_to_claim", "unreachable", "client_misconfigured"} & set(enum)
    assert sorted(enum) == enum == problems.all_codes()


def test_retry_after_on_503_and_the_in_flight_409() -> None:
    """The two answers to retry as they are carry Retry-After; a refusal does not."""
    in_flight = InvariantViolation("still running", invariant=problems.IN_FLIGHT)
    refusal = InvariantViolation("closed", invariant="unit_state_transition_allowed")
    assert problems.error_response(Unavailable("away")).headers["Retry-After"] == "1"
    assert problems.error_response(in_flight).headers["Retry-After"] == "1"
    assert "retry-after" not in problems.error_response(refusal).headers
    assert "retry-after" not in problems.error_response(NotFound("no")).headers


def test_the_document_script_prints_the_same_document(schema: dict[str, Any]) -> None:
    """scripts/openapi_json.py (what `npm run generate` reads) prints this document."""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, str(root / "scripts" / "openapi_json.py")],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    printed = json.loads(out)
    assert schema["paths"].keys() == printed["paths"].keys()
    assert schema["components"]["schemas"]["Problem"] == printed["components"]["schemas"]["Problem"]
