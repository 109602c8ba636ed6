"""Hostile input against a real server: every case is a 4xx problem and changes nothing.

Last, schemathesis fuzzes every operation of /openapi.json: never a 5xx.

SQL-injection strings in every text field, path and query parameter; NUL bytes, lone
surrogates and other unicode edges; huge, negative and zero numbers; deeply nested JSON;
bodies over 1 MiB; malformed, truncated, forged, revoked and wrong-role tokens. Before
and after each case the five ledger tables (and the tokens) are hashed: equal, or the
case fails.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, strategies

from support.served import Served, cli, client, ledger_env, mint
from work_ledger.api.ratelimit import FailureLimiter
from work_ledger.db.connect import connect, ensure_database, with_database
from work_ledger.service.tokens import Role

pytestmark = pytest.mark.faults
PROBLEM = "application/problem+json"
HTTP_LAYER_REFUSAL = "Invalid HTTP request received."
FUZZ_EXAMPLES_PER_OPERATION = 15
TABLES = (
    "work_units",
    "work_unit_attempts",
    "work_unit_events",
    "blocking_questions",
    "wl_api_tokens",
)
SNAPSHOT = " UNION ALL ".join(
    f"SELECT '{t}', count(*), md5(coalesce(string_agg(r::text, '|' ORDER BY r::text), '')) "
    f"FROM {t} AS r"
    for t in TABLES
)

INJECTIONS = [
    "' OR '1'='1",
    "'; DROP TABLE work_units; --",
    '" OR ""="',
    "1; SELECT pg_sleep(10) --",
    "') ON CONFLICT DO NOTHING; UPDATE work_units SET state='done'; --",
    "$1::text",
    "%s%s%n",
    "\\'; TRUNCATE work_unit_events CASCADE; --",
]
UNICODE_BAD = ["nul\u0000byte", "\u0000", "lone \ud800 surrogate", "\udfff"]
UNICODE_OK = [
    "\u202eRTL override\u202c",
    "\U0001d54f\U0001f642\U0001f9ea four-byte",
    "e\u0301 ZWJ\u200d\U0001f469\u200d\U0001f4bb",
    "\ufeffbom",
]


@dataclass
class Target:
    """A running server with units in known states, and a token per role."""

    url: str
    database_url: str
    tokens: dict[str, str]
    ids: dict[str, str] = field(default_factory=dict)
    conn: Any = None  # one connection for the snapshots, one client for the requests
    http: Any = None
    tried: int = 0


async def _setup(target: Target) -> None:
    async with httpx.AsyncClient(base_url=target.url, timeout=30) as http:
        op = {"Authorization": f"Bearer {target.tokens['operator']}"}
        agent = {"Authorization": f"Bearer {target.tokens['agent']}"}
        units = [{"external_ref": r, "fleet": "f"} for r in ("held", "ready", "closed")]
        registered = (await http.post("/units", json={"units": units}, headers=op)).json()
        target.ids.update({u["external_ref"]: u["id"] for u in registered["units"]})
        claim = (await http.post("/units/held/claim", json={}, headers=agent)).json()
        target.ids["attempt"] = claim["attempt"]["id"]
        started = await http.post(
            "/units/held/transition", json={"to": "in_progress"}, headers=agent
        )
        assert started.status_code == 200, started.text
        closed = await http.post(
            "/units/closed/dispose", json={"disposition": "DROPPED"}, headers=op
        )
        assert closed.status_code == 200, closed.text


@pytest.fixture(scope="module")
async def target(
    server_url: str, template_name: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Target]:
    name = f"wl_hostile_{uuid.uuid4().hex[:8]}"
    await ensure_database(server_url, name, template=template_name)
    url = with_database(server_url, name)
    home = tmp_path_factory.mktemp("hostile")
    server = Served(ledger_env(url, home), home)
    await server.start()
    roles = [
        Role.OPERATOR,
        Role.AGENT,
        Role.HARNESS,
        Role.TRIAGE,
        Role.PROJECTOR,
        Role.READER,
    ]
    grants = [(r, f"{r.value}-1") for r in roles] + [(Role.AGENT, "other-agent")]
    minted = await mint(url, grants)
    tokens = {r.value: t for r, t in zip(roles, minted, strict=False)}
    tokens["other"] = minted[-1]
    found = Target(server.url, url, tokens)
    await _setup(found)
    found.conn = await connect(url)
    found.http = client(server.url, timeout=30)  # shared by the module: idle gaps between tests
    yield found
    await found.http.aclose()
    await found.conn.close()
    server.stop()
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
    print(f"\nhostile inputs tried (hand-written and fuzzed): {found.tried}")


async def _snapshot(conn: asyncpg.Connection) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in await conn.fetch(SNAPSHOT)]


async def _send(
    target: Target,
    method: str,
    path: str,
    *,
    role: str | None = "operator",
    body: Any = None,
    content: bytes | None = None,
    headers: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
    harmless_ok: bool = False,
) -> httpx.Response:
    """Send one hostile request; check it was refused with a 4xx and nothing changed.

    With `harmless_ok`, a 2xx that changed nothing passes too (a search for a hostile
    string finds nothing; it is not a refusal, and not an injection either)."""
    sent = dict(headers or {})
    if role is not None and "Authorization" not in sent:
        sent["Authorization"] = f"Bearer {target.tokens[role]}"
    if content is None and body is not None:
        content = json.dumps(body).encode()
        sent.setdefault("Content-Type", "application/json")
    path = path.format(**target.ids)
    before = await _snapshot(target.conn)
    response = await target.http.request(method, path, content=content, headers=sent, params=params)
    after = await _snapshot(target.conn)
    target.tried += 1
    assert after == before, f"{method} {path} changed the ledger"
    if harmless_ok and response.status_code < 300:
        return response
    assert 400 <= response.status_code < 500, (method, path, response.status_code, response.text)
    if response.text != HTTP_LAYER_REFUSAL:  # uvicorn refuses illegal header bytes itself
        assert response.headers["content-type"].startswith(PROBLEM), response.headers
    return response


# -- text fields and parameters ----------------------------------------------------------

WRITES_WITH_TEXT: list[tuple[str, str, dict[str, Any], str]] = [
    # (role, path, body with a {x} where the hostile text goes, why it must be refused)
    ("operator", "/units/{x}/claim", {}, "agent-only; operators do not claim"),
    ("agent", "/units/{x}/claim", {}, "no such unit"),
    ("other", "/units/claim", {"domain": "{x}", "lease_seconds": 5}, "no such domain: null"),
    ("agent", "/units/{x}/transition", {"to": "in_progress"}, "no such unit"),
    ("agent", "/units/held/transition", {"to": "{x}"}, "not a state"),
    ("agent", "/units/held/transition", {"to": "verified", "evidence_url": "{x}"}, "not a link"),
    ("agent", "/units/ready/transition", {"to": "ready", "reason": "{x}"}, "not held"),
    ("agent", "/units/ready/block", {"question": "{x}"}, "not held"),
    (
        "agent",
        "/units/held/block",
        {"question": "q", "assignee_group_slug": "s", "x": "{x}"},
        "unknown field",
    ),
    ("triage", "/units/held/unblock", {"answer": "{x}"}, "not blocked"),
    ("agent", "/units/held/dispose", {"disposition": "{x}"}, "not a disposition"),
    ("agent", "/units/ready/dispose", {"disposition": "DROPPED", "reason": "{x}"}, "not held"),
    (
        "operator",
        "/units",
        {"units": [{"external_ref": "{x}", "fleet": "f", "owner": "{x}"}]},
        "unknown field",
    ),
    ("triage", "/questions/{x}/cancel", {"reason": "{x}"}, "not a uuid"),
    ("agent", "/attempts/{x}/cost", {"cost_cents": 5}, "not a uuid"),
    (
        "projector",
        "/projection/events",
        {
            "events": [
                {
                    "source_event_id": "{x}",
                    "workflow_id": "{x}",
                    "type": "{x}",
                    "occurred_at": "{x}",
                }
            ]
        },
        "not a time",
    ),
]
READS_WITH_TEXT: list[tuple[str, dict[str, str]]] = [
    ("/units/{x}", {}),
    ("/units/{x}/events", {}),
    ("/units", {"state": "{x}"}),
    ("/units", {"disposition": "{x}"}),
    ("/units", {"limit": "{x}"}),
    ("/units", {"cursor": "{x}"}),
    ("/events", {"cursor": "{x}"}),
    ("/events", {"limit": "{x}"}),
    ("/questions", {"status": "{x}"}),
    ("/questions", {"cursor": "{x}"}),
    ("/questions/{x}", {}),
]


def _fill(value: Any, text: str) -> Any:
    if isinstance(value, str):
        return value.replace("{x}", text)
    if isinstance(value, dict):
        return {k: _fill(v, text) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, text) for v in value]
    return value


@pytest.mark.parametrize("text", INJECTIONS + UNICODE_BAD)
async def test_hostile_text_in_every_write_is_refused_without_effect(
    target: Target, text: str
) -> None:
    """Injection strings and NUL/surrogates in each write's text fields: 4xx, nothing written."""
    for role, path, body, why in WRITES_WITH_TEXT:
        response = await _send(
            target,
            "POST",
            path.replace("{x}", _quoted(text)),
            role=role,
            body=_fill(body, text),
            harmless_ok=role == "other" and path == "/units/claim",
        )
        assert response.status_code != 401, why
        if response.status_code == 200:
            assert response.json()["unit"] is None


def _quoted(text: str) -> str:
    """Percent-encoded UTF-8 (lone surrogates too, as the invalid bytes they would be)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


@pytest.mark.parametrize("text", INJECTIONS + UNICODE_BAD)
async def test_hostile_text_in_every_query_parameter_is_harmless(target: Target, text: str) -> None:
    """Injection strings in paths and query parameters: a 4xx or an empty page, no change."""
    conn = await connect(target.database_url)
    try:
        before = await _snapshot(conn)
        async with httpx.AsyncClient(base_url=target.url, timeout=30) as http:
            auth = {"Authorization": f"Bearer {target.tokens['reader']}"}
            for path, params in [*READS_WITH_TEXT, ("/units", {"domain": "{x}", "fleet": "{x}"})]:
                query = "&".join(f"{k}={_quoted(_fill(v, text))}" for k, v in params.items())
                url = path.replace("{x}", _quoted(text)) + (f"?{query}" if query else "")
                response = await http.get(url, headers=auth)
                target.tried += 1
                assert response.status_code < 500, (url, params, response.text)
                if response.status_code == 200:
                    assert response.json()["items"] == [], (url, params)
        assert await _snapshot(conn) == before
    finally:
        await conn.close()


async def test_injection_and_unicode_text_is_stored_verbatim(target: Target) -> None:
    """Valid but nasty text (injection strings, RTL, 4-byte, ZWJ) is data: stored and read back."""
    refs = [f"nasty-{i}-{t}" for i, t in enumerate(INJECTIONS + UNICODE_OK)]
    async with httpx.AsyncClient(base_url=target.url, timeout=30) as http:
        op = {"Authorization": f"Bearer {target.tokens['operator']}"}
        units = [{"external_ref": r, "fleet": r[:200], "domain": r[:200]} for r in refs]
        response = await http.post("/units", json={"units": units}, headers=op)
        assert response.status_code == 200, response.text
        target.tried += len(refs)
        for registered in response.json()["units"]:
            shown = (await http.get(f"/units/{registered['id']}", headers=op)).json()
            assert shown["external_ref"] == registered["external_ref"]
            assert shown["fleet"] == registered["external_ref"][:200]
    conn = await connect(target.database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM work_units") == 3 + len(refs)
        stored = {
            r["external_ref"] for r in await conn.fetch("SELECT external_ref FROM work_units")
        }
        assert set(refs) <= stored
    finally:
        await conn.close()


UNSTORABLE_WRITES: list[tuple[str, str, dict[str, Any]]] = [
    # Writes that would succeed but for the unstorable text in them.
    ("operator", "/units", {"units": [{"external_ref": "{x}", "fleet": "f"}]}),
    ("operator", "/units", {"units": [{"external_ref": "nul-fleet", "fleet": "{x}"}]}),
    (
        "operator",
        "/units",
        {"units": [{"external_ref": "nul-domain", "fleet": "f", "domain": "{x}"}]},
    ),
    (
        "operator",
        "/units",
        {"units": [{"external_ref": "nul-wf", "fleet": "f", "workflow_id": "{x}"}]},
    ),
    ("agent", "/units/held/block", {"question": "{x}"}),
    ("agent", "/units/held/block", {"question": "q", "assignee_group_slug": "{x}"}),
    ("agent", "/units/held/transition", {"to": "ready", "reason": "{x}"}),
    (
        "agent",
        "/units/held/transition",
        {"to": "verified", "evidence_url": "https://ci.example/{x}"},
    ),
    ("operator", "/units/ready/dispose", {"disposition": "DROPPED", "reason": "{x}"}),
    ("agent", "/units/held/claim", {}),
]


@pytest.mark.parametrize("text", UNICODE_BAD)
async def test_unstorable_text_in_valid_writes_is_422(target: Target, text: str) -> None:
    """NUL bytes and lone surrogates cannot be stored as text: 422 naming the field, never 500."""
    for role, path, body in UNSTORABLE_WRITES:
        if path.endswith("/claim"):
            path = f"/units/held{_quoted(text)}/claim"
        response = await _send(target, "POST", path, role=role, body=_fill(body, text))
        assert response.status_code in (404, 422), (path, body, response.text)


# -- numbers -----------------------------------------------------------------------------

BAD_NUMBERS: list[Any] = [0, -1, -(2**63), 2**63, 10**100, 1.5, 1e308, "5", True, None, [], {}]


@pytest.mark.parametrize("value", BAD_NUMBERS, ids=repr)
async def test_hostile_numbers_are_refused_without_effect(target: Target, value: Any) -> None:
    """Huge, negative, zero, fractional and mistyped numbers for cost, lease, wait and limit."""
    attempt = target.ids["attempt"]
    sends = [("agent", f"/attempts/{attempt}/cost", "cost_cents")]
    if value is not None:  # a null lease means "the default": valid
        sends.append(("agent", f"/attempts/{attempt}/heartbeat", "lease_seconds"))
        sends.append(("other", "/units/closed/claim", "lease_seconds"))  # accepted would be 409
    if value != 0:  # no wait is valid; the agent would get its held unit back, resumed
        sends.append(("agent", "/units/claim", "wait_seconds"))
    for role, path, name in sends:
        response = await _send(target, "POST", path, role=role, body={name: value})
        assert response.status_code == 422, (path, name, response.text)
    if value is not None and not isinstance(value, (list, dict)):
        response = await _send(
            target, "GET", "/units", role="reader", params={"limit": json.dumps(value)}
        )
        assert response.status_code == 422, response.text


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("cost_cents", 10**12 + 1),
        ("lease_seconds", 86401),
        ("lease_seconds", 2**31),
        ("wait_seconds", 61),
    ],
)
async def test_numbers_just_past_their_bounds_are_refused(
    target: Target, field_name: str, value: int
) -> None:
    """One past each documented bound: 422."""
    path = (
        f"/attempts/{target.ids['attempt']}/cost" if field_name == "cost_cents" else "/units/claim"
    )
    role = "agent" if field_name == "cost_cents" else "other"
    response = await _send(target, "POST", path, role=role, body={field_name: value})
    assert response.status_code == 422


@pytest.mark.parametrize(
    "raw",
    [
        b'{"cost_cents": NaN}',
        b'{"cost_cents": Infinity}',
        b'{"cost_cents": -Infinity}',
        b'{"cost_cents": 1e999}',
        b'{"cost_cents": 99999999999999999999999999999999}',
    ],
)
async def test_non_finite_numbers_are_refused(target: Target, raw: bytes) -> None:
    """NaN, Infinity and overflowing literals in a cost: 422."""
    path = f"/attempts/{target.ids['attempt']}/cost"
    headers = {"Content-Type": "application/json"}
    response = await _send(target, "POST", path, role="agent", content=raw, headers=headers)
    assert response.status_code == 422


# -- shapes and sizes --------------------------------------------------------------------


@pytest.mark.parametrize("depth", [64, 5_000, 100_000])
async def test_deeply_nested_json_is_refused(target: Target, depth: int) -> None:
    """Nested arrays and objects thousands deep: 4xx, no crash (and the server still answers)."""
    arrays = b'{"units": ' + b"[" * depth + b"]" * depth + b"}"
    objects = b'{"lease_seconds": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}"
    headers = {"Content-Type": "application/json"}
    await _send(target, "POST", "/units", content=arrays, headers=headers)
    await _send(target, "POST", "/units/claim", role="other", content=objects, headers=headers)
    async with httpx.AsyncClient(base_url=target.url) as http:
        assert (await http.get("/readyz")).status_code == 200


async def test_bodies_over_one_mebibyte_are_413(target: Target) -> None:
    """1 MiB + 1 bytes, declared or streamed in chunks: 413, nothing read into the ledger."""
    units = [{"external_ref": f"big-{i}-" + "x" * 200, "fleet": "f"} for i in range(5000)]
    body = json.dumps({"units": units}).encode()
    assert len(body) > 1 << 20
    headers = {"Content-Type": "application/json"}
    declared = await _send(target, "POST", "/units", content=body, headers=headers)
    assert declared.status_code == 413

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    conn = await connect(target.database_url)
    try:
        before = await _snapshot(conn)
        async with httpx.AsyncClient(base_url=target.url, timeout=30) as http:
            auth = {"Authorization": f"Bearer {target.tokens['operator']}"}
            streamed = await http.post("/units", content=chunks(), headers=auth | headers)
        assert streamed.status_code == 413
        assert await _snapshot(conn) == before
        target.tried += 1
    finally:
        await conn.close()
    padded = json.dumps({"question": "q" * 8000 + "x" * (1 << 20)}).encode()
    too_big = await _send(
        target, "POST", "/units/held/block", role="agent", content=padded, headers=headers
    )
    assert too_big.status_code == 413


@pytest.mark.parametrize(
    "raw",
    [b"", b"null", b"[]", b'"units"', b"{", b"\xff\xfe\x00", b'{"units": [] , }', b"{" * 10],
)
async def test_malformed_bodies_are_422(target: Target, raw: bytes) -> None:
    """Not JSON, not an object, not UTF-8: 422."""
    headers = {"Content-Type": "application/json"}
    response = await _send(target, "POST", "/units", content=raw, headers=headers)
    assert response.status_code == 422


# -- tokens ------------------------------------------------------------------------------


def _bad_tokens(target: Target) -> list[str]:
    good = target.tokens["agent"]
    prefix = good.split("_")[1]
    return [
        "",
        "Bearer",
        "Basic YWdlbnQ6c2VjcmV0",
        "bearer wl_",
        f"Bearer {good[:-1]}",
        f"Bearer {good[: len(good) // 2]}",
        f"Bearer {good}x",
        f"Bearer wl_{prefix}_" + "A" * 43,
        "Bearer wl_00000000_" + "A" * 43,
        "Bearer wl_' OR '1'='1_" + "A" * 43,
        f"Bearer wl_{prefix}_" + "A" * 5000,
        f"Bearer {good} {good}",
        "Bearer " + good.replace("_", "-"),
    ]


async def test_revoked_token_is_401(target: Target, tmp_path: Path) -> None:
    """A token revoked with `work-ledger token revoke` no longer claims."""
    [token] = await mint(target.database_url, [(Role.AGENT, "revoked-agent")])
    code, out = await cli(
        ledger_env(target.database_url, tmp_path), "token", "revoke", token.split("_")[1]
    )
    assert code == 0, out
    response = await _send(
        target,
        "POST",
        "/units/claim",
        role=None,
        body={},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 401


WRONG_ROLE: list[tuple[str, str, str, dict[str, Any]]] = [
    ("reader", "POST", "/units/claim", {}),
    ("reader", "POST", "/units", {"units": [{"external_ref": "r", "fleet": "f"}]}),
    ("triage", "POST", "/units/claim", {}),
    ("projector", "POST", "/units/ready/claim", {}),
    ("harness", "POST", "/units/held/transition", {"to": "ready"}),
    ("harness", "POST", "/units/held/dispose", {"disposition": "DEAD"}),
    ("agent", "POST", "/units", {"units": [{"external_ref": "a", "fleet": "f"}]}),
    ("agent", "POST", "/units/held/unblock", {"answer": "a"}),
    ("agent", "POST", "/projection/events", {"events": []}),
    ("triage", "POST", "/units/held/dispose", {"disposition": "DEAD"}),
    ("other", "POST", "/units/held/transition", {"to": "ready"}),
    ("other", "POST", "/attempts/{attempt}/heartbeat", {}),
    ("other", "POST", "/attempts/{attempt}/cost", {"cost_cents": 5}),
    ("other", "POST", "/units/held/block", {"question": "mine now?"}),
    ("other", "POST", "/units/held/dispose", {"disposition": "DEAD"}),
]


@pytest.mark.parametrize(("role", "method", "path", "body"), WRONG_ROLE)
async def test_token_valid_for_another_role_or_agent_is_403(
    target: Target, role: str, method: str, path: str, body: dict[str, Any]
) -> None:
    """A real token used beyond its role, or on another agent's unit: 403, nothing changed."""
    response = await _send(target, method, path, role=role, body=body)
    assert response.status_code == 403, response.text


@pytest.mark.parametrize(
    "named",
    ["agent-1/../other-agent", "other-agent", "other-agent/x", "agent-1/", "agent-1/' OR 1=1"],
)
async def test_acting_as_someone_else_is_403(target: Target, named: str) -> None:
    """X-WL-Agent can only narrow the token's own principal."""
    headers = {"X-WL-Agent": named}
    response = await _send(target, "POST", "/units/claim", role="agent", body={}, headers=headers)
    assert response.status_code == 403, response.text


@pytest.mark.parametrize(
    "key", ["k" * 256, "ключ", "tab\tkey", "del\x7fkey"], ids=["long", "cyrillic", "tab", "del"]
)
async def test_malformed_idempotency_keys_are_refused(target: Target, key: str) -> None:
    """An Idempotency-Key must be 1..255 printable ASCII: else 4xx, nothing written."""
    headers = {"Idempotency-Key": key.encode("utf-8")}
    response = await _send(
        target, "POST", "/units/closed/claim", role="other", body={}, headers=headers
    )
    assert response.status_code in (400, 422), response.text  # a usable key would get 409


# -- schemathesis -------------------------------------------------------------------------


def _bounded(case: Any) -> None:
    """Keep long-polls short: a fuzzer asking for 60 s waits would eat the CI budget."""
    for where in (case.body, case.query):
        if isinstance(where, dict) and isinstance(where.get("wait_seconds"), int):
            where["wait_seconds"] = min(where["wait_seconds"], 0)


async def test_schemathesis_fuzz_finds_no_server_error(target: Target) -> None:
    """Generated requests to every operation in /openapi.json: never a 5xx; 4xx are problems.

    Last in this module: the fuzzer's valid writes change the ledger on purpose."""
    url = target.url
    operator, agent = target.tokens["operator"], target.tokens["agent"]
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    tokens = strategies.sampled_from([operator, agent])

    for result in schema.get_all_operations():
        operation = result.ok()

        @hypothesis.settings(
            max_examples=FUZZ_EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @hypothesis.given(case=operation.as_strategy(), token=tokens)
        def fuzz(case: Any, token: str) -> None:
            _bounded(case)
            response = case.call(
                base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=15
            )
            statuses[response.status_code] += 1
            kind = response.headers.get("content-type") or [""]
            kind = kind if isinstance(kind, str) else kind[0]
            if response.status_code >= 500 or (
                response.status_code >= 400 and not kind.startswith(PROBLEM)
            ):
                failures.append(
                    f"{case.method} {case.formatted_path} {case.body!r:.200} -> "
                    f"{response.status_code} {response.text[:300]}"
                )

        fuzz()
    shown = dict(sorted(statuses.items()))
    print(f"\nschemathesis: {sum(statuses.values())} requests, statuses {shown}")
    target.tried += sum(statuses.values())
    assert failures == []
    assert sum(statuses.values()) > 100


async def test_malformed_truncated_and_forged_tokens_are_401(target: Target) -> None:
    """Every bad token on a write and a read: 401 (or, once this client has failed its
    burst of authentications with one prefix, 429 rate_limited), nothing changed."""
    refused = 0
    for header in _bad_tokens(target):
        headers = {"Authorization": header} if header else {}
        for method, path, body in (
            ("POST", "/units/claim", {}),
            ("POST", "/units", {"units": [{"external_ref": "forged", "fleet": "f"}]}),
            ("GET", "/units", None),
        ):
            response = await _send(target, method, path, role=None, body=body, headers=headers)
            if response.status_code == 429:
                assert refused >= FailureLimiter().burst, (header[:40], path, refused)
                assert response.json()["code"] == "rate_limited"
                continue
            assert response.status_code == 401, (header[:40], path, response.text)
            refused += 1
