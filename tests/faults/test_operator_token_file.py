"""WL_OPERATOR_TOKEN_FILE: a fresh deployment on 0.0.0.0 gets its first operator token from
a mounted file (a Kubernetes Secret), with no `token create` run inside its container."""

from __future__ import annotations

import subprocess
from pathlib import Path

import asyncpg
import pytest

from support.served import WORK_LEDGER, Served, StartServer, cli, client, ledger_env

pytestmark = pytest.mark.faults

PUBLIC = ("--host", "0.0.0.0", "--allow-plain-http")


def _new_token(env: dict[str, str]) -> str:
    done = subprocess.run(
        [WORK_LEDGER, "token", "new"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def test_an_empty_ledger_on_0_0_0_0_takes_its_operator_token_from_the_file(
    start_server: StartServer, database_url: str, raw: asyncpg.Connection, tmp_path: Path
) -> None:
    """The file's token becomes the operator's (nothing is minted or written to WL_HOME);
    a later start with another file keeps the first token and ignores the file."""
    assert await raw.fetchval("SELECT count(*) FROM wl_api_tokens") == 0
    env = ledger_env(database_url, tmp_path)
    first, second = tmp_path / "first.token", tmp_path / "second.token"
    first.write_text(_new_token(env) + "\n")
    second.write_text(_new_token(env))
    assert first.read_text().strip() != second.read_text().strip()

    served = await start_server(serve_args=PUBLIC, WL_OPERATOR_TOKEN_FILE=str(first))
    async with client(served.url, first.read_text().strip()) as operator:
        made = await operator.post(
            "/units", json={"units": [{"external_ref": "a/1", "fleet": "f", "domain": "d"}]}
        )
    assert made.status_code == 200, made.text
    assert not (served.home / "operator.token").exists()
    rows = await raw.fetch("SELECT role, principal FROM wl_api_tokens WHERE revoked_at IS NULL")
    assert [(r["role"], r["principal"]) for r in rows] == [("operator", "operator")]

    again = await start_server(serve_args=PUBLIC, WL_OPERATOR_TOKEN_FILE=str(second))
    async with client(again.url, second.read_text().strip()) as stranger:
        refused = await stranger.get("/units/a/1")
    assert refused.status_code == 401, refused.text
    assert await raw.fetchval("SELECT count(*) FROM wl_api_tokens") == 1


@pytest.mark.parametrize("content", ["", "not-a-token\n", None])
async def test_a_bad_token_file_refuses_to_start_naming_it(
    database_url: str, raw: asyncpg.Connection, tmp_path: Path, content: str | None
) -> None:
    """A missing, empty or malformed file: exit 1 before binding, naming the variable and
    the next step; no token is stored."""
    path = tmp_path / "operator.token.mounted"
    if content is not None:
        path.write_text(content)
    env = ledger_env(database_url, tmp_path, WL_OPERATOR_TOKEN_FILE=str(path))
    server = Served(env, tmp_path)
    code, out = await cli(env, "serve", "--port", str(server.port), *PUBLIC)
    assert code == 1, out
    said = " ".join(out.split())
    assert "WL_OPERATOR_TOKEN_FILE" in said, said
    assert path.name in said, said
    assert "work-ledger token new" in said or "unset the variable" in said, said
    assert await raw.fetchval("SELECT count(*) FROM wl_api_tokens") == 0
