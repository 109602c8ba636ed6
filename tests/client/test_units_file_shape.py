"""Units files with prerequisites and attempt limits, and the children of a split."""

from __future__ import annotations

from pathlib import Path

from work_ledger.client import NewChild, NewUnit
from work_ledger.client.units_file import BadRow, Row, read_children, read_units


def test_csv_requires_is_split_on_semicolons_and_max_attempts_read(tmp_path: Path) -> None:
    """`requires` holds refs separated by `;` (spaces and empty parts dropped); a
    `max_attempts` cell is a whole number."""
    path = tmp_path / "units.csv"
    path.write_text(
        'external_ref,fleet,requires,max_attempts\nlib,f,,\nsvc/a,f,lib,3\nsvc/b,f,"lib; svc/a;",\n'
    )
    assert [r.unit for r in read_units(path) if isinstance(r, Row)] == [
        NewUnit("lib", "f"),
        NewUnit("svc/a", "f", requires=("lib",), max_attempts=3),
        NewUnit("svc/b", "f", requires=("lib", "svc/a")),
    ]


def test_jsonl_requires_takes_a_list_or_a_string(tmp_path: Path) -> None:
    """In JSONL, `requires` is a list of refs or the same `;`-separated text."""
    path = tmp_path / "units.jsonl"
    path.write_text(
        '{"external_ref": "a", "fleet": "f", "requires": ["x", "y"], "max_attempts": 1}\n'
        '{"external_ref": "b", "fleet": "f", "requires": "x;y"}\n'
    )
    units = [r.unit for r in read_units(path) if isinstance(r, Row)]
    assert [(u.requires, u.max_attempts) for u in units] == [(("x", "y"), 1), (("x", "y"), None)]


def test_bad_requires_and_max_attempts_are_named_by_line(tmp_path: Path) -> None:
    """max_attempts outside 1..100 or not whole, requires not refs, a ref twice: bad rows."""
    path = tmp_path / "units.jsonl"
    path.write_text(
        '{"external_ref": "a", "fleet": "f", "max_attempts": 0}\n'
        '{"external_ref": "b", "fleet": "f", "max_attempts": true}\n'
        '{"external_ref": "c", "fleet": "f", "requires": [1]}\n'
        '{"external_ref": "d", "fleet": "f", "requires": "x;x"}\n'
        '{"external_ref": "e", "fleet": "f", "max_attempts": "2.5"}\n'
    )
    bad = [r for r in read_units(path) if isinstance(r, BadRow)]
    assert [b.line for b in bad] == [1, 2, 3, 4, 5]
    assert "max_attempts must be a whole number 1..100" in bad[0].error
    assert "requires must list refs" in bad[2].error
    assert "twice" in bad[3].error


def test_split_children_read_from_csv_jsonl_or_plain_lines(tmp_path: Path) -> None:
    """A child file is CSV or JSONL (external_ref, domain, requires), or one ref per line."""
    csv_file, jsonl_file, text_file = (tmp_path / n for n in ("c.csv", "c.jsonl", "c.txt"))
    csv_file.write_text("external_ref,requires\nx/1,\nx/2,x/1\n")
    jsonl_file.write_text('{"external_ref": "x/1", "domain": "ui"}\n')
    text_file.write_text("x/1\n\n x/2 \n")
    assert list(read_children(csv_file)) == [NewChild("x/1"), NewChild("x/2", None, ("x/1",))]
    assert list(read_children(jsonl_file)) == [NewChild("x/1", "ui")]
    assert list(read_children(text_file)) == [NewChild("x/1"), NewChild("x/2")]


def test_split_children_refuse_a_fleet_column(tmp_path: Path) -> None:
    """A child inherits its parent's fleet: a fleet field is named as unknown."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"external_ref": "x/1", "fleet": "other"}\n')
    (bad,) = read_children(path)
    assert isinstance(bad, BadRow)
    assert "unknown field(s) fleet" in bad.error
