"""POST /otlp/v1/logs: OpenTelemetry logs over OTLP/HTTP, Claude Code's cost (DESIGN §13).

Decoded with the OpenTelemetry project's own messages (`opentelemetry-proto`): protobuf
as it is, JSON through protobuf's JSON mapping; gzip bodies (an OpenTelemetry Collector's
`otlphttp` exporter compresses by default) are inflated up to the body limit. Each
`claude_code.api_request` record names its attempt by `wl.attempt_id`; the write is one
statement (service/telemetry.py). Records that cannot count are dropped and counted, and
the batch is still answered 200 with OTLP's `partialSuccess`: an error status would make
the exporter retry the same batch forever.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from starlette.exceptions import HTTPException

from work_ledger.api import problems
from work_ledger.api.auth import Caller, require, token_doc
from work_ledger.api.body_limit import MAX_BODY_BYTES
from work_ledger.api.collectors import LedgerMetrics
from work_ledger.api.wire import raw_body
from work_ledger.domain.telemetry import (
    Dropped,
    TelemetryRecord,
    Value,
    api_request,
    is_api_request,
)
from work_ledger.errors import MalformedBody, PayloadTooLarge
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
router = APIRouter(tags=["telemetry"])


@router.post(
    "/otlp/v1/logs",
    operation_id="exportOtlpLogs",
    response_class=Response,
    openapi_extra={
        **token_doc(),
        "requestBody": {
            "required": True,
            "content": {
                PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
                JSON: {"schema": {"type": "object"}},
            },
        },
    },
    responses={
        200: {
            "description": "ExportLogsServiceResponse, in the request's encoding; "
            "partialSuccess counts the records dropped",
            "content": {PROTOBUF: {}, JSON: {}},
        },
        400: problems.problem_content("The body is not an OTLP logs request"),
        415: problems.problem_content("Neither protobuf nor JSON"),
        **problems.UNAUTHORIZED,
        **problems.FORBIDDEN,
        **problems.TOO_LARGE,
    },
)
async def export_logs(
    request: Request, caller: Annotated[Caller, Depends(require(Role.AGENT, Role.PROJECTOR))]
) -> Response:
    """OTLP/HTTP logs (protobuf or JSON). Each Claude Code `claude_code.api_request` record
    with `wl.attempt_id` (resource or record attribute) of an attempt of the token's agent
    (any agent's, for a projector token) adds its cost and tokens to that attempt, once per
    record. Send with `OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer <token>`."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in (PROTOBUF, "application/protobuf", JSON):
        raise HTTPException(
            415,
            f"send OTLP logs as {PROTOBUF} or {JSON}, not {media or 'no Content-Type'}; "
            "set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf or http/json",
        )
    body = _inflated(await raw_body(request), request.headers.get("content-encoding"))
    batch = _decoded(body, media == JSON)
    records, dropped, why = _api_requests(batch)
    ledger: Ledger = request.app.state.ledger
    agent = None if caller.role in (Role.PROJECTOR, Role.OPERATOR) else caller.token.principal
    outcome = await ledger.record_telemetry(records, agent, caller.actor())
    dropped += outcome.dropped
    if outcome.dropped and not why:
        why = "wl.attempt_id names no attempt of this token's agent"
    metrics: LedgerMetrics | None = getattr(request.app.state, "metrics", None)
    if metrics is not None and dropped:
        metrics.otlp_dropped.inc(dropped)
    answer = ExportLogsServiceResponse()
    if dropped:
        answer.partial_success.CopyFrom(
            ExportLogsPartialSuccess(rejected_log_records=dropped, error_message=why[:500])
        )
    if media == JSON:
        return Response(json_format.MessageToJson(answer, indent=None), media_type=JSON)
    return Response(answer.SerializeToString(), media_type=PROTOBUF)


def _inflated(body: bytes, encoding: str | None) -> bytes:
    """The body, gunzipped when it says so, never past the body limit."""
    if encoding is None or encoding.strip().lower() in ("", "identity"):
        return body
    if encoding.strip().lower() != "gzip":
        raise HTTPException(415, f"Content-Encoding {encoding!r}: send gzip or none")
    inflater = zlib.decompressobj(wbits=31)
    try:
        plain = inflater.decompress(body, MAX_BODY_BYTES + 1)
    except zlib.error as exc:
        raise MalformedBody(
            f"the gzip body cannot be inflated ({exc}); nothing was recorded"
        ) from None
    if len(plain) > MAX_BODY_BYTES:
        raise PayloadTooLarge(
            f"the body inflates past {MAX_BODY_BYTES} bytes; export smaller batches "
            "(the Collector's batch processor: send_batch_max_size)"
        )
    return plain


def _decoded(body: bytes, as_json: bool) -> ExportLogsServiceRequest:
    batch = ExportLogsServiceRequest()
    try:
        if as_json:
            json_format.Parse(body, batch, ignore_unknown_fields=True)
        else:
            batch.ParseFromString(body)
    except (json_format.ParseError, DecodeError, ValueError, RecursionError) as exc:
        kind = "JSON" if as_json else "protobuf"
        raise MalformedBody(
            f"the body is not an OTLP ExportLogsServiceRequest in {kind} ({str(exc)[:200]}); "
            "nothing was recorded. Send what an OpenTelemetry exporter sends"
        ) from None
    return batch


def _api_requests(batch: ExportLogsServiceRequest) -> tuple[list[TelemetryRecord], int, str]:
    """The batch's api_request records that can count; how many cannot, and why the last."""
    records: list[TelemetryRecord] = []
    dropped, why = 0, ""
    for resource_logs in batch.resource_logs:
        resource = _attributes(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            for log in scope_logs.log_records:
                attributes = _attributes(log.attributes)
                if not is_api_request(_value(log.body), attributes):
                    continue
                try:
                    records.append(api_request(attributes, resource))
                except Dropped as exc:
                    dropped, why = dropped + 1, str(exc)
    return records, dropped, why


def _attributes(pairs: Iterable[KeyValue]) -> Mapping[str, Value]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: AnyValue) -> Value:
    """A scalar attribute as Python; arrays, maps and bytes (none of which Claude Code
    sends for what counts) as None."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "bool_value":
        return value.bool_value
    return None
