"""Render the Markdown tables of one or more runs' JSON (later files add their sections).

    python -m bench.render [--pool] bench/results/run-A.json [bench/results/run-B.json]

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

from bench import goals, report
from bench.harness import median_of

SECTIONS = ("claims", "diagnostics", "http", "longpoll", "soak", "scale")


def merge(paths: list[Path]) -> dict[str, Any]:
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    merged = dict(runs[0])
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
    text = report.markdown(merged, paths[0].name)
    if len(paths) > 1:
        text = "Sections from: " + "; ".join(merged["sources"]) + ".\n\n" + text
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
