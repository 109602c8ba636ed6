"""`run` and the stdio MCP server hold their units through the death of their replica.

The replicas serve HTTPS with a CA made at test time, so this also shows the SDK, `run` and
`mcp` trusting a private CA through `ca_bundle=` and WL_CA_BUNDLE alone.
"""

# ruff: noqa: F811  (a test taking the shared fixtures names them as parameters)

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
from mcp.client.stdio import StdioServerParameters

import mcp
from support.replicas import StartReplicas, Tls, start_replicas, tls  # noqa: F401  (shared fixtures)
from support.served import WORK_LEDGER, mint
from work_ledger.client import AsyncClient, Unreachable
from work_ledger.errors import InvariantViolation
from work_ledger.service.tokens import Role

pytestmark = pytest.mark.faults
LEASE = 2  # seconds: heartbeats every 2/3 s, and a unit left alone lapses fast
EVIDENCE = "https://ci.example/runs/replica-death"
# CMD of `run`: wait for the test's go-ahead, then report evidence and exit 0.
COMMAND = """
import json, os, pathlib, sys, time
go = pathlib.Path(sys.argv[1])
while not go.exists():
    time.sleep(0.05)
json.dump({"evidence_url": sys.argv[2]}, open(os.environ["WL_RESULT_FILE"], "w"))
"""


async def test_run_and_mcp_keep_heartbeating_through_a_replica_death(
    start_replicas: StartReplicas,
    tls: Tls,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both claim through A; A is SIGKILLed mid-unit; for three leases their heartbeats reach
    B, a rival cannot take the units, and both finish on attempt 1."""
    a, b = await start_replicas(2, tls=tls, WL_LEASE_SECONDS=str(LEASE))
    monkeypatch.delenv("SSL_CERT_FILE")  # from here on only the CA bundles named below
    op, runner, claude, rival = await mint(
        database_url,
        [
            (Role.OPERATOR, "op"),
            (Role.AGENT, "runner"),
            (Role.AGENT, "claude"),
            (Role.AGENT, "rival"),
        ],
    )
    async with AsyncClient(b.url, op, retries=0) as untrusting:
        with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
            await untrusting.healthz()
    async with httpx.AsyncClient(timeout=5) as plain:
        with pytest.raises(httpx.HTTPError):  # nothing answers in clear on a TLS port
            await plain.get(b.url.replace("https://", "http://") + "/healthz")

    operator = AsyncClient(b.url, op, ca_bundle=tls.ca)
    await operator.register([{"external_ref": ref, "fleet": "f"} for ref in ("run/1", "mcp/1")])
    base = {k: v for k, v in a.env.items() if k not in ("SSL_CERT_FILE", "WL_DATABASE_URL")}
    base |= {"WL_URL": f"{a.url},{b.url}", "WL_CA_BUNDLE": str(tls.ca)}
    go = tmp_path / "go"
    run = await asyncio.create_subprocess_exec(
        WORK_LEDGER, "run", "--unit", "run/1", "--",
        sys.executable, "-c", COMMAND, str(go), EVIDENCE,
        env=base | {"WL_TOKEN": runner},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    params = StdioServerParameters(
        command=WORK_LEDGER, args=["mcp"], env=base | {"WL_TOKEN": claude}
    )
    try:
        async with mcp.Client(params) as session, operator:
            claimed = await session.call_tool("claim", {"unit": "mcp/1"})
            assert not claimed.is_error, claimed
            for _ in range(600):
                if (await operator.get_unit("run/1")).unit.state == "in_progress":
                    break
                await asyncio.sleep(0.1)
            a.kill(signal.SIGKILL)
            killed_at = time.monotonic()
            await asyncio.sleep(3 * LEASE)  # without heartbeats both leases would lapse
            async with AsyncClient(b.url, rival, ca_bundle=tls.ca) as other:
                for ref in ("run/1", "mcp/1"):
                    with pytest.raises(InvariantViolation):
                        await other.claim_unit(ref)
            verified = await session.call_tool("verify", {"evidence_url": EVIDENCE})
            assert not verified.is_error, verified
            go.touch()
            out, _ = await asyncio.wait_for(run.communicate(), 60)
            assert run.returncode == 0, out.decode()
            held = time.monotonic() - killed_at
            units = [(await operator.get_unit(ref)).unit for ref in ("run/1", "mcp/1")]
    finally:
        if run.returncode is None:  # the test failed first: do not leave `run` behind
            run.terminate()
            await asyncio.wait_for(run.communicate(), 60)
    print(f"\nboth units held {held:.1f} s past the death of their replica (lease {LEASE} s)")
    assert [(u.state, u.attempt_count) for u in units] == [("verified", 1)] * 2
