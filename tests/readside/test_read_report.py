"""`work-ledger report` and `work-ledger grant-reader` on the command line.

The CLI runs its own event loop, so each invocation runs in a thread of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import asyncpg
import pytest
from click.testing import Result
from typer.testing import CliRunner

from work_ledger.cli import app
from work_ledger.cli.report import watch_report
from work_ledger.config import load_settings
from work_ledger.runtime import open_ledger
from work_ledger.service.ledger import Ledger

WIDE = {"COLUMNS": "220", "NO_COLOR": "1"}


async def _invoke(url: str, *args: str, **env: str) -> Result:
    runner = CliRunner(env={"WL_DATABASE_URL": url, **WIDE, **env})
    return await asyncio.to_thread(runner.invoke, app, list(args))


def _row(output: str, title: str, first_cell: str) -> list[str]:
    """The cells of the row starting `first_cell` in the table titled `title`."""
    section = output.split(title, 1)[1]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("│┃").split("│")]
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} under {title!r} in:\n{output}")


async def test_report_prints_each_view_with_its_numbers(seeded: Ledger, database_url: str) -> None:
    """The tables show the same numbers as the views."""
    result = await _invoke(database_url, "report")
    assert result.exit_code == 0, result.output
    out = result.output
    expected = ["orders", "0", "1", "1", "0", "0", "0", "2", "2", "4"]
    assert _row(out, "v_queue_depth", "orders") == expected
    assert _row(out, "v_queue_depth", "all domains")[-2:] == ["5", "11"]
    assert _row(out, "v_stall_list", "o3")[:5] == ["o3", "orders", "in_progress", "agent-f", "1"]
    assert _row(out, "v_cost_per_unit", "all domains") == [
        "all domains", "11", "10", "$3.60", "$0.33", "2", "$1.10", "$1.80"
    ]  # fmt: skip
    assert _row(out, "v_rework", "orders")[:4] == ["orders", "4", "1", "25.0%"]
    assert _row(out, "v_disposition_summary", "MIGRATED")[:7] == [
        "MIGRATED", "2", "3", "$2.20", "$1.10", "0", "https://ci.example/b1"
    ]  # fmt: skip


async def test_report_for_one_domain_shows_only_it(seeded: Ledger, database_url: str) -> None:
    """--domain keeps that domain's rows and drops the others and the totals."""
    result = await _invoke(database_url, "report", "--domain", "billing")
    assert result.exit_code == 0, result.output
    assert _row(result.output, "v_queue_depth", "billing")[1] == "1"
    assert "orders" not in result.output
    assert "all domains" not in result.output
    assert "https://review.example/b2" in result.output


async def test_report_on_an_unmigrated_database_says_what_to_do(server_url: str) -> None:
    """Without the views, the report names the missing step instead of a traceback."""
    result = await _invoke(server_url, "report")
    assert result.exit_code == 1
    assert "work-ledger migrate" in result.output


async def test_grant_reader_command_makes_the_role(
    database_url: str, raw: asyncpg.Connection, tmp_path: Path
) -> None:
    """The command creates a login role (password from --password-file) and says what it
    may read."""
    role = "wl_cli_reader"
    secret = tmp_path / "reader.password"
    secret.write_text("pw-from-a-file\n")
    result = await _invoke(
        database_url, "grant-reader", "--role-name", role, "--password-file", str(secret)
    )
    try:
        assert result.exit_code == 0, result.output
        assert "v_disposition_summary" in result.output
        assert await raw.fetchval("SELECT rolcanlogin FROM pg_roles WHERE rolname = $1", role)
        assert await raw.fetchval("SELECT has_table_privilege($1, 'v_rework', 'SELECT')", role)
    finally:
        if await raw.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role):
            await raw.execute(f"DROP OWNED BY {role}")
            await raw.execute(f"DROP ROLE {role}")


async def test_grant_reader_command_refuses_a_bad_name(database_url: str) -> None:
    """A refused role name exits 1 with the rule, not a traceback."""
    result = await _invoke(
        database_url, "grant-reader", "--role-name", "Bad-Name", WL_READER_PASSWORD="x"
    )
    assert result.exit_code == 1
    assert "invalid_input" in result.output
    assert "ledger_reader" in result.output


async def test_grant_reader_takes_no_password_on_the_command_line(database_url: str) -> None:
    """`--password` is not an option (argv is visible to every local user in `ps`)."""
    result = await _invoke(
        database_url, "grant-reader", "--role-name", "ledger_reader", "--password", "x"
    )
    assert result.exit_code == 2
    assert "No such option" in result.output


async def test_report_watch_redraws_from_the_database(
    seeded: Ledger,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--watch reads the views each round and leaves the last tables on screen."""
    monkeypatch.setenv("WL_DATABASE_URL", database_url)
    monkeypatch.setenv("COLUMNS", "220")
    await asyncio.to_thread(asyncio.run, watch_report("orders", 0.05, rounds=2))
    out = capsys.readouterr().out
    assert _row(out, "v_stall_list", "o3")[:4] == ["o3", "orders", "in_progress", "agent-f"]
    assert "Ctrl-C to stop" in out


async def test_open_ledger_stores_the_stall_threshold(database_url: str) -> None:
    """Opening the ledger (as serve does) writes WL_STALL_SECONDS where the view reads it."""
    settings = dataclasses.replace(load_settings(), database_url=database_url, stall_seconds=42)
    async with open_ledger(settings, max_connections=1) as ledger:
        stored = await ledger.store.pool.fetchval("SELECT stall_seconds FROM wl_settings")
    assert stored == 42


async def test_open_ledger_without_a_threshold_leaves_the_stored_one(database_url: str) -> None:
    """A CLI started without WL_STALL_SECONDS does not overwrite the server's threshold."""
    told = dataclasses.replace(load_settings(), database_url=database_url, stall_seconds=42)
    async with open_ledger(told, max_connections=1):
        pass
    untold = dataclasses.replace(told, stall_seconds=None)
    async with open_ledger(untold, max_connections=1) as ledger:
        stored = await ledger.store.pool.fetchval("SELECT stall_seconds FROM wl_settings")
    assert stored == 42


LONG_DOMAIN = "estate/notifications-delivery-and-preferences-service"


async def _long_names(ledger: Ledger, raw: asyncpg.Connection) -> None:
    """A domain and a ref wider than half a terminal, a cost of eight digits."""
    from work_ledger.domain.model import Actor, NewUnit

    ref = "repo-notifications/src/main/java/com/example/delivery/PreferenceResolver.java"
    await ledger.register([NewUnit(ref, "fleet-a", LONG_DOMAIN)], Actor("op", privileged=True))
    claim = await ledger.claim_named(ref, "agent-long", lease_seconds=3600)
    assert claim.attempt is not None
    await ledger.record_cost(claim.attempt.id, 12_345_678_90, Actor("agent-long"))


async def test_report_at_80_columns_cuts_no_name_and_no_number(
    seeded: Ledger, raw: asyncpg.Connection, database_url: str
) -> None:
    """At 80 columns every line fits, and the long domain, the long ref and the big total
    are printed whole (stacked when a table would not fit)."""
    await _long_names(seeded, raw)
    result = await _invoke(database_url, "report", COLUMNS="80")
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    flat = " ".join(result.output.split())
    assert LONG_DOMAIN in flat
    assert "repo-notifications/src/main/java/com/example/delivery/PreferenceResolver.java" in (
        result.output.replace("\n", "").replace(" ", "")
    )
    assert "$12,345,678.90" in flat


async def test_report_caps_each_list_and_says_what_it_left_out(
    seeded: Ledger, raw: asyncpg.Connection, database_url: str
) -> None:
    """--top 1: one domain row per list and one stalled unit, then how many more and the
    command that shows them; --stalls and --all show every row."""
    await raw.execute(
        "UPDATE work_units SET last_heartbeat_at = now() - interval '20 minutes'"
        " WHERE state IN ('claimed', 'in_progress')"
    )
    capped = await _invoke(database_url, "report", "--top", "1")
    assert capped.exit_code == 0, capped.output
    assert "and 1 more stalled units: `work-ledger report --stalls`" in capped.output
    assert "and 2 more domains: `work-ledger report --all`" in capped.output
    full = await _invoke(database_url, "report", "--top", "1", "--stalls", "--all")
    assert "more stalled units" not in full.output
    assert "more domains" not in full.output
    assert _row(full.output, "v_stall_list", "o4")[0] == "o4"


async def test_report_json_gives_the_rows_for_scripts(seeded: Ledger, database_url: str) -> None:
    """--json prints the views' rows, numbers as numbers, and the stalled count."""
    import json

    result = await _invoke(database_url, "report", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    total = next(r for r in report["queue_depth"] if r["scope"] == "total")
    assert (total["units"], total["open"]) == (11, 5)
    assert report["stalled_units"] == 1
    migrated = next(r for r in report["dispositions"] if r["disposition"] == "MIGRATED")
    assert migrated["cost_per_unit_cents"] == 110


async def test_report_lists_waiting_units_budgets_and_cost_by_model(
    seeded: Ledger, database_url: str
) -> None:
    """A unit held by the DEAD s3 comes before one parked at its attempt limit; the budget
    shows what is spent; cost is summed per model."""
    from work_ledger.domain.model import Actor, NewUnit

    operator = Actor("operator", privileged=True)
    await seeded.set_budget("fleet-a", 1_000, operator)
    await seeded.register([NewUnit("parked", "fleet-a", "orders", max_attempts=1)], operator)
    await seeded.claim_named("parked", "agent-p", lease_seconds=60)
    await seeded.release("parked", Actor("agent-p"))
    await seeded.register([NewUnit("held", "fleet-a", "search", requires=("s3",))], operator)
    result = await _invoke(database_url, "report")
    assert result.exit_code == 0, result.output
    waiting = result.output.split("v_waiting", 1)[1]
    assert waiting.index("held") < waiting.index("parked")
    assert _row(result.output, "v_waiting", "held")[2] == "s3 (DEAD)"
    assert _row(result.output, "v_budget", "fleet-a / all domains")[1:4] == [
        "$10.00", "$3.60", "$6.40"
    ]  # fmt: skip
    assert _row(result.output, "v_cost_by_model", "(no model)")[1] == "$3.60"


async def test_report_shows_live_against_each_cap_and_the_paused(
    seeded: Ledger, database_url: str
) -> None:
    """A capped fleet and a paused domain: live / cap, and paused scopes first."""
    from work_ledger.domain.flow import ControlChange
    from work_ledger.domain.model import Actor

    operator = Actor("operator", privileged=True)
    await seeded.set_controls(ControlChange("fleet-a", "ramp", max_live=9), operator)
    await seeded.set_controls(
        ControlChange("fleet-a", "weekend", domain="orders", paused=True), operator
    )
    result = await _invoke(database_url, "report")
    assert result.exit_code == 0, result.output
    controls = result.output.split("v_controls", 1)[1]
    assert controls.index("fleet-a / orders") < controls.index("fleet-a / all domains")
    assert _row(result.output, "v_controls", "fleet-a / all domains")[1].endswith("/ 9")
    assert _row(result.output, "v_controls", "fleet-a / orders")[1].endswith("/ —")


async def test_queue_depth_and_report_show_live_against_caps_and_paused_scopes(
    seeded: Ledger, database_url: str, raw: asyncpg.Connection
) -> None:
    """v_queue_depth: live against the domain's cap, and the paused scopes each row names
    (a fleet-wide pause on the total row); the report says both under the queue."""
    from work_ledger.domain.flow import ControlChange
    from work_ledger.domain.model import Actor

    operator = Actor("operator", privileged=True)
    await seeded.set_controls(
        ControlChange("fleet-a", "ramp", domain="orders", max_live=3), operator
    )
    await seeded.set_controls(
        ControlChange("fleet-a", "weekend", domain="orders", paused=True), operator
    )
    await seeded.set_controls(ControlChange("fleet-a", "legacy down", paused=True), operator)
    rows = {r["domain"]: r for r in await raw.fetch("SELECT * FROM v_queue_depth")}
    orders, total = rows["orders"], rows["(all)"]
    assert (orders["live"], orders["max_live"]) == (orders["claimed"] + orders["in_progress"], 3)
    assert orders["paused"] == ["fleet-a/orders"]
    assert (rows["billing"]["max_live"], rows["billing"]["paused"]) == (None, [])
    assert (total["max_live"], total["paused"]) == (None, ["fleet-a", "fleet-a/orders"])
    result = await _invoke(database_url, "report")
    assert result.exit_code == 0, result.output
    assert f"live / cap: orders {orders['live']} / 3" in result.output
    assert "paused: fleet-a, fleet-a/orders" in result.output
