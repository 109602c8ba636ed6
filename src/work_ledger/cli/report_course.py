"""The report's opening: the program's course (v_daily, v_forecast) in a few lines that fit
80 columns. The last 7 UTC days against the 7 before, a one-line chart of daily MIGRATED
over 28 days, and the forecast in a sentence; never a date the history cannot carry."""

from __future__ import annotations

import datetime as dt
import textwrap
from decimal import Decimal
from typing import Any

from work_ledger.readside.report import Report

WIDTH = 80
BLOCKS = "▁▂▃▄▅▆▇█"
Row = dict[str, Any]
ENDED = ("verified", "split", "failed", "abandoned", "superseded")
# Ended without verifying or splitting: the ramp gate's failed share (DESIGN §13).
UNSUCCESSFUL = ("failed", "abandoned", "superseded")


def _days(report: Report) -> tuple[dt.date, dict[dt.date, Row]]:
    today: dt.date = report.forecast["today"]
    return today, {r["day"]: r for r in report.course}


def _window(rows: dict[dt.date, Row], today: dt.date, first: int, last: int) -> dict[str, Any]:
    """Sums over the UTC days `today - first` .. `today - last` (zero days included)."""
    picked = [rows[d] for n in range(last, first + 1) if (d := today - dt.timedelta(n)) in rows]
    ended = sum(r[k] for r in picked for k in ENDED)
    migrated = sum(r["migrated"] for r in picked)
    cost = sum(r["cost_cents"] for r in picked)
    return {
        "migrated": migrated,
        "per_migrated": Decimal(cost) / migrated if migrated else None,
        "failed_share": (
            Decimal(sum(r[k] for r in picked for k in UNSUCCESSFUL)) / ended if ended else None
        ),
        "agents": max((r["agents"] for r in picked), default=0),
    }


def _dollars(cents: Decimal | int | None) -> str:
    return "—" if cents is None else f"${Decimal(cents) / 100:,.2f}"


def _share(value: Decimal | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _change(now: Decimal | int | None, before: Decimal | int | None) -> str:
    if now is None or before is None or before == 0:
        return ""
    return f"{(Decimal(now) - Decimal(before)) / Decimal(before) * 100:+.0f}%"


def _points(now: Decimal | None, before: Decimal | None) -> str:
    return "" if now is None or before is None else f"{(now - before) * 100:+.1f} pts"


def comparison(report: Report) -> list[str]:
    """The last 7 UTC days (to yesterday) against the 7 before, one figure a line."""
    today, rows = _days(report)
    last, before = _window(rows, today, 7, 1), _window(rows, today, 14, 8)
    lines = [f"{'':26}{'last 7 days':>14}{'7 before':>14}{'change':>12}"]
    figures = (
        ("MIGRATED", f"{last['migrated']:,}", f"{before['migrated']:,}",
         _change(last["migrated"], before["migrated"])),
        ("cost per MIGRATED", _dollars(last["per_migrated"]), _dollars(before["per_migrated"]),
         _change(last["per_migrated"], before["per_migrated"])),
        ("failed share", _share(last["failed_share"]), _share(before["failed_share"]),
         _points(last["failed_share"], before["failed_share"])),
        ("agents (most in a day)", f"{last['agents']:,}", f"{before['agents']:,}",
         _change(last["agents"], before["agents"])),
    )  # fmt: skip
    lines += [f"{name:26}{a:>14}{b:>14}{c:>12}" for name, a, b, c in figures]
    return lines


def chart(report: Report) -> str:
    """Daily MIGRATED over the 28 UTC days before today, one block character a day (a
    space: none that day), scaled to the window's busiest day."""
    today, rows = _days(report)
    counts = [
        rows[d]["migrated"] if (d := today - dt.timedelta(n)) in rows else 0
        for n in range(28, 0, -1)
    ]
    top = max(counts)
    bars = "".join(
        " " if n <= 0 else BLOCKS[min(len(BLOCKS) - 1, (n * len(BLOCKS) - 1) // top)]
        for n in counts
    )
    return f"MIGRATED a day, 28 days to yesterday |{bars}| most {top:,}"


def _date(day: dt.date, today: dt.date) -> str:
    return f"{day.day} {day:%b}" + ("" if day.year == today.year else f" {day.year}")


def forecast(report: Report) -> str:
    """The forecast in one sentence, or how much more history it needs."""
    row = report.forecast
    today: dt.date = row["today"]
    if row.get("open_units") is None:
        return "no units yet: nothing to forecast"
    opened = f"{row['open_units']:,} units open"
    if row["open_units"] == 0:
        return f"{opened}: the backlog is done"
    if row["days_p50"] is None:
        return f"{opened}; no forecast yet: {row['basis']}"
    pace = (
        "at the last 28 days' pace"
        if row["history_days"] >= 28
        else f"at the pace of the {row['history_days']} days since the first disposal"
    )
    spend = (
        ""
        if row["spend_p50_cents"] is None
        else (f", about ${Decimal(row['spend_p50_cents']) / 100:,.0f} more")
    )
    if row["days_p85"] is None:
        return (
            f"{opened}; {pace} done by {_date(row['date_p50'], today)} (P50), no P85 date "
            f"({row['basis']}){spend}"
        )
    return (
        f"{opened}; {pace} done between {_date(row['date_p50'], today)} (P50) and "
        f"{_date(row['date_p85'], today)} (P85){spend}"
    )


def course_lines(report: Report) -> list[str]:
    """The report's opening, every line at most 80 columns."""
    scope = report.domain or "all domains"
    lines = [f"The program's course ({scope}), UTC days", *comparison(report), chart(report)]
    lines += textwrap.wrap(forecast(report), WIDTH)
    return lines
