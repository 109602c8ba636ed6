"""`serve` over TLS, and its refusal to carry tokens in clear off loopback."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from support.ports import free_port
from support.replicas import StartReplicas, Tls, start_replicas, tls  # noqa: F401  (shared fixtures)
from support.served import WORK_LEDGER, ledger_env, mint
from work_ledger.cli import app
from work_ledger.service.tokens import Role

pytestmark = pytest.mark.faults
_NO_TLS = {"WL_TLS_CERT": "", "WL_TLS_KEY": ""}


def _serve(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [WORK_LEDGER, "serve", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_serve_refuses_plain_http_off_loopback() -> None:
    """0.0.0.0 without TLS is refused before anything starts, naming the risk and both ways out."""
    result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0"], env=_NO_TLS)
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "refusing to serve plain HTTP on 0.0.0.0" in said
    assert "in clear" in said
    assert "--tls-cert" in said
    assert "--allow-plain-http" in said


async def test_serve_allows_plain_http_off_loopback_when_told_and_warns(
    database_url: str, tmp_path: Path
) -> None:
    """--allow-plain-http: serves on 0.0.0.0, with a warning naming the risk on stderr."""
    await mint(database_url, [(Role.OPERATOR, "op")])  # off loopback a token must exist
    port = free_port()
    proc = _serve(
        ledger_env(database_url, tmp_path),
        *("--host", "0.0.0.0", "--port", str(port), "--allow-plain-http"),
    )
    try:
        async with httpx.AsyncClient(timeout=3) as http:
            for _ in range(600):
                assert proc.poll() is None, proc.communicate()
                try:
                    if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    await asyncio.sleep(0.1)
            else:
                pytest.fail("serve --allow-plain-http never became ready")
    finally:
        proc.terminate()
        _, err = await asyncio.to_thread(proc.communicate, timeout=30)
    said = " ".join(err.split())
    assert "WARNING: serving plain HTTP on 0.0.0.0 (--allow-plain-http)" in said
    assert "bearer tokens and ledger data cross the network in clear" in said


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--tls-cert", "server.pem"], "--tls-cert and --tls-key (WL_TLS_CERT, WL_TLS_KEY) go"),
        (["--tls-cert", "junk.pem", "--tls-key", "junk.pem"], "cannot use the TLS certificate"),
    ],
)
def test_serve_refuses_unusable_tls_files(
    args: list[str], why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone or unreadable certificate is refused by name before anything starts."""
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["serve", *args], env=_NO_TLS)
    assert result.exit_code == 1, result.output
    assert why in " ".join(result.output.split())
