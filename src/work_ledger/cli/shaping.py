"""`split` and `waive`: the shape of the work (DESIGN §12), over the SDK.

work-ledger split REF CHILD_REF... [--from-file F]   hand back a unit as children
work-ledger waive REF PREREQ_REF                      operator: drop one prerequisite
"""

from __future__ import annotations

import sys
from pathlib import Path

from work_ledger.cli.agent import ATTEMPT, REASON, UNIT
from work_ledger.cli.agent_client import EXIT_ERROR, JSON, emit_json, handled, make_client
from work_ledger.cli.console import console
from work_ledger.cli.tables import print_unit
from work_ledger.cli.verbs import arg, verb
from work_ledger.client import NewChild
from work_ledger.client.units_file import BadRow, read_children


def _children(refs: list[str], from_file: Path | None) -> list[NewChild | str]:
    """The children named on the command line, then those of `from_file`; a bad row stops."""
    children: list[NewChild | str] = list(refs)
    if from_file is not None:
        rows = list(read_children(from_file))
        bad = [r for r in rows if isinstance(r, BadRow)]
        for row in bad:
            print(f"{from_file}: line {row.line}: {row.error}", file=sys.stderr)
        if bad:
            raise SystemExit(EXIT_ERROR)
        children += [r for r in rows if isinstance(r, NewChild)]
    if not children:
        print(
            "split needs at least one child: name their external_refs, or --from-file F "
            "(CSV or JSONL with external_ref, domain, requires; or one ref per line)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return children


@verb(
    # Named, never $WL_UNIT_ID: with the children after it, a unit left out would take the
    # first child's place.
    arg("unit", metavar="REF", help="The unit to split: its id or external_ref."),
    arg("children", nargs="*", default=[], metavar="CHILD_REF", help="The children's refs."),
    arg("--from-file", type=Path, help="Children from a file (CSV, JSONL, or one per line)."),
    REASON,
    ATTEMPT,
    JSON,
)
def split(
    unit: str,
    children: list[str],
    from_file: Path | None,
    reason: str | None,
    attempt: str | None,
    as_json: bool,
) -> None:
    """Hand back an in_progress unit that is too big for one attempt as child units; your
    attempt ends `split`, and the unit waits until its children finish, then comes back
    ready to be integrated and verified."""
    wanted = _children(children, from_file)
    with handled(as_json), make_client() as client:
        done = client.split(unit, wanted, reason=reason, attempt_id=attempt)
        if as_json:
            emit_json(done)
            return
        refs = ", ".join(c.external_ref for c in done.children)
        console.print(
            f"split {done.unit.external_ref} into {len(done.children)}: {refs}; it waits on "
            "them, then comes back ready to integrate",
            markup=False,
            highlight=False,
        )


@verb(
    UNIT,
    arg("prerequisite", metavar="PREREQ_REF", help="The prerequisite to drop (id or ref)."),
    REASON,
    JSON,
)
def waive(unit: str, prerequisite: str, reason: str | None, as_json: bool) -> None:
    """Operator: drop one prerequisite of a waiting unit (one held by a DEAD or DEFERRED
    prerequisite, say); it becomes ready if nothing else holds it."""
    with handled(as_json), make_client(operator=True) as client:
        found = client.waive(unit, prerequisite, reason=reason)
        emit_json({"unit": found}) if as_json else print_unit(found)
