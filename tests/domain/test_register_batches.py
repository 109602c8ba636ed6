"""`register`'s batches: a refused row is left out and the rest of its batch sent again."""

from __future__ import annotations

from work_ledger.cli.register import Tally, send_batch
from work_ledger.client.models import NewUnit, Registration
from work_ledger.client.units_file import Row
from work_ledger.errors import InvalidInput


class Server:
    """Stands in for the API's batch rule: one bad unit refuses the whole batch."""

    def __init__(self, bad: set[str], *, names_rows: bool) -> None:
        self.bad, self.names_rows = bad, names_rows
        self.registered: list[str] = []

    def register(self, units: list[NewUnit]) -> Registration:
        refused = [i for i, u in enumerate(units) if u.external_ref in self.bad]
        if refused:
            errors = [{"loc": ["body", "units", i], "msg": "no"} for i in refused]
            raise InvalidInput("refused", extra={"errors": errors} if self.names_rows else {})
        self.registered += [u.external_ref for u in units]
        return Registration(len(units), 0, [])


def _rows(count: int) -> list[Row]:
    return [Row(line, NewUnit(f"u{line}", "f")) for line in range(2, count + 2)]


def test_named_refusals_leave_out_only_those_rows() -> None:
    """The server names rows 3 and 7: they are bad, the other eight registered."""
    server, tally = Server({"u3", "u7"}, names_rows=True), Tally()
    send_batch(server.register, _rows(10), tally)
    assert sorted(b.line for b in tally.bad) == [3, 7]
    assert (tally.created, sorted(server.registered)) == (
        8,
        sorted(f"u{n}" for n in range(2, 12) if n not in (3, 7)),
    )


def test_unnamed_refusals_are_found_by_halving_the_batch() -> None:
    """Refused without a name, the batch is halved until each bad row stands alone."""
    server, tally = Server({"u5", "u6", "u40"}, names_rows=False), Tally()
    send_batch(server.register, _rows(50), tally)
    assert sorted(b.line for b in tally.bad) == [5, 6, 40]
    assert tally.created == len(server.registered) == 47
    assert len(set(server.registered)) == 47
