"""Units to register, read from a CSV or JSONL file, each bad row named by its line.

CSV: a header row naming `external_ref` and `fleet` (and optionally `domain`,
`workflow_id`); JSONL: one object per line with the same keys. A default fleet or domain
fills rows that leave them out. Blank lines are skipped. A row is bad when a required
field is missing or empty, a field is too long, unknown or not UTF-8 (JSON's lone
surrogate escapes), or its external_ref already appeared on an earlier line.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from work_ledger.client.models import NewUnit

FIELDS = ("external_ref", "fleet", "domain", "workflow_id")
MAX_REF = 256


@dataclass(frozen=True, slots=True)
class Row:
    line: int
    unit: NewUnit


@dataclass(frozen=True, slots=True)
class BadRow:
    line: int
    error: str


def is_jsonl(path: Path) -> bool:
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        return True
    if path.suffix.lower() in (".csv", ".tsv"):
        return False
    with path.open(encoding="utf-8") as handle:
        for text in handle:
            if text.strip():
                return text.lstrip().startswith("{")
    return False


def read_units(
    path: Path, *, fleet: str | None = None, domain: str | None = None
) -> Iterator[Row | BadRow]:
    """Every row of the file, good or bad, in file order."""
    rows = _jsonl_rows(path) if is_jsonl(path) else _csv_rows(path)
    first_line: dict[str, int] = {}
    for line, fields in rows:
        if isinstance(fields, str):
            yield BadRow(line, fields)
            continue
        checked = _check(fields, fleet, domain)
        if isinstance(checked, str):
            yield BadRow(line, checked)
        elif checked.external_ref in first_line:
            yield BadRow(
                line,
                f"external_ref {checked.external_ref!r} already appears on line "
                f"{first_line[checked.external_ref]}",
            )
        else:
            first_line[checked.external_ref] = line
            yield Row(line, checked)


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any] | str]]:
    with path.open(encoding="utf-8") as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                yield line, f"not valid JSON ({exc.msg})"
                continue
            yield line, value if isinstance(value, dict) else "not a JSON object"


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, Any] | str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = [name.strip() for name in next(reader, [])]
        unknown = [name for name in header if name not in FIELDS]
        if "external_ref" not in header or unknown:
            why = f"unknown columns {unknown}" if unknown else "no external_ref column"
            yield 1, f"the header row must name columns from {', '.join(FIELDS)}: {why}"
            return
        start = reader.line_num + 1
        for values in reader:
            if any(v.strip() for v in values):
                if len(values) != len(header):
                    yield start, f"{len(values)} values for the {len(header)} header columns"
                else:
                    yield start, {k: v for k, v in zip(header, values, strict=True) if v != ""}
            start = reader.line_num + 1


def _check(fields: dict[str, Any], fleet: str | None, domain: str | None) -> NewUnit | str:
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        return f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(FIELDS)}"
    values = {"fleet": fleet, "domain": domain, **fields}
    for name in FIELDS:
        value = values.get(name)
        if value is not None and not isinstance(value, str):
            return f"{name} must be a string, not {type(value).__name__}"
    ref, unit_fleet = values.get("external_ref"), values.get("fleet")
    if not ref or not ref.strip():
        return "external_ref is missing or empty"
    if not unit_fleet or not unit_fleet.strip():
        return "fleet is missing or empty (add a fleet column or pass --fleet)"
    too_long = [n for n in FIELDS if len(values.get(n) or "") > MAX_REF]
    if too_long:
        return f"{', '.join(too_long)} longer than {MAX_REF} characters"
    unsendable = [n for n in FIELDS if not _is_utf8(values.get(n) or "")]
    if unsendable:
        return f"{', '.join(unsendable)} is not UTF-8 text (a lone surrogate escape?); fix the file"
    return NewUnit(ref, unit_fleet, values.get("domain") or None, values.get("workflow_id"))


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
