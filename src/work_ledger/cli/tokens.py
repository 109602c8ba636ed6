"""`work-ledger token create|new|list|revoke`: API tokens, managed directly in the database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import typer
from rich.table import Table

from work_ledger.cli.typer_app import app, console, err_console, run_async
from work_ledger.config import load_settings
from work_ledger.runtime import open_ledger
from work_ledger.service.tokens import Role, TokenInfo, TokenStore, load_secret, new_token

token_app = typer.Typer(help="Mint, list and revoke API tokens (DESIGN §7).", no_args_is_help=True)
app.add_typer(token_app, name="token")


@asynccontextmanager
async def _tokens() -> AsyncIterator[TokenStore]:
    settings = load_settings()
    async with open_ledger(settings, max_connections=1) as ledger:
        yield TokenStore(ledger.store, load_secret(settings.secret, settings.home))


async def _create(role: Role, principal: str) -> tuple[str, TokenInfo]:
    async with _tokens() as tokens:
        return await tokens.create(role, principal)


async def _list() -> list[TokenInfo]:
    async with _tokens() as tokens:
        return await tokens.list()


async def _revoke(prefix: str) -> TokenInfo | None:
    async with _tokens() as tokens:
        return await tokens.revoke(prefix)


@token_app.command("create")
def create(
    role: Annotated[
        Role, typer.Option(help="agent, harness, triage, operator, projector or reader.")
    ],
    principal: Annotated[str, typer.Option(help="Who the token speaks for, e.g. agent-07.")],
) -> None:
    """Mint a token; it is printed once, alone on the last line of stdout."""
    token, info = run_async(_create(role, principal))
    err_console.print(
        f"minted {info.role} token wl_{info.prefix}_… for {info.principal}; "
        "it is shown once, keep it secret"
    )
    print(token, flush=True)


@token_app.command("new")
def new() -> None:
    """Print a fresh token without storing it: the content of WL_OPERATOR_TOKEN_FILE (a
    Kubernetes Secret), which `serve` stores as the first operator token of an empty ledger."""
    print(new_token(), flush=True)


@token_app.command("list")
def list_tokens() -> None:
    """List tokens by prefix (never the tokens themselves)."""
    found = run_async(_list())
    table = Table("prefix", "role", "principal", "created", "revoked")
    for t in found:
        table.add_row(
            t.prefix,
            t.role.value,
            t.principal,
            t.created_at.isoformat(timespec="seconds"),
            "" if t.revoked_at is None else t.revoked_at.isoformat(timespec="seconds"),
        )
    console.print(table)


@token_app.command("revoke")
def revoke(
    prefix: Annotated[str, typer.Argument(help="The 8 hex characters after `wl_`.")],
) -> None:
    """Revoke a token; servers stop accepting it within a few seconds (their cache)."""
    prefix = prefix.removeprefix("wl_").split("_")[0]
    info = run_async(_revoke(prefix))
    if info is None:
        err_console.print(f"no token with prefix {prefix!r}; `work-ledger token list` shows them")
        raise typer.Exit(1)
    console.print(f"revoked wl_{info.prefix}_… ({info.role} {info.principal})")
