"""The report's lists, from a `Report`: each a `Section` (cli/fit.py draws it to fit the
terminal), the worst rows first and at most `top` of them, then a line saying how many
more there are and the command that shows them all. Numbers read with thousands
separators, money in dollars, durations in hours and minutes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from work_ledger.cli.fit import Section
from work_ledger.readside.report import Report

STATE_COLUMNS = ("ready", "claimed", "in_progress", "blocked", "verified", "done", "abandoned")
Row = dict[str, Any]


def count(value: int | Decimal | None) -> str:
    return "—" if value is None else f"{value:,}"


def money(cents: int | Decimal | None) -> str:
    return "—" if cents is None else f"${Decimal(cents) / 100:,.2f}"


def rate(value: Decimal | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def ago(seconds: int | Decimal | None) -> str:
    if seconds is None:
        return "—"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def when(moment: dt.datetime | None) -> str:
    return "—" if moment is None else moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _more(left_out: int, what: str, flag: str) -> str | None:
    return f"and {left_out:,} more {what}: `work-ledger report {flag}`" if left_out > 0 else None


def _domains(
    rows: list[Row], worst: Callable[[Row], Any], top: int | None
) -> tuple[list[Row], int]:
    """Domain rows worst first (the largest `worst`; ties by name), at most `top` (None:
    all), then the total row; and how many domain rows were left out."""
    domains = sorted(
        (r for r in rows if r["scope"] == "domain"), key=lambda r: (-worst(r), r["domain"])
    )
    totals = [r for r in rows if r["scope"] == "total"]
    shown = domains if top is None else domains[:top]
    return shown + totals, len(domains) - len(shown)


def _label(row: Row) -> str:
    return "all domains" if row["scope"] == "total" else str(row["domain"])


def _totals(rows: list[Row]) -> frozenset[int]:
    return frozenset(i for i, r in enumerate(rows) if r["scope"] == "total")


def queue(report: Report, top: int | None) -> Section:
    rows, left = _domains(report.queue_depth, lambda r: r["open"], top)
    columns = (*STATE_COLUMNS, "open", "units")
    return Section(
        "v_queue_depth — units by state (most open first)",
        ("domain", *columns),
        [(_label(r), *(count(r[c]) for c in columns)) for r in rows],
        numeric=frozenset(columns),
        totals=_totals(rows),
        more=_more(left, "domains", "--all"),
        notes=_flow_notes(report.queue_depth),
    )


def _flow_notes(rows: list[Row]) -> list[str]:
    """Live against each domain's cap, and the paused scopes (DESIGN §13): why a queue
    with ready units may not be moving. Nothing when no scope is capped or paused."""
    capped = [
        f"{r['domain']} {r['live']} / {r['max_live']}"
        for r in rows
        if r["scope"] == "domain" and r.get("max_live") is not None
    ]
    paused = sorted({p for r in rows for p in r.get("paused") or ()})
    notes = []
    if capped:
        notes.append("live / cap: " + ", ".join(capped))
    if paused:
        notes.append("paused: " + ", ".join(paused) + " (`work-ledger resume`)")
    return notes


def stalls(report: Report) -> Section:
    threshold = report.stalls[0]["stall_threshold_seconds"] if report.stalls else None
    title = "v_stall_list — leased units silent past the stall threshold, longest first"
    if threshold is not None:
        title += f" ({ago(threshold)})"
    rows = [
        (
            r["external_ref"],
            r["domain"],
            r["state"],
            r["holder"],
            count(r["attempt_no"]),
            ago(r["stalled_seconds"]),
            when(r["lease_expires_at"]) + (" (lapsed)" if r["lease_expired"] else ""),
        )
        for r in report.stalls
    ]
    return Section(
        title,
        ("unit", "domain", "state", "holder", "attempt", "silent for", "lease expires"),
        rows,
        numeric=frozenset({"attempt", "silent for"}),
        more=_more(report.stalled_units - len(rows), "stalled units", "--stalls"),
        empty="no stalled units",
    )


def costs(report: Report, top: int | None) -> Section:
    rows, left = _domains(report.costs, lambda r: r["cost_cents"], top)
    numbers = ("units", "attempts", "cost", "per unit", "merged", "per merged", "all per merged")
    return Section(
        "v_cost_per_unit — spend (costliest domains first)",
        ("domain", *numbers),
        [
            (
                _label(r),
                count(r["units"]),
                count(r["attempts"]),
                money(r["cost_cents"]),
                money(r["cost_per_unit_cents"]),
                count(r["merged_units"]),
                money(r["cost_per_merged_unit_cents"]),
                money(r["spend_per_merged_unit_cents"]),
            )
            for r in rows
        ],
        numeric=frozenset(numbers),
        totals=_totals(rows),
        more=_more(left, "domains", "--all"),
        notes=["all per merged: all spend, wasted attempts included, per MIGRATED unit"],
    )


def costliest(report: Report) -> Section:
    return Section(
        "costliest units",
        ("unit", "domain", "state", "attempts", "cost"),
        [
            (
                r["external_ref"],
                r["domain"],
                str(r["disposition"] or r["state"]),
                count(r["attempts"]),
                money(r["cost_cents"]),
            )
            for r in report.costliest
        ],
        numeric=frozenset({"attempts", "cost"}),
    )


def rework(report: Report, top: int | None) -> Section:
    rows, left = _domains(report.rework, lambda r: r["rework_rate"] or 0, top)
    numbers = ("attempted", "reworked", "rate", "extra attempts", "lapsed", "released")
    return Section(
        "v_rework — units that needed more than one attempt (highest rate first)",
        ("domain", *numbers),
        [
            (
                _label(r),
                count(r["attempted_units"]),
                count(r["reworked_units"]),
                rate(r["rework_rate"]),
                count(r["extra_attempts"]),
                count(r["superseded_attempts"]),
                count(r["released_attempts"]),
            )
            for r in rows
        ],
        numeric=frozenset(numbers),
        totals=_totals(rows),
        more=_more(left, "domains", "--all"),
        notes=["lapsed: attempts lost to a lapsed lease; released: ended failed or abandoned"],
    )


def reworked(report: Report) -> Section:
    return Section(
        "most attempts",
        ("unit", "domain", "state", "attempts", "lapsed", "released"),
        [
            (
                r["external_ref"],
                r["domain"],
                str(r["disposition"] or r["state"]),
                count(r["attempts"]),
                count(r["superseded_attempts"]),
                count(r["released_attempts"]),
            )
            for r in report.reworked
        ],
        numeric=frozenset({"attempts", "lapsed", "released"}),
        empty="no unit needed a second attempt",
    )


def dispositions(report: Report) -> Section:
    where = f" in {report.domain}" if report.domain else ""
    numbers = ("units", "attempts", "cost", "per unit", "no evidence")
    rows = []
    for r in report.dispositions:
        links = list(r["evidence_urls"])[:3]
        left = r["evidence_url_count"] - len(links)
        shown = "\n".join(links + ([f"… {left:,} more"] if left > 0 else []))
        rows.append(
            (
                str(r["disposition"]),
                count(r["units"]),
                count(r["attempts"]),
                money(r["cost_cents"]),
                money(r["cost_per_unit_cents"]),
                count(r["units_without_evidence"]),
                shown or "—",
            )
        )
    return Section(
        f"v_disposition_summary — the kill-gate table{where}",
        ("disposition", *numbers, "evidence links"),
        rows,
        numeric=frozenset(numbers),
    )


def question_wait(report: Report) -> Section:
    numbers = ("open", "not routed", "oldest open", "median open", "answered", "p50", "p90")
    rows = []
    for r in report.question_wait:
        label = r["domain"] if r["scope"] == "domain" else r["assignee_group_slug"]
        rows.append(
            (
                "all groups" if r["scope"] == "total" else str(label),
                count(r["open_questions"]),
                count(r["unrouted_questions"]),
                ago(r["oldest_open_seconds"] if r["open_questions"] else None),
                ago(r["open_p50_seconds"]),
                count(r["answered_questions"]),
                ago(r["answer_p50_seconds"]),
                ago(r["answer_p90_seconds"]),
            )
        )
    return Section(
        "v_question_wait — units waiting on people",
        ("assignee group", *numbers),
        rows,
        numeric=frozenset(numbers),
        totals=_totals(report.question_wait),
        notes=["p50, p90: time from asking to answer"],
    )


def waiting(report: Report) -> Section:
    rows = []
    for r in report.waiting:
        if r["reason"] == "answer":
            held_by = "the ledger's question (attempt limit)"
        else:
            held_by = str(r["prerequisite_ref"])
            held_by += f" ({r['prerequisite_disposition'] or r['prerequisite_state']})"
        rows.append((r["external_ref"], r["domain"], held_by, when(r["waiting_since"])))
    return Section(
        "v_waiting — units held (by a DEAD or DEFERRED prerequisite first)",
        ("unit", "domain", "held by", "waiting since"),
        rows,
        more=_more(report.waiting_rows - len(rows), "waiting", "--top 500"),
        empty="no unit is waiting",
        notes=["a DEAD or DEFERRED prerequisite never finishes: waive it or dispose the unit"]
        if any(r["prerequisite_disposition"] in ("DEAD", "DEFERRED") for r in report.waiting)
        else [],
    )


def budgets(report: Report) -> Section:
    numbers = ("cap", "spent", "remaining", "used")
    return Section(
        "v_budget — budgets (most used first)",
        ("fleet / domain", *numbers),
        [
            (
                f"{r['fleet']} / {r['domain'] or 'all domains'}",
                money(r["cap_cents"]),
                money(r["spent_cents"]),
                money(r["remaining_cents"]),
                ("—" if r["percent_used"] is None else f"{r['percent_used']}%")
                + (" exhausted" if r["exhausted"] else ""),
            )
            for r in report.budgets
        ],
        numeric=frozenset(numbers),
        empty="no budget is set (`work-ledger budget set FLEET CAP_CENTS`)",
    )


def controls(report: Report) -> Section:
    numbers = ("live / cap", "held", "ready")
    return Section(
        "v_controls — flow controls (paused first)",
        ("fleet / domain", *numbers, "paused since", "drained"),
        [
            (
                f"{r['fleet']} / {r['domain'] or 'all domains'}",
                f"{r['live']} / {'—' if r['max_live'] is None else r['max_live']}",
                count(r["held"]),
                count(r["ready"]),
                when(r["paused_since"]) if r["paused"] else "—",
                ("yes" if r["drained"] else "no") if r["paused"] else "—",
            )
            for r in report.controls
        ],
        numeric=frozenset(numbers),
        empty="no scope is controlled (`work-ledger cap`, `work-ledger pause`)",
    )


def cost_by_model(report: Report) -> Section:
    numbers = ("cost", "estimated", "input", "output", "cache read", "cache write")
    return Section(
        "v_cost_by_model — spend per model",
        ("model", *numbers),
        [
            (
                str(r["model"] or "(no model)"),
                money(r["cost_cents"]),
                money(r["estimated_cents"]),
                count(r["input_tokens"]),
                count(r["output_tokens"]),
                count(r["cache_read_tokens"]),
                count(r["cache_write_tokens"]),
            )
            for r in report.cost_by_model
        ],
        numeric=frozenset(numbers),
        empty="no cost recorded",
        notes=["tokens in, out, read from and written to the cache"],
    )


def sections(report: Report, top: int | None) -> list[Section]:
    """Every list of the report, in reading order; `top` domain rows each (None: all)."""
    return [
        queue(report, top),
        stalls(report),
        costs(report, top),
        costliest(report),
        rework(report, top),
        reworked(report),
        dispositions(report),
        question_wait(report),
        waiting(report),
        budgets(report),
        cost_by_model(report),
        controls(report),
    ]
