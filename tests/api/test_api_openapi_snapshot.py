"""/openapi.json against its committed snapshot: every operation's id, parameters (headers
included), request and response schemas per status and security, and every component
schema, so that any change to what the document says shows as a diff.

After an intended change, rewrite the snapshot and commit its diff:

    uv run python tests/api/test_api_openapi_snapshot.py
"""

from __future__ import annotations

import ast
import collections
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).with_name("openapi_snapshot.json")
SERVER = Path(__file__).parents[2] / "src" / "work_ledger"
# A class that shares a wire object's name but is no wire object: a stored answer of the
# idempotency store, not the attempt's `Outcome`.
NOT_WIRE = {("service/idempotency.py", "Outcome")}
_KEPT = ("operationId", "tags", "security", "parameters", "requestBody")


def operations(schema: dict[str, Any]) -> dict[str, Any]:
    """What the snapshot holds: per `METHOD path`, the operation without its prose (the
    docstrings), and the component schemas whole."""
    found: dict[str, Any] = {}
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            kept = {name: operation[name] for name in _KEPT if name in operation}
            kept["responses"] = {
                status: {
                    "content": answer.get("content", {}),
                    "headers": answer.get("headers", {}),
                }
                for status, answer in operation["responses"].items()
            }
            found[f"{method.upper()} {path}"] = kept
    return {
        "operations": dict(sorted(found.items())),
        "components": schema["components"],
    }


def _document() -> dict[str, Any]:
    """The document as scripts/openapi_json.py prints it (no WL_* of the caller's)."""
    from work_ledger.api.app import create_app
    from work_ledger.config import Settings

    with tempfile.TemporaryDirectory() as home:
        settings = Settings(
            database_url="postgresql://unused@127.0.0.1:1/unused",
            home=Path(home),
            lease_seconds=60,
            stall_seconds=None,
            evidence_allowed_prefixes=(),
            url="",
            token=None,
            secret="x" * 32,
        )
        return create_app(settings).openapi()


def _dumped(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True) + "\n"


def test_openapi_operations_match_the_snapshot() -> None:
    """The document's operations and components are the committed snapshot's."""
    expected = json.loads(SNAPSHOT.read_text())
    actual = json.loads(_dumped(operations(_document())))
    assert expected == actual, (
        "/openapi.json changed: if intended, run "
        "`uv run python tests/api/test_api_openapi_snapshot.py` and commit the snapshot's diff"
    )


def test_snapshot_sees_a_dropped_header() -> None:
    """Losing Idempotency-Key from one write shows in the snapshot."""
    schema = _document()
    claim = schema["paths"]["/units/claim"]["post"]
    claim["parameters"] = [p for p in claim["parameters"] if p["name"] != "Idempotency-Key"]
    assert operations(schema) != json.loads(SNAPSHOT.read_text())


def answer_schemas(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The component schemas that some operation answers with, and those they nest."""
    schemas = snapshot["components"]["schemas"]
    found: dict[str, Any] = {}
    todo: list[Any] = [op["responses"] for op in snapshot["operations"].values()]
    while todo:
        item = todo.pop()
        if isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
            name = item.get("$ref", "").removeprefix("#/components/schemas/")
            if name in schemas and name not in found:
                found[name] = schemas[name]
                todo.append(schemas[name])
    return found


def restatements(server: Path, schemas: dict[str, Any]) -> dict[str, list[str]]:
    """Per answer schema, the server's classes that declare it: its name, or its three or
    more fields exactly (a twin; fewer is a container, a page or a pair, too general to
    tell). The SDK, in client/, keeps its own: it imports nothing of the server's."""
    by_name: dict[str, list[str]] = collections.defaultdict(list)
    by_fields: dict[frozenset[str], list[str]] = collections.defaultdict(list)
    for module in sorted(server.rglob("*.py")):
        where = module.relative_to(server)
        if "client" in where.parts:
            continue
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ClassDef) and (where.as_posix(), node.name) not in NOT_WIRE:
                fields = frozenset(
                    n.target.id
                    for n in node.body
                    if isinstance(n, ast.AnnAssign)
                    and isinstance(n.target, ast.Name)
                    and not n.target.id.startswith("__")
                )
                by_name[node.name].append(f"{where}:{node.name}")
                if len(fields) >= 3:
                    by_fields[fields].append(f"{where}:{node.name}")
    found: dict[str, list[str]] = {}
    for name, schema in schemas.items():
        declared = set(by_name[name]) | set(by_fields[frozenset(schema.get("properties", ()))])
        if len(declared) > 1:
            found[name] = sorted(declared)
    return found


def test_each_wire_object_is_declared_once() -> None:
    """Each schema the document answers with is one class of the server's: no two share
    its name, and no twin restates its fields."""
    schemas = answer_schemas(json.loads(SNAPSHOT.read_text()))
    assert len(schemas) > 20
    assert restatements(SERVER, schemas) == {}


if __name__ == "__main__":
    for name in [name for name in os.environ if name.startswith("WL_")]:
        del os.environ[name]
    SNAPSHOT.write_text(_dumped(operations(_document())))
    sys.stdout.write(f"wrote {SNAPSHOT}\n")
