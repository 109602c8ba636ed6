"""A table that fits the terminal without cutting anything: drawn as a table when its
widest row fits, else stacked (each row's name on its own line, then `column value`
pairs packed into the width). Cells are plain text, never markup, and never truncated:
a value wider than the terminal folds onto the next line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True, slots=True)
class Section:
    """One list of the report: its title, columns (the first names the row), rows of
    text cells, which columns are numbers (right-aligned), which rows are totals (bold),
    and what was left out (`more`: e.g. "and 21,980 more: `work-ledger report --stalls`")."""

    title: str
    columns: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    numeric: frozenset[str] = frozenset()
    totals: frozenset[int] = frozenset()
    more: str | None = None
    empty: str = "none"
    notes: list[str] = field(default_factory=list)


def _lines(cell: str) -> list[str]:
    return cell.split("\n") if cell else [""]


def table_width(section: Section) -> int:
    """The width rich's default box needs for `section` with nothing wrapped: each column
    its widest line plus a space each side and a rule, and the closing rule."""
    widths = [len(c) for c in section.columns]
    for row in section.rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], *(len(line) for line in _lines(cell)))
    return sum(w + 3 for w in widths) + 1


def _table(section: Section) -> Table:
    table = Table(title=section.title, title_justify="left")
    for column in section.columns:
        right = column in section.numeric
        table.add_column(column, justify="right" if right else "left", no_wrap=right)
    for i, row in enumerate(section.rows):
        table.add_row(*(Text(c) for c in row), style="bold" if i in section.totals else None)
    return table


def _pack(pairs: Sequence[str], width: int, indent: str = "  ") -> list[str]:
    """Pairs joined by two spaces into lines of at most `width` (a longer pair alone)."""
    lines: list[str] = []
    line = indent
    for pair in pairs:
        candidate = pair if line == indent else f"  {pair}"
        if line != indent and len(line) + len(candidate) > width:
            lines.append(line)
            line, candidate = indent, pair
        line += candidate
    if line != indent:
        lines.append(line)
    return lines


def _stacked(section: Section, width: int) -> Group:
    parts: list[RenderableType] = [Text(section.title, style="italic")]
    for i, row in enumerate(section.rows):
        parts.append(Text(row[0], style="bold" if i in section.totals else "bold cyan"))
        pairs, lists = [], []
        for column, cell in zip(section.columns[1:], row[1:], strict=True):
            lines = [line for line in _lines(cell) if line]
            if len(lines) == 1:
                pairs.append(f"{column} {lines[0]}")
            elif lines:
                # A cell of several lines (links) keeps its own lines, aligned under the first.
                lists.append(f"  {column} {lines[0]}")
                lists += [f"  {' ' * len(column)} {line}" for line in lines[1:]]
        for line in _pack(pairs, width) + lists:
            parts.append(Text(line, overflow="fold"))
    return Group(*parts)


def render(section: Section, width: int) -> Group:
    """`section` drawn to fit `width` columns, with what it left out and its notes."""
    parts: list[RenderableType] = []
    if not section.rows:
        parts += [Text(section.title, style="italic"), Text(f"  {section.empty}")]
    elif table_width(section) <= width:
        parts.append(_table(section))
    else:
        parts.append(_stacked(section, width))
    for note in ([section.more] if section.more else []) + section.notes:
        parts.append(Text(f"  {note}", style="dim", overflow="fold"))
    parts.append(Text(""))
    return Group(*parts)
