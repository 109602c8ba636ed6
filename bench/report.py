"""The Markdown rendering of one run's JSON."""

from __future__ import annotations

from typing import Any

from bench import ab, diagnose, endurance, scale


def _n(x: Any, digits: int = 0) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int | float):
        return f"{x:,.{digits}f}"
    return str(x)


def claims_table(claims: dict[str, Any]) -> list[str]:
    lines = [
        "| config | c | items/s | claim p50 ms | claim p99 ms | client CPU % | server CPU % "
        "| other CPU % | client ms/item | server ms/item | first use s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, by_c in claims["median"].items():
        for c, m in by_c.items():
            lines.append(
                f"| {name} | {c} | {_n(m['items_per_s'])} | {_n(m['claim_p50_ms'], 2)} "
                f"| {_n(m['claim_p99_ms'], 2)} | {_n(m['client_cpu_pct'])} "
                f"| {_n(m['server_cpu_pct'])} | {_n(m['other_cpu_pct'])} "
                f"| {_n(m['client_cpu_ms_per_item'], 3)} | {_n(m['server_cpu_ms_per_item'], 3)} "
                f"| {_n(m.get('first_use_s'), 2)} |"
            )
    lines += ["", "What one item's measured loop includes:", ""]
    lines += [f"- `{name}`: {cfg['loop']}" for name, cfg in claims["configs"].items()]
    return lines


def http_table(http: dict[str, Any]) -> list[str]:
    lines = [
        "## HTTP (median of the repetitions)",
        "",
        "| config | c | items/s | claim p50 ms | claim p99 ms | client CPU % | app CPU % "
        "| server CPU % | other CPU % | app ms/item | DB conns | app RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, by_c in http["median"].items():
        for c, m in by_c.items():
            lines.append(
                f"| {name} | {c} | {m['items_per_s']:,.0f} | {m['claim_p50_ms']:.2f} "
                f"| {m['claim_p99_ms']:.2f} | {m['client_cpu_pct']:.0f} | {m['app_cpu_pct']:.0f} "
                f"| {m['server_cpu_pct']:.0f} | {m['other_cpu_pct']:.0f} "
                f"| {m['app_cpu_ms_per_item']:.3f} | {m['db_connections']:.0f} "
                f"| {m['app_rss_mb']:.0f} |"
            )
    lines += ["", "What one item's measured loop includes:", ""]
    lines += [f"- `{name}`: {cfg['loop']}" for name, cfg in http["configs"].items()]
    return lines


def goals_table(goals: list[dict[str, Any]]) -> list[str]:
    lines = ["| goal | measured | bound | verdict |", "|---|---:|---|---|"]
    for g in goals:
        lines.append(f"| {g['goal']} | {_n(g['value'], 3)} | {g['bound']} | **{g['verdict']}** |")
    return lines


def markdown(result: dict[str, Any], json_name: str) -> str:
    if "against" in result:
        return "\n".join(
            [f"Run started {result['started_at']}; command `{result['command']}`; raw JSON "
             f"`{json_name}`; machine {result['machine']}.", "", *ab.markdown(result["against"])]
        )  # fmt: skip
    m, pg = result["machine"], result["postgres"]
    lines = [
        f"Run started {result['started_at']}, finished {result.get('finished_at')}; "
        f"command `{result['command']}`; raw JSON `bench/results/{json_name}`.",
        "",
        f"Machine: {m['cpu_model']}, {m['logical_cpus']} logical CPUs, {m['memory_gb']} GB; "
        f"{m['os']}; Python {m['python']}, asyncpg {m['asyncpg']}. Load average at start "
        f"{_n(result['load_average_start'][0], 2)}, at end "
        f"{_n((result.get('load_average_end') or [None])[0], 2)}.",
        "",
        f"Product measured: commit {result['product']['commit']}"
        + (
            " with uncommitted changes under src/ (other sessions at work)"
            if result["product"]["uncommitted_in_src"]
            else ""
        )
        + f"; PGQueuer {result['product']['pgqueuer']}.",
        "",
        "PostgreSQL: " + ", ".join(f"{k}={v}" for k, v in sorted(pg.items())) + ".",
        "",
        "## Goals",
        "",
        *goals_table(result["goals"]),
    ]
    if result.get("ratios"):
        lines += [
            "",
            "## Ratios against the limits",
            "",
            "Throughput ratio (ours ÷ limit, higher is better) and CPU per item (client + "
            "PostgreSQL + app, ms; lower is better, and steadier under outside load).",
            "",
            "| ours | limit | c | throughput ratio | ours CPU ms/item | limit CPU ms/item "
            "| CPU ratio |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in result["ratios"]:
            lines.append(
                f"| {r['ours']} | {r['limit']} | {r['c']} | {_n(r['throughput_ratio'], 2)} "
                f"| {_n(r['cpu_ms_per_item'], 3)} | {_n(r['limit_cpu_ms_per_item'], 3)} "
                f"| {_n(r['cpu_ratio'], 2)} |"
            )
    if "claims" in result:
        lines += [
            "",
            "## Claim path (median of the repetitions)",
            "",
            *claims_table(result["claims"]),
        ]
    if "diagnostics" in result:
        diag = result["diagnostics"]
        lines += ["", "## Diagnostics: where the ledger's claim cost goes", ""]
        lines += claims_table(diag)
        if "plans" in diag:
            lines += ["", *diagnose.markdown(diag["plans"])]
    if "http" in result:
        lines += ["", *http_table(result["http"])]
    if "scale" in result:
        lines += ["", *scale.markdown(result["scale"])]
    if "longpoll" in result or "soak" in result:
        lines += ["", *endurance.markdown(result)]
    for name, program in result.get("programs", {}).items():
        verdict = "ran" if program["exit"] == 0 else f"FAILED (exit {program['exit']})"
        lines += ["", f"## {name}: `{program['command']}` {verdict} in {program['seconds']} s"]
        lines += ["", "```", *program["output"][-30:], *program["errors"], "```"]
    return "\n".join(lines) + "\n"
