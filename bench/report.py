"""The Markdown rendering of one run's JSON, or of several (later files add their sections).

    python -m bench.report [--pool] bench/results/run-A.json [bench/results/run-B.json]

With several files, each section is taken from the last file that has it, and the goals
and ratios are recomputed over the merged figures; the header names every source run.
With `--pool`, the runs measured the same code: every repetition of every run counts, each
figure the median of them all (a steadier verdict than one run's three repetitions, when
the machine's speed drifts by ±10 % between runs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench import ab, diagnose, endurance, goals, scale
from bench.harness import median_of


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


def fleet_table(result: dict[str, Any]) -> list[str]:
    fl = result.get("fleet")
    if not fl:
        return []
    lines = [
        "## Fleet",
        "",
        "Agents over HTTP through the async SDK, a token each, long-polls of 30 s, "
        "a heartbeat each life; units arriving for about half the fleet. RSS and descriptors "
        "per serve: after a tenth of the run → at the end (max; flat: median of the last "
        "third of the samples ÷ the first third's).",
        "",
        "| agents | serve | s | lives/s | claim p50 ms | claim p99 ms | write p99 ms | errors "
        "| RSS MB | fds | PG conns max | CPU % serve / client / PG | waited for a CPU % "
        "serve / client |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|---|",
    ]
    for r in fl["runs"]:
        rss, fds = r["serve_rss_mb"], r["serve_fds"]
        lines.append(
            f"| {r['agents']} | {r['replicas']} | {r['seconds']:.0f} | {r['lives_per_s']} "
            f"| {_ms(r['claim_p50_ms'])} | {_ms(r['claim_p99_ms'])} | {_ms(r['write_p99_ms'])} "
            f"| {r['errors']} | {rss['settled']} → {rss['end']} ({rss['max']}; {rss['flat']}) "
            f"| {fds['settled']} → {fds['end']} ({fds['max']}; {fds['flat']}) "
            f"| {r['pg_connections_max']} "
            f"| {r['serve_cpu_pct']} / {r['client_cpu_pct']} / {r['pg_cpu_pct']} "
            f"| {r.get('serve_run_queue_pct')} / {r.get('client_run_queue_pct')} |"
        )
    return lines


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


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
    if result.get("fleet"):
        lines += ["", *fleet_table(result)]
    for name, program in result.get("programs", {}).items():
        verdict = "ran" if program["exit"] == 0 else f"FAILED (exit {program['exit']})"
        lines += ["", f"## {name}: `{program['command']}` {verdict} in {program['seconds']} s"]
        lines += ["", "```", *program["output"][-30:], *program["errors"], "```"]
    return "\n".join(lines) + "\n"


SECTIONS = ("claims", "diagnostics", "http", "longpoll", "soak", "scale")


def merge(paths: list[Path]) -> dict[str, Any]:
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    merged = dict(runs[0])
    if "against" in merged:  # an A/B run (`--against`): nothing to merge or recompute
        return merged
    sources = []
    for path, run in zip(paths, runs, strict=True):
        taken = [s for s in SECTIONS if s in run]
        for section in taken:
            merged[section] = run[section]
        sources.append(f"`{path.name}` ({', '.join(taken)}; started {run['started_at']})")
    merged["finished_at"] = runs[-1].get("finished_at")
    merged["load_average_end"] = runs[-1].get("load_average_end", [0, 0, 0])
    levels = [int(x) for x in merged["options"]["concurrency"].split(",")]
    merged["goals"] = goals.evaluate(merged, levels)
    merged["ratios"] = goals.cost_ratios(merged, levels)
    merged["sources"] = sources
    return merged


def pool(paths: list[Path]) -> dict[str, Any]:
    """`merge`, with each measured section's repetitions those of all the runs together."""
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    merged = merge(paths)
    for section in SECTIONS:
        with_reps = [run[section] for run in runs if "runs" in run.get(section, {})]
        if len(with_reps) < 2:
            continue
        reps: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for measured in with_reps:
            for name, by_c in measured["runs"].items():
                for c, samples in by_c.items():
                    reps.setdefault(name, {}).setdefault(c, []).extend(samples)
        medians = {name: {c: median_of(s) for c, s in by_c.items()} for name, by_c in reps.items()}
        merged[section] = {**merged[section], "runs": reps, "median": medians}
    levels = [int(x) for x in merged["options"]["concurrency"].split(",")]
    merged["goals"] = goals.evaluate(merged, levels)
    merged["ratios"] = goals.cost_ratios(merged, levels)
    merged["sources"] = [f"`{p.name}` (pooled: every repetition)" for p in paths]
    return merged


def main() -> None:
    args = sys.argv[1:]
    pooled = "--pool" in args
    paths = [Path(p) for p in args if p != "--pool"]
    merged = pool(paths) if pooled else merge(paths)
    text = markdown(merged, paths[0].name)
    if len(paths) > 1:
        text = "Sections from: " + "; ".join(merged["sources"]) + ".\n\n" + text
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
