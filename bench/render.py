"""Render the Markdown tables of one or more runs' JSON (later files add their sections).

    python bench/render.py bench/results/run-A.json [bench/results/run-B.json]

With several files, each section is taken from the last file that has it, and the goals
and ratios are recomputed over the merged figures; the header names every source run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import goals
import report

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


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]]
    merged = merge(paths)
    text = report.markdown(merged, paths[0].name)
    if len(paths) > 1:
        text = "Sections from: " + "; ".join(merged["sources"]) + ".\n\n" + text
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
