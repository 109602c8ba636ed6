"""Regenerate tests/cli/fixtures/claude_otlp/: what the real Claude Code sends over
OpenTelemetry (OTLP/HTTP logs) for `claude -p "say hi"` with the fake Messages API of
scripts/fake_anthropic.py delegating once to a haiku subagent (two models, three calls).

    npm install -g --prefix /tmp/claude-code @anthropic-ai/claude-code@2.1.197
    CLAUDE=/tmp/claude-code/bin/claude python scripts/claude_otlp_fixtures.py [OUT_DIR]

A tiny capture server stands in for the ledger's POST /otlp/v1/logs and keeps each request
as it arrived: `<protocol>-<n>.body` (the body, de-chunked) and `<protocol>-<n>.headers`
(its headers, one per line), for protocol `http-protobuf` and `http-json`. Session ids and
timestamps differ from run to run; models, tokens and cost_usd do not. Not product code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from claude_fixtures import ROOT, claude_env, fake_api

ATTEMPT = "0b7c0d6e-5f3a-4c1e-9d2b-7a6f5e4d3c2b"


def read_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The request's body, whether it came with a Content-Length or chunked."""
    length = handler.headers.get("Content-Length")
    if length is not None:
        return handler.rfile.read(int(length))
    body = b""
    while True:
        size = int(handler.rfile.readline().split(b";")[0], 16)
        if size == 0:
            handler.rfile.readline()
            return body
        body += handler.rfile.read(size)
        handler.rfile.readline()


@contextmanager
def capture_server(out: Path, prefix: str) -> Iterator[str]:
    """An OTLP/HTTP logs receiver keeping every request under `out`: its logs endpoint."""
    seen: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = read_body(self)
            seen.append(1)
            n = len(seen)
            (out / f"{prefix}-{n}.body").write_bytes(body)
            headers = "".join(f"{k}: {v}\n" for k, v in self.headers.items())
            (out / f"{prefix}-{n}.headers").write_text(f"{self.command} {self.path}\n{headers}")
            json = "json" in (self.headers.get("Content-Type") or "")
            answer = b"{}" if json else b""
            self.send_response(200)
            self.send_header(
                "Content-Type", "application/json" if json else "application/x-protobuf"
            )
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/otlp/v1/logs"
    finally:
        server.shutdown()
        server.server_close()


def telemetry_env(endpoint: str, protocol: str) -> dict[str, str]:
    """The exporter's environment, as `work-ledger run` sets it."""
    return {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "OTEL_LOGS_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer wl_fixture_token",
        "OTEL_RESOURCE_ATTRIBUTES": f"wl.unit_id=orders/7,wl.attempt_id={ATTEMPT}",
        "OTEL_LOGS_EXPORT_INTERVAL": "1000",
    }


def capture(claude: str, protocol: str, out: Path) -> None:
    prefix = protocol.replace("/", "-")
    for old in out.glob(f"{prefix}-*"):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix="claude-otlp-") as scratch:
        home, work = Path(scratch) / "home", Path(scratch) / "work"
        home.mkdir()
        work.mkdir()
        with (
            fake_api(["--subagent"], Path(scratch) / "requests.log") as url,
            capture_server(out, prefix) as endpoint,
        ):
            env = claude_env(url, home, claude)
            env.pop("DISABLE_TELEMETRY")
            env.update(telemetry_env(endpoint, protocol))
            done = subprocess.run(
                [claude, "-p", "say hi", "--output-format", "json"],
                env=env,
                cwd=work,
                capture_output=True,
                timeout=120,
                check=False,
            )
    if done.returncode != 0:
        sys.exit(f"{protocol}: claude exited {done.returncode}: {done.stderr.decode()}")
    (out / f"{prefix}-result.json").write_bytes(done.stdout)
    print(f"{protocol}: {len(list(out.glob(f'{prefix}-*.body')))} requests")


def main() -> None:
    claude = os.environ.get("CLAUDE") or shutil.which("claude")
    if not claude:
        sys.exit("no claude: install @anthropic-ai/claude-code and set CLAUDE to its binary")
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/cli/fixtures/claude_otlp"
    out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([claude, "--version"], capture_output=True, text=True, check=True)
    (out / "VERSION").write_text(version.stdout)
    for protocol in ("http/protobuf", "http/json"):
        capture(claude, protocol, out)


if __name__ == "__main__":
    main()
