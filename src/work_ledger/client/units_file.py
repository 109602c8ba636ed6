"""Units to register (or a split's children), read from a file, each bad row named by line.

CSV: a header row naming `external_ref` and `fleet` (and optionally `domain`,
`workflow_id`, `requires`, `max_attempts`, `exclusive`); JSONL: one object per line with
the same keys. `requires` lists prerequisites' refs separated by `;` (in JSONL, a list of
strings too), `exclusive` the unit's exclusion keys the same way (DESIGN §13);
`max_attempts` is a whole number 1..100. A default fleet or domain fills rows that leave
them out. Blank lines are skipped. A row is bad when a required field is missing or empty,
a field is too long, unknown or not UTF-8 (JSON's lone surrogate escapes), or its
external_ref already appeared on an earlier line. A prerequisite is best listed before its
dependents: the server refuses a ref it does not know yet (`unknown_prerequisite`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from work_ledger.client.models import NewChild, NewUnit

TEXT_FIELDS = ("external_ref", "fleet", "domain", "workflow_id")
FIELDS = (*TEXT_FIELDS, "requires", "max_attempts", "exclusive")
CHILD_FIELDS = ("external_ref", "domain", "requires", "exclusive")
MAX_REF = 256
MAX_REQUIRES = 50
MAX_ATTEMPTS = 100
MAX_KEYS = 20
MAX_KEY = 200


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


def read_children(path: Path) -> Iterator[NewChild | BadRow]:
    """The children of a split from a file: CSV or JSONL with `external_ref` and optionally
    `domain` and `requires` (a child inherits its parent's fleet), or plain text, one
    external_ref per line."""
    if not is_jsonl(path) and not _has_header(path):
        rows: Iterator[tuple[int, dict[str, Any] | str]] = (
            (line, {"external_ref": text.strip()})
            for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if text.strip()
        )
    else:
        rows = _jsonl_rows(path) if is_jsonl(path) else _csv_rows(path, CHILD_FIELDS)
    for line, fields in rows:
        checked = fields if isinstance(fields, str) else _check_child(fields)
        yield BadRow(line, checked) if isinstance(checked, str) else checked


def _has_header(path: Path) -> bool:
    with path.open(encoding="utf-8") as handle:
        first = next((text for text in handle if text.strip()), "")
    return "external_ref" in (cell.strip() for cell in first.split(","))


def _check_child(fields: dict[str, Any]) -> NewChild | str:
    unknown = sorted(set(fields) - set(CHILD_FIELDS))
    if unknown:
        return f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(CHILD_FIELDS)}"
    ref, domain = fields.get("external_ref"), fields.get("domain")
    if not isinstance(ref, str) or not ref.strip():
        return "external_ref is missing or empty"
    if domain is not None and not isinstance(domain, str):
        return f"domain must be a string, not {type(domain).__name__}"
    if len(ref) > MAX_REF or len(domain or "") > MAX_REF:
        return f"external_ref or domain longer than {MAX_REF} characters"
    requires = _requires(fields.get("requires"))
    if isinstance(requires, str):
        return requires
    keys = None if "exclusive" not in fields else _exclusive(fields["exclusive"])
    if isinstance(keys, str):
        return keys
    return NewChild(
        ref.strip(), domain or None, tuple(requires), None if keys is None else tuple(keys)
    )


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


def _csv_rows(
    path: Path, fields: tuple[str, ...] = FIELDS
) -> Iterator[tuple[int, dict[str, Any] | str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = [name.strip() for name in next(reader, [])]
        unknown = [name for name in header if name not in fields]
        if "external_ref" not in header or unknown:
            why = f"unknown columns {unknown}" if unknown else "no external_ref column"
            yield 1, f"the header row must name columns from {', '.join(fields)}: {why}"
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
    for name in TEXT_FIELDS:
        value = values.get(name)
        if value is not None and not isinstance(value, str):
            return f"{name} must be a string, not {type(value).__name__}"
    ref, unit_fleet = values.get("external_ref"), values.get("fleet")
    if not ref or not ref.strip():
        return "external_ref is missing or empty"
    if not unit_fleet or not unit_fleet.strip():
        return "fleet is missing or empty (add a fleet column or pass --fleet)"
    requires = _requires(values.get("requires"))
    attempts = _max_attempts(values.get("max_attempts"))
    if isinstance(requires, str):
        return requires
    if isinstance(attempts, str):
        return attempts
    keys = _exclusive(values.get("exclusive"))
    if isinstance(keys, str):
        return keys
    texts = [values.get(n) or "" for n in TEXT_FIELDS]
    too_long = [n for n, t in zip(TEXT_FIELDS, texts, strict=True) if len(t) > MAX_REF]
    if too_long or any(len(r) > MAX_REF for r in requires):
        return f"{', '.join(too_long) or 'a requires ref'} longer than {MAX_REF} characters"
    unsendable = [n for n in TEXT_FIELDS if not _is_utf8(values.get(n) or "")]
    if unsendable or not all(_is_utf8(r) for r in requires):
        names = ", ".join(unsendable) or "requires"
        return f"{names} is not UTF-8 text (a lone surrogate escape?); fix the file"
    return NewUnit(
        ref,
        unit_fleet,
        values.get("domain") or None,
        values.get("workflow_id"),
        tuple(requires),
        attempts,
        tuple(keys),
    )


def _requires(value: Any) -> list[str] | str:
    """The prerequisites' refs (`a;b` or, in JSONL, ["a", "b"]); the problem if bad."""
    if value is None:
        return []
    if isinstance(value, str):
        refs = [part.strip() for part in value.split(";")]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        refs = [v.strip() for v in value]
    else:
        return "requires must list refs separated by ';' (or, in JSONL, a list of strings)"
    refs = [r for r in refs if r]
    if len(refs) > MAX_REQUIRES:
        return f"requires lists {len(refs)} prerequisites; at most {MAX_REQUIRES}"
    if len(set(refs)) != len(refs):
        return "requires names a prerequisite twice"
    return refs


def _exclusive(value: Any) -> list[str] | str:
    """The exclusion keys (`a;b` or, in JSONL, ["a", "b"]); the problem if bad."""
    if value is None:
        return []
    if isinstance(value, str):
        keys = [part.strip() for part in value.split(";")]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        keys = [v.strip() for v in value]
    else:
        return "exclusive must list keys separated by ';' (or, in JSONL, a list of strings)"
    keys = [k for k in keys if k]
    if len(keys) > MAX_KEYS or any(len(k) > MAX_KEY for k in keys):
        return f"exclusive lists at most {MAX_KEYS} keys of at most {MAX_KEY} characters"
    return keys


def _max_attempts(value: Any) -> int | str | None:
    """A whole number 1..100 (a CSV cell is text); None when absent; the problem if bad."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ATTEMPTS:
        return value
    return f"max_attempts must be a whole number 1..{MAX_ATTEMPTS}, not {value!r}"


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
