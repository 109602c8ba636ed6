"""A throwaway stand-in for the Anthropic Messages API, so that the real `claude -p` can run
here without a network to Anthropic (scripts/claude_fixtures.py, and the opt-in
test tests/cli/test_claude_code_live.py).

    python scripts/fake_anthropic.py [--port PORT] [--log LOG] [--subagent]

It listens on 127.0.0.1:PORT (default 0: any free port; the port is printed on stdout's
first line) and answers:
- POST /v1/messages: with `"stream": true`, the server-sent events of the real API
  (message_start with the usage so far, content_block_start/delta/stop, message_delta with
  the final usage, message_stop); else one Message object. The usage carries all four
  token classes (input, output, cache read, cache creation), fixed per model so the
  result is reproducible;
- POST /v1/messages/count_tokens: `{"input_tokens": N}`;
- anything else: 404 with the API's error object.
With `--subagent`, the main model's first answer is a tool_use of Claude Code's `Agent` tool
with `"model": "haiku"`: the subagent's call then goes to a haiku model, and the result's
`modelUsage` holds two models, as a real session that delegates does. With `--refuse
STATUS` (say 401), every Messages call is answered with that status and the API's error
object, as the real API answers a bad key. With `--slow SECONDS` (and `--subagent`), the
main model's answer after the subagent's waits SECONDS first: a session still running
after two API calls spent money (tests/cli/test_claude_code_telemetry_live.py).
With `--ledger`, the main model calls the work-ledger MCP tools Claude Code offers it, one
per turn: `claim`, `verify` (an evidence link), `dispose` MIGRATED, then answers.
Each request is logged as one JSON line to LOG (default stderr): method, path, model,
stream and the time it arrived (`at`, Unix seconds), so what Claude Code asked for can be
read afterwards. Not product code.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO

REPLY = "Hi! How can I help you today?"

# Per model family: the usage a call reports. Fixed, so a regenerated fixture holds the
# same tokens (Claude Code prices them itself).
USAGE = {
    "haiku": {
        "input_tokens": 412,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 9,
    },
    "default": {
        "input_tokens": 4,
        "cache_creation_input_tokens": 5120,
        "cache_read_input_tokens": 12288,
        "output_tokens": 12,
    },
}


def usage_for(model: str) -> dict[str, int]:
    return dict(USAGE["haiku" if "haiku" in model else "default"])


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


# The API's error types by status (what --refuse answers).
ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}

AGENT_CALL = {
    "description": "Say hi",
    "prompt": "Say hi to the user in one short sentence.",
    "subagent_type": "general-purpose",
    "model": "haiku",
}


def _block(
    index: int, block: dict[str, Any], delta_type: str, key: str, parts: list[str]
) -> list[bytes]:
    """One content block as the API streams it: its start, a delta per part, its stop."""
    return [
        sse(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": block},
        ),
        *(
            sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": delta_type, key: part},
                },
            )
            for part in parts
        ),
        sse("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def text_block(index: int) -> list[bytes]:
    words = REPLY.split(" ")
    deltas = [w if i == 0 else " " + w for i, w in enumerate(words)]
    return _block(index, {"type": "text", "text": ""}, "text_delta", "text", deltas)


def tool_block(
    index: int, tool_id: str, name: str = "Agent", call: dict[str, Any] = AGENT_CALL
) -> list[bytes]:
    block = {"type": "tool_use", "id": tool_id, "name": name, "input": {}}
    partial = json.dumps(call)
    halves = [partial[: len(partial) // 2], partial[len(partial) // 2 :]]
    return _block(index, block, "input_json_delta", "partial_json", halves)


def stream_events(
    model: str, call_agent: bool = False, tool: tuple[str, dict[str, Any]] | None = None
) -> list[bytes]:
    """The events of one streamed answer (text, or a call of the Agent tool or of `tool`),
    as the Messages API sends them."""
    usage = usage_for(model)
    start_usage = {**usage, "output_tokens": 1}
    message = {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    tool_id = f"toolu_{uuid.uuid4().hex[:24]}"
    if tool is not None:
        blocks = tool_block(0, tool_id, *tool)
    elif call_agent:
        blocks = tool_block(0, tool_id)
    else:
        blocks = text_block(0)
    calls = call_agent or tool is not None
    return [
        sse("message_start", {"type": "message_start", "message": message}),
        sse("ping", {"type": "ping"}),
        *blocks,
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": "tool_use" if calls else "end_turn",
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        ),
        sse("message_stop", {"type": "message_stop"}),
    ]


def message(model: str) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": REPLY}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage_for(model),
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log: TextIO = sys.stderr
    subagent = False
    refuse: int | None = None
    slow = 0.0
    ledger = False

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def _json(self, status: int, data: dict[str, Any]) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _record(self, body: dict[str, Any]) -> None:
        line = {
            "method": self.command,
            "path": self.path,
            "model": body.get("model"),
            "stream": body.get("stream"),
            "at": time.time(),
            "tools": [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)],
            # Whether the plugin's SessionStart hook briefed the session (its context).
            "briefed": "work-ledger unit" in json.dumps(body.get("messages")),
        }
        print(json.dumps(line), file=self.log, flush=True)

    def do_GET(self) -> None:
        self._record({})
        self._not_found()

    def do_POST(self) -> None:
        body = self._body()
        self._record(body)
        path = self.path.split("?", 1)[0]
        model = str(body.get("model") or "claude-sonnet-4-5")
        if self.refuse and path.startswith("/v1/messages"):
            self._refuse(self.refuse)
        elif path == "/v1/messages/count_tokens":
            self._json(200, {"input_tokens": 42})
        elif path == "/v1/messages" and body.get("stream"):
            main = "haiku" not in model
            if self.slow and main and not _first_turn(body):
                time.sleep(self.slow)
            tool = _ledger_step(body) if self.ledger and main else None
            self._stream(model, self.subagent and _first_turn(body) and main, tool)
        elif path == "/v1/messages":
            self._json(200, message(model))
        else:
            self._not_found()

    def _stream(
        self, model: str, call_agent: bool, tool: tuple[str, dict[str, Any]] | None = None
    ) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
        self.send_header("connection", "close")
        self.end_headers()
        for chunk in stream_events(model, call_agent, tool):
            self.wfile.write(chunk)
            self.wfile.flush()
        self.close_connection = True

    def _refuse(self, status: int) -> None:
        kind = ERRORS.get(status, "api_error")
        error = {"type": kind, "message": f"refused by the fake ({status} {kind})"}
        self._json(status, {"type": "error", "error": error})

    def _not_found(self) -> None:
        error = {"type": "not_found_error", "message": f"{self.path} is not faked here"}
        self._json(404, {"type": "error", "error": error})


# --ledger: a unit's life through the work-ledger MCP tools, one call per turn.
LEDGER_STEPS = (
    ("__claim", {}),
    ("__verify", {"evidence_url": "https://ci.example/runs/1"}),
    ("__dispose", {"disposition": "MIGRATED"}),
)


def _ledger_step(body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The next work-ledger tool to call (by the tool results so far), if offered."""
    done = sum(
        1
        for turn in body.get("messages") or []
        if isinstance(turn, dict) and isinstance(turn.get("content"), list)
        for b in turn["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    )
    if done >= len(LEDGER_STEPS):
        return None
    suffix, call = LEDGER_STEPS[done]
    names = [str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)]
    found = [
        n for n in names if n.startswith("mcp__") and "work-ledger" in n and n.endswith(suffix)
    ]
    return (found[0], call) if found else None


def _first_turn(body: dict[str, Any]) -> bool:
    """No tool result yet in the conversation: the model has not called a tool."""
    for turn in body.get("messages") or []:
        content = turn.get("content") if isinstance(turn, dict) else None
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", help="append one JSON line per request here (default stderr)")
    parser.add_argument("--subagent", action="store_true", help="delegate once to haiku")
    parser.add_argument("--refuse", type=int, help="answer every Messages call with this status")
    parser.add_argument("--slow", type=float, default=0.0, help="delay the last answer (s)")
    parser.add_argument("--ledger", action="store_true", help="claim, verify, dispose by MCP")
    args = parser.parse_args()
    Handler.ledger = args.ledger
    Handler.refuse = args.refuse
    Handler.slow = args.slow
    if args.log:
        Handler.log = open(args.log, "a", encoding="utf-8")  # noqa: SIM115  (open for the server's life)
    Handler.subagent = args.subagent
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
