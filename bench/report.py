"""The goals, as ratios of figures measured in the same run, and the Markdown of a run
(`python -m bench.report RUN.json` renders a saved run again)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from work_ledger.config import DEFAULT_POOL_SIZE as POOL  # serve's, as the sections run it


def _get(node: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _goal(name: str, value: float | None, op: str, bound: float, how: str) -> dict[str, Any]:
    passed = value is not None and (value >= bound if op == ">=" else value <= bound)
    verdict = "NOT MEASURED" if value is None else "PASS" if passed else "FAIL"
    value = None if value is None else round(value, 3)
    return {"goal": name, "value": value, "bound": f"{op} {bound}", "verdict": verdict, "how": how}


ITEMS, CPU, P99 = "items_per_s", "app_cpu_ms_per_item", "claim_p99_ms"
EVERY, HTTP, AT64 = None, (16, 64), (64,)
# (section, ours, section, limit, figure, op, bound, levels (None: every level), goal)
RATIO_GOALS = [
    ("claims", "service_claim", "claims", "raw_ledger_claim", ITEMS, ">=", 0.9, EVERY,
     "service_claim ≥ 0.9x raw_ledger_claim"),
    ("claims", "service_claim_finish", "claims", "raw_ledger_claim_finish", ITEMS, ">=", 0.9,
     EVERY, "service_claim_finish ≥ 0.9x raw_ledger_claim_finish"),
    ("claims", "service_life", "claims", "raw_ledger_life", ITEMS, ">=", 0.9, EVERY,
     "service_life ≥ 0.9x raw_ledger_life"),
    ("claims", "ledger_sql_claim_controls_elsewhere", "claims", "ledger_sql_claim", ITEMS, ">=",
     0.9, HTTP, "pull-next with keys, caps and pauses elsewhere ≥ 0.9x without (issue 38)"),
    ("claims", "ledger_sql_claim", "claims", "raw_ledger_claim", ITEMS, ">=", 0.85, EVERY,
     "product pull-next SQL ≥ 0.85x hand-written claim CTE"),
    ("http", "http_claim", "http", "asgi_raw_claim", ITEMS, ">=", 0.8, HTTP,
     "HTTP claim+start ≥ 0.8x bare ASGI app"),
    ("http", "http_claim_keyed", "http", "asgi_raw_claim", ITEMS, ">=", 0.7, HTTP,
     "HTTP claim+start keyed ≥ 0.7x bare"),
    ("http", "http_life", "http", "asgi_raw_life", ITEMS, ">=", 0.8, HTTP,
     "HTTP life (5 requests) ≥ 0.8x bare ASGI app"),
    ("http", "http_life_keyed", "http", "asgi_raw_life", ITEMS, ">=", 0.7, HTTP,
     "HTTP life keyed ≥ 0.7x bare ASGI app"),
    ("http", "http_claim_budget", "http", "http_claim", ITEMS, ">=", 0.9, HTTP,
     "HTTP claim+start, 1,000 budgets ≥ 0.9x none"),
    ("http", "http_claim_controls", "http", "http_claim", ITEMS, ">=", 0.9, HTTP,
     "HTTP claim+start, controls ≥ 0.9x none"),
    ("http", "http_life_by_model", "http", "http_life", ITEMS, ">=", 0.9, HTTP,
     "HTTP life, cost by model ≥ 0.9x cents alone"),
    ("http", "http_claim", "http", "asgi_raw_claim", CPU, "<=", 1.6, HTTP,
     "serve app CPU per claim+start ≤ 1.6x the bare app's"),
    ("http", "http_claim", "claims", "raw_ledger_claim", P99, "<=", 3.0, AT64,
     "HTTP claim p99 ≤ 3x raw ledger-shaped statement p99"),
    ("http", "http_claim", "claims", "pgqueuer_manager", ITEMS, ">=", 1.5, AT64,
     "HTTP claim ≥ 1.5x PGQueuer QueueManager"),
]  # fmt: skip


def evaluate(result: dict[str, Any], levels: list[int]) -> list[dict[str, Any]]:
    out = []
    for sec, ours, lsec, limit, figure, op, bound, only, name in RATIO_GOALS:
        for c in (x for x in levels if only is None or x in only):
            a = _get(result, sec, "median", ours, str(c), figure)
            b = _get(result, lsec, "median", limit, str(c), figure)
            how = f"{figure} of {ours} ÷ {figure} of {limit}, medians"
            out.append(_goal(f"{name} (c={c})", _ratio(a, b), op, bound, how))
    claim, lp, soak = (
        _get(result, *k) or {} for k in (("scale", "claim"), ("longpoll",), ("soak",))
    )
    small, large = claim.get("sizes", {"small": 1000, "large": 1000000}).values()
    out += [
        _goal(f"claim p50 at {large:,} ready ≤ 1.2x at {small:,}",
              _ratio(_get(claim, "large", "claim_p50_ms"), _get(claim, "small", "claim_p50_ms")),
              "<=", 1.2, "service claim p50 (c=1) with the large backlog ÷ with the small one"),
        _goal("long-poll wake-up p50 ≤ 50 ms", lp.get("wake_p50_ms"), "<=", 50, ""),
        _goal(f"long-poll database connections ≤ {POOL + 1}", lp.get("db_connections_max"),
              "<=", POOL + 1, "serve's pool and listener, max over the run: no waiter holds one"),
        _goal("long-poll server RSS ≤ 200 MB", lp.get("server_rss_mb_max"), "<=", 200, ""),
        _goal("soak: claim p50 last 10% ≤ 1.5x first 10%",
              _ratio(_get(soak, "last", "claim_p50_ms"), _get(soak, "first", "claim_p50_ms")),
              "<=", 1.5, "claim p50 over the last tenth of the lives ÷ over the first tenth"),
    ]  # fmt: skip
    # The largest fleet on one serve: no errors, and RSS and descriptors flat.
    runs = [r for r in _get(result, "fleet", "runs") or [] if r["replicas"] == 1]
    if runs:
        r = max(runs, key=lambda x: x["agents"])
        flat = "median of the last third of the samples ÷ of the first third"
        p99 = f"claim p99 {round(r['claim_p99_ms'] or 0, 1)} ms over {r['seconds']} s"
        name = f"fleet: {r['agents']} agents on one serve, errors = 0"
        out.append(_goal(name, r["errors"], "<=", 0, p99))
        for key, bound in (("serve_rss_mb", 1.1), ("serve_fds", 1.2)):
            value = (r[key].get("flat") or [None])[0]  # an older run's JSON may lack it
            out.append(_goal(f"fleet: {key} flat (≤ {bound}x)", value, "<=", bound, flat))
    return out


PAIRS = [  # (section, ours, its limit)
    ("claims", "ledger_sql_claim", "raw_ledger_claim"),
    ("claims", "raw_ledger_claim", "raw_bare_claim"),
    ("claims", "service_claim", "ledger_sql_claim"),
    ("claims", "service_claim", "raw_ledger_claim"),
    ("claims", "service_claim_finish", "raw_ledger_claim_finish"),
    ("claims", "service_life", "raw_ledger_life"), ("http", "http_claim", "asgi_raw_claim"),
    ("http", "http_claim", "fastapi_raw_claim"), ("http", "fastapi_raw_claim", "asgi_raw_claim"),
    ("http", "http_life", "asgi_raw_life"), ("http", "http_claim_keyed", "http_claim"),
    ("http", "http_life_keyed", "http_life"), ("http", "http_claim_budget", "http_claim"),
    ("http", "http_claim_controls", "http_claim"), ("http", "http_life_by_model", "http_life"),
]  # fmt: skip


def _cpu_per_item(m: dict[str, Any]) -> float | None:
    parts = [m.get("client_cpu_ms_per_item"), m.get("server_cpu_ms_per_item")]
    return None if None in parts else sum(parts) + (m.get("app_cpu_ms_per_item") or 0.0)  # type: ignore[arg-type]


def cost_ratios(result: dict[str, Any], levels: list[int]) -> list[dict[str, Any]]:
    """Throughput and CPU-per-item ratios of each configuration against its limit, and of
    the app's CPU alone. CPU per item (client + PostgreSQL + app) barely moves when other
    work competes for the cores: the steadier of the two on a shared machine."""
    rows = []
    for section, ours, limit in PAIRS:
        for c in levels:
            a = _get(result, section, "median", ours, str(c))
            b = _get(result, section, "median", limit, str(c))
            if a and b:
                cpu_a, cpu_b = _cpu_per_item(a), _cpu_per_item(b)
                rows.append({"ours": ours, "limit": limit, "c": c,
                             "throughput_ratio": _ratio(a[ITEMS], b[ITEMS]),
                             "cpu_ms_per_item": cpu_a, "limit_cpu_ms_per_item": cpu_b,
                             "cpu_ratio": _ratio(cpu_a, cpu_b),
                             "app_cpu_ratio": _ratio(a.get(CPU), b.get(CPU))})  # fmt: skip
    return rows


def _n(x: Any, digits: int = 0) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    return f"{x:,.{digits}f}" if isinstance(x, int | float) else str(x)


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str, int]]) -> list[str]:
    """A Markdown table: (key, heading, digits) per column; text for digits < 0."""
    lines = ["| " + " | ".join(h for _, h, _ in columns) + " |"]
    lines.append("|" + "|".join("---" if d < 0 else "---:" for *_, d in columns) + "|")
    for row in rows:
        cells = [str(row.get(k, "")) if d < 0 else _n(row.get(k), d) for k, _, d in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


MEDIANS = [
    ("name", "config", -1), ("c", "c", -1), (ITEMS, "items/s", 0), ("claim_p50_ms", "p50 ms", 2),
    (P99, "p99 ms", 2), ("client_cpu_pct", "client CPU %", 0), ("app_cpu_pct", "app CPU %", 0),
    ("server_cpu_pct", "server CPU %", 0), ("other_cpu_pct", "other CPU %", 0),
    ("client_cpu_ms_per_item", "client ms/item", 3), (CPU, "app ms/item", 3),
    ("server_cpu_ms_per_item", "server ms/item", 3), ("db_connections", "DB conns", 0),
    ("app_rss_mb", "app RSS MB", 0),
]  # fmt: skip
AB = [("loop", "loop", -1), ("c", "c", -1), ("r_items_per_s", "B/A items/s", 3),
      ("r_claim_p99_ms", "B/A claim p99", 3), ("r_app_cpu_ms_per_item", "B/A serve CPU/item", 3),
      ("A_items", "A items/s", 0), ("B_items", "B items/s", 0)]  # fmt: skip
GOALS = [("goal", "goal", -1), ("value", "measured", 3), ("bound", "bound", -1),
         ("verdict", "verdict", -1)]  # fmt: skip
RATIOS = [
    ("ours", "ours", -1), ("limit", "limit", -1), ("c", "c", 0),
    ("throughput_ratio", "throughput ratio", 2), ("cpu_ms_per_item", "ours CPU ms/item", 3),
    ("limit_cpu_ms_per_item", "limit CPU ms/item", 3), ("cpu_ratio", "CPU ratio", 2),
    ("app_cpu_ratio", "app CPU ratio", 2)]  # fmt: skip


def medians_table(section: dict[str, Any]) -> list[str]:
    rows = [
        {"name": n, "c": c, **m} for n, by_c in section["median"].items() for c, m in by_c.items()
    ]
    columns = [col for col in MEDIANS if any(r.get(col[0]) is not None for r in rows)]
    lines = [*table(rows, columns), "", "What one item's measured loop includes:", ""]
    return lines + [f"- `{name}`: {cfg['loop']}" for name, cfg in section["configs"].items()]


def figures(node: Any, prefix: str = "") -> list[str]:
    """Every figure of a section as `| figure | value |` rows; plans as excerpts."""
    lines = []
    for key, value in node.items():
        if "explain" in key:
            plans = value.values() if isinstance(value, dict) else [value]
            keep = ("Index", "Rows Removed", "Time", "Buffers")
            for plan in plans:
                lines.append(f"| {prefix}{key} | " + "; ".join(
                    x.strip() for x in plan if any(k in x for k in keep)) + " |")  # fmt: skip
        elif isinstance(value, dict):
            lines += figures(value, f"{prefix}{key}.")
        elif key not in ("samples", "runs", "windows"):
            lines.append(
                f"| {prefix}{key} | {_n(value, 2) if isinstance(value, float) else value} |"
            )
    return lines


def markdown(result: dict[str, Any], json_name: str) -> str:
    head = f"Run started {result['started_at']}, finished {result.get('finished_at')}; command "
    lines = [head + f"`{result['command']}`; raw JSON `{json_name}`.", ""]
    m, product = result["machine"], result["product"]
    lines.append(f"Machine: {m['cpu_model']}, {m['logical_cpus']} logical CPUs, {m['memory_gb']} "
                 f"GB; {m['os']}; Python {m['python']}, asyncpg {m['asyncpg']}. Product measured: "
                 f"commit {product['commit']}"
                 + (" with uncommitted changes under src/" if product["uncommitted_in_src"] else "")
                 + f"; PGQueuer {product['pgqueuer']}.")  # fmt: skip
    if "against" in result:  # the A/B mode: the medians of the same-round ratios B/A
        ab = result["against"]
        rows = [{"loop": x["loop"], "c": x["c"], **{f"r_{k}": v for k, v in x["b_over_a"].items()},
                 **{f"{n}_items": m["items_per_s"] for n, m in x["median"].items()}}
                for x in ab["levels"]]  # fmt: skip
        lines += ["", f"## A/B: A = {ab['rev']}, B = this checkout", "", *table(rows, AB)]
        return "\n".join(lines) + "\n"
    loads = [
        _n((result.get(k) or [None])[0], 2) for k in ("load_average_start", "load_average_end")
    ]
    settings = ", ".join(f"{k}={v}" for k, v in sorted(result["postgres"].items()))
    lines += ["", f"Load average at start {loads[0]}, at end {loads[1]}. PostgreSQL: {settings}."]
    lines += ["", "## Goals", "", *table(result["goals"], GOALS)]
    if result.get("ratios"):
        lines += [
            "",
            "## Ratios against the limits",
            "",
            "Throughput (ours ÷ limit, higher is "
            "better) and CPU per item (client + PostgreSQL + app, ms; lower is better, and "
            "steadier under outside load).",
            "",
            *table(result["ratios"], RATIOS),
        ]
    for name in ("claims", "diagnostics", "http"):
        if name in result:
            lines += [
                "",
                f"## {name} (median of the repetitions)",
                "",
                *medians_table(result[name]),
            ]
    sections = [(n, result[n]) for n in ("scale", "longpoll", "limits", "soak") if n in result]
    for r in (result.get("fleet") or {}).get("runs", []):
        sections.append((f"fleet: {r['agents']} agents on {r['replicas']} serve", r))
    for name, figured in sections:
        lines += ["", f"## {name}", "", "| figure | value |", "|---|---|", *figures(figured)]
    for name, program in result.get("programs", {}).items():
        verdict = "ran" if program["exit"] == 0 else f"FAILED (exit {program['exit']})"
        lines += ["", f"## {name}: `{program['command']}` {verdict} in {program['seconds']} s"]
        lines += ["", "```", *program["output"][-30:], *program["errors"], "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    path = Path(sys.argv[1])
    run = json.loads(path.read_text(encoding="utf-8"))
    if "against" not in run:  # the goals as this code computes them
        levels = [int(x) for x in run["options"]["concurrency"].split(",")]
        run["goals"], run["ratios"] = evaluate(run, levels), cost_ratios(run, levels)
    sys.stdout.write(markdown(run, path.name))
