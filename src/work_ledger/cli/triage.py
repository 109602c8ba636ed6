"""Triage's verb over the HTTP API: `route`, recording that a question went to the human
queue (`questions --unrouted` lists the ones still to route)."""

from __future__ import annotations

import typer

from work_ledger.cli.agent_client import emit_json, handled, make_client
from work_ledger.cli.tables import questions_table
from work_ledger.cli.typer_app import JsonOption, app, console


@app.command()
def route(
    question: str = typer.Argument(..., help="The question id (from `questions --unrouted`)."),
    external_id: str = typer.Argument(
        ..., metavar="EXTERNAL_ID", help="The id of its item in the human queue."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Record that a question was routed to the human queue, once (needs a triage token).

    The same id again is a no-op; another id is refused (exit 4) naming the routed one:
    close the item you created."""
    with handled(as_json), make_client() as client:
        routed = client.route_question(question, external_id)
        emit_json(routed) if as_json else console.print(questions_table([routed], "routed"))
