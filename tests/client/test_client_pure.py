"""The SDK's pure parts: problem+json to typed errors, records, units files, its imports."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import work_ledger.client
from work_ledger.client import Unit, UnitDetail
from work_ledger.client import _calls as calls
from work_ledger.client._endpoints import Endpoints
from work_ledger.client._sending import Sending
from work_ledger.client._work import lease_of
from work_ledger.client.errors import NothingToClaim, Unreachable, error_from_response
from work_ledger.client.models import Claim
from work_ledger.client.units_file import BadRow, Row, read_units
from work_ledger.errors import (
    AttemptSuperseded,
    IdempotencyKeyReused,
    InvalidInput,
    InvariantViolation,
    Unavailable,
    WorkLedgerError,
)


def problem(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_error_from_response_maps_code_to_class() -> None:
    """The problem's code picks the class; invariant, state and allowed are carried."""
    exc = error_from_response(
        409,
        problem(
            type="urn:work-ledger:problem:attempt_superseded",
            code="attempt_superseded",
            detail="your claim is lost",
            invariant="attempt_superseded",
            unit_id="u-1",
            state="claimed",
            allowed=["start", "heartbeat"],
        ),
    )
    assert type(exc) is AttemptSuperseded
    assert (exc.invariant, exc.unit_id, exc.state, exc.allowed) == (
        "attempt_superseded",
        "u-1",
        "claimed",
        ["start", "heartbeat"],
    )
    assert str(exc) == "attempt_superseded: your claim is lost"


def test_error_from_response_uses_type_without_code() -> None:
    """No `code`: the last segment of the problem type names the class."""
    body = problem(type="urn:work-ledger:problem:idempotency_key_reused", detail="x")
    assert type(error_from_response(422, body)) is IdempotencyKeyReused


def test_error_from_response_falls_back_to_status() -> None:
    """An unknown code or a non-JSON body: the class of the HTTP status."""
    assert type(error_from_response(409, problem(code="brand_new", detail="d"))) is (
        InvariantViolation
    )
    plain = error_from_response(422, b"<html>bad gateway</html>")
    assert type(plain) is InvalidInput
    assert "HTTP 422" in plain.detail
    assert type(error_from_response(502, b"")) is WorkLedgerError


def test_unit_detail_parses_flat_and_nested() -> None:
    """GET /units/{unit} answers flat; both shapes parse, times become datetimes."""
    unit = {"id": "1", "external_ref": "r", "state": "claimed", "lease_expires_at": None}
    attempt = {"id": "a", "unit_id": "1", "attempt_no": 1, "outcome": None}
    flat = UnitDetail.from_json({**unit, "attempts": [attempt], "questions": []})
    nested = UnitDetail.from_json({"unit": unit, "attempts": [attempt], "questions": []})
    assert flat == nested
    assert flat.live_attempt is not None
    assert flat.live_attempt.id == "a"


def test_lease_of_reads_granted_lease() -> None:
    """The lease to renew: asked for, else lease_expires_at - last_heartbeat_at, else 900."""
    granted = Unit.from_json(
        {
            "id": "1",
            "external_ref": "r",
            "last_heartbeat_at": "2026-01-01T00:00:00+00:00",
            "lease_expires_at": "2026-01-01T00:00:30+00:00",
        }
    )
    assert (lease_of(granted, None), lease_of(granted, 5)) == (30, 5)
    assert lease_of(Unit.from_json({"id": "1", "external_ref": "r"}), None) == 900


def test_read_units_names_bad_csv_rows_by_line(tmp_path: Path) -> None:
    """CSV: blank lines skipped, quoted newlines counted, each bad row named by line."""
    path = tmp_path / "units.csv"
    path.write_text(
        'external_ref,fleet,domain\na,f1,orders\n\nb,,orders\n"c\nd",f1,x\na,f1,\ne,f1,x,extra\n'
    )
    rows = list(read_units(path))
    assert [(r.line, r.unit.external_ref) for r in rows if isinstance(r, Row)] == [
        (2, "a"),
        (5, "c\nd"),
    ]
    assert [r.line for r in rows if isinstance(r, BadRow)] == [4, 7, 8]


def test_read_units_refuses_unknown_csv_columns(tmp_path: Path) -> None:
    """A header with an unknown column is one bad row, line 1."""
    path = tmp_path / "units.csv"
    path.write_text("external_ref,flet\na,f\n")
    assert [(r.line, "flet" in r.error) for r in read_units(path) if isinstance(r, BadRow)] == [
        (1, True)
    ]


def test_read_units_fills_default_fleet(tmp_path: Path) -> None:
    """--fleet fills rows that leave the fleet out."""
    path = tmp_path / "units.jsonl"
    path.write_text('{"external_ref": "a"}\n')
    (row,) = read_units(path, fleet="fleet-x")
    assert isinstance(row, Row)
    assert row.unit.fleet == "fleet-x"


@pytest.mark.parametrize(
    "module", sorted(Path(work_ledger.client.__file__).parent.glob("*.py")), ids=lambda p: p.name
)
def test_client_imports_only_errors_from_the_package(module: Path) -> None:
    """The SDK could ship alone: from work_ledger it imports only errors and itself."""
    tree = ast.parse(module.read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {m for m in imported if m.startswith("work_ledger")}
    assert {m for m in ours if not m.startswith("work_ledger.client")} <= {"work_ledger.errors"}


@dataclass
class _Policy:
    endpoints: Endpoints = field(default_factory=lambda: Endpoints("http://ledger.test"))
    timeout: float = 30.0
    retries: int = 2
    backoff: float = 0.2


def test_sending_builds_the_request_of_a_write() -> None:
    """A write sends its JSON and Idempotency-Key; its timeout adds the long-poll wait."""
    sending = Sending(calls.claim_next("orders", None, 5, "k-1"), _Policy())
    assert sending.request == {
        "method": "POST",
        "url": "http://ledger.test/units/claim",
        "json": {"domain": "orders", "wait_seconds": 5},
        "params": {},
        "headers": {"Idempotency-Key": "k-1"},
        "timeout": 35.0,
    }


def test_sending_retries_503_until_the_last_try() -> None:
    """503 and an in-flight key are retried; the last try's answer is final whatever it is."""
    sending = Sending(calls.get_unit("u/1"), _Policy(retries=1))
    assert sending.request["url"] == "http://ledger.test/units/u%2F1"
    assert not sending.answered(503, b"")
    assert not sending.answered(409, b'{"code": "idempotency_key_in_flight"}')
    assert sending.answered(409, b'{"code": "attempt_superseded"}')
    assert 0.1 <= sending.delay() <= 0.2
    assert sending.answered(503, b"")
    with pytest.raises(Unavailable):
        sending.result(503, b"")


def test_sending_parses_answers_and_errors() -> None:
    """A 2xx parses into its model; anything else raises the server's typed error."""
    sending = Sending(calls.health("/healthz"), _Policy())
    assert sending.result(200, b'{"status": "ok"}') == {"status": "ok"}
    with pytest.raises(AttemptSuperseded):
        sending.result(409, problem(code="attempt_superseded", detail="lost"))


def test_sending_raises_unreachable_on_the_last_connection_error() -> None:
    """A connection error is retried, and names the URL and the tries on the last one."""
    sending = Sending(calls.health("/healthz"), _Policy(retries=1))
    sending.failed(ConnectionError("refused"))
    sending.delay()
    with pytest.raises(Unreachable, match=r"http://ledger\.test .* after 2 tries"):
        sending.failed(ConnectionError("refused"))


def test_claimed_refuses_an_empty_claim() -> None:
    """An empty claim is NothingToClaim naming the domain."""
    with pytest.raises(NothingToClaim, match="in domain 'orders'"):
        calls.claimed(Claim(unit=None, attempt=None, resumed=False), "orders")
