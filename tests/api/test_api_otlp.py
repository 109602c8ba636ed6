"""POST /otlp/v1/logs (DESIGN §13) with what Claude Code 2.1.197 really sent
(tests/cli/fixtures/claude_otlp, scripts/claude_otlp_fixtures.py): one batch of 9 records,
3 of them api_request (two opus calls at $0.038464, one haiku at $0.000457)."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

from support.api_support import Api, assert_problem, claimed
from work_ledger.service.tokens import Role

FIXTURES = Path(__file__).parents[1] / "cli" / "fixtures" / "claude_otlp"
CAPTURED_ATTEMPT = "0b7c0d6e-5f3a-4c1e-9d2b-7a6f5e4d3c2b"
PROTOBUF, JSON = "application/x-protobuf", "application/json"


def captured(kind: str, attempt: str) -> bytes:
    """The captured body, its attempt id swapped for `attempt` (same length: the protobuf
    stays byte for byte what was sent but for the id)."""
    body = (FIXTURES / f"http-{kind}-1.body").read_bytes()
    assert body.count(CAPTURED_ATTEMPT.encode()) >= 10  # the resource and all 9 records
    return body.replace(CAPTURED_ATTEMPT.encode(), attempt.encode())


async def _unit(
    api: Api, operator: httpx.AsyncClient, agent: str = "agent-1"
) -> tuple[httpx.AsyncClient, str, str]:
    client = await api.as_role(Role.AGENT, agent)
    ref = f"orders/{agent}"
    await operator.post("/units", json={"units": [{"external_ref": ref, "fleet": "f"}]})
    unit_id, attempt_id = await claimed(client, start=True)
    return client, unit_id, attempt_id


async def _models(client: httpx.AsyncClient, unit_id: str) -> dict[str, tuple[int, ...]]:
    (attempt,) = (await client.get(f"/units/{unit_id}")).json()["attempts"]
    return {
        m["model"]: (
            m["cost_cents"],
            m["estimated_cents"],
            m["input_tokens"],
            m["output_tokens"],
            m["cache_read_tokens"],
            m["cache_write_tokens"],
        )
        for m in attempt["cost_by_model"]
    }


EXPECTED = {
    "claude-opus-4-8": (8, 8, 8, 24, 24576, 10240),
    "claude-haiku-4-5-20251001": (1, 1, 412, 9, 0, 0),
}


@pytest.mark.parametrize(("kind", "media"), [("protobuf", PROTOBUF), ("json", JSON)])
async def test_captured_batch_records_cost_once(
    api: Api, operator: httpx.AsyncClient, kind: str, media: str
) -> None:
    """The batch adds one estimated entry per model with its tokens; sent again, nothing."""
    agent, unit_id, attempt_id = await _unit(api, operator)
    body = captured(kind, attempt_id)
    for _ in range(2):
        sent = await agent.post("/otlp/v1/logs", content=body, headers={"Content-Type": media})
        assert sent.status_code == 200, sent.text
        assert sent.headers["content-type"] == media
    assert await _models(agent, unit_id) == EXPECTED
    unit = (await agent.get(f"/units/{unit_id}")).json()
    assert unit["cost_cents"] == 9


async def test_chunked_and_gzip_bodies_are_read(api: Api, operator: httpx.AsyncClient) -> None:
    """No Content-Length (as Claude Code sends), and a Collector's gzip."""
    agent, unit_id, attempt_id = await _unit(api, operator)
    body = captured("json", attempt_id)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 1000):
            yield body[start : start + 1000]

    request = agent.build_request(
        "POST", "/otlp/v1/logs", content=chunks(), headers={"Content-Type": JSON}
    )
    assert "content-length" not in request.headers
    assert (await agent.send(request)).status_code == 200
    assert await _models(agent, unit_id) == EXPECTED
    # The same batch again, gzipped: read (200, not 400), and a replay, so nothing more.
    headers = {"Content-Type": JSON, "Content-Encoding": "gzip"}
    zipped = await agent.post("/otlp/v1/logs", content=gzip.compress(body), headers=headers)
    assert zipped.status_code == 200, zipped.text
    assert await _models(agent, unit_id) == EXPECTED
    headers["Content-Encoding"] = "br"
    refused = await agent.post("/otlp/v1/logs", content=body, headers=headers)
    assert_problem(refused, 415, "unsupported_media_type")


async def test_others_and_unknown_attempts_are_dropped_and_counted(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """Another agent's attempt: 200 with partialSuccess (3 rejected), nothing recorded, the
    counter raised; a projector token (a Collector) records any agent's attempt."""
    _, unit_id, attempt_id = await _unit(api, operator, "agent-1")
    other = await api.as_role(Role.AGENT, "agent-2")
    body = captured("protobuf", attempt_id)
    sent = await other.post("/otlp/v1/logs", content=body, headers={"Content-Type": PROTOBUF})
    assert sent.status_code == 200, sent.text
    answer = ExportLogsServiceResponse.FromString(sent.content)
    assert answer.partial_success.rejected_log_records == 3
    assert "wl.attempt_id" in answer.partial_success.error_message
    assert await _models(other, unit_id) == {}
    metrics = (await other.get("/metrics")).text
    assert "work_ledger_otlp_records_dropped_total 3.0" in metrics
    collector = await api.as_role(Role.PROJECTOR, "collector")
    sent = await collector.post("/otlp/v1/logs", content=body, headers={"Content-Type": PROTOBUF})
    assert (
        ExportLogsServiceResponse.FromString(sent.content).partial_success.rejected_log_records == 0
    )
    assert await _models(other, unit_id) == EXPECTED


async def test_records_without_an_attempt_are_dropped_in_json(
    api: Api, operator: httpx.AsyncClient
) -> None:
    agent, unit_id, _ = await _unit(api, operator)
    body = json.loads(captured("json", "not-an-attempt-id-at-all-0123456789"))
    sent = await agent.post("/otlp/v1/logs", json=body)
    assert sent.status_code == 200
    assert json.loads(sent.text)["partialSuccess"]["rejectedLogRecords"] in ("3", 3)
    assert await _models(agent, unit_id) == {}


@pytest.mark.parametrize(
    ("media", "body"),
    [
        (PROTOBUF, b"\xff\xff\xff not protobuf"),
        (JSON, b"{not json"),
        (JSON, b"[1, 2]"),
        (JSON, b"\xff\xfe"),
        (JSON, b"[" * 100_000),
        (JSON, b'{"resourceLogs": "not a list"}'),
        (PROTOBUF, b"\x0a" + b"\xff" * 10),
    ],
)
async def test_a_malformed_body_is_400_and_records_nothing(
    api: Api, operator: httpx.AsyncClient, media: str, body: bytes
) -> None:
    agent, unit_id, _ = await _unit(api, operator)
    sent = await agent.post("/otlp/v1/logs", content=body, headers={"Content-Type": media})
    assert_problem(sent, 400, "malformed_body")
    assert await _models(agent, unit_id) == {}


async def test_wrong_media_type_and_roles_are_refused(
    api: Api, operator: httpx.AsyncClient
) -> None:
    agent, _, attempt_id = await _unit(api, operator)
    sent = await agent.post("/otlp/v1/logs", content=b"x", headers={"Content-Type": "text/plain"})
    assert_problem(sent, 415, "unsupported_media_type")
    reader = await api.as_role(Role.READER, "reader")
    body = captured("protobuf", attempt_id)
    refused = await reader.post("/otlp/v1/logs", content=body, headers={"Content-Type": PROTOBUF})
    assert_problem(refused, 403, "forbidden")
    anonymous = api.client()
    refused = await anonymous.post(
        "/otlp/v1/logs", content=body, headers={"Content-Type": PROTOBUF}
    )
    assert refused.status_code == 401


def test_the_json_fixture_is_the_protobuf_one() -> None:
    """Both captures decode to the same records (but for ids and times)."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    proto = ExportLogsServiceRequest.FromString(captured("protobuf", CAPTURED_ATTEMPT))
    parsed = json_format.Parse(captured("json", CAPTURED_ATTEMPT), ExportLogsServiceRequest())
    names = [
        [r.body.string_value for r in s.log_records]
        for m in (proto, parsed)
        for rl in m.resource_logs
        for s in rl.scope_logs
    ]
    assert names[0] == names[1]
    assert names[0].count("claude_code.api_request") == 3
