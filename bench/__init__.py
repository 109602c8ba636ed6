"""The work-ledger benchmark: run as modules from the repository root, e.g.
`uv run --group bench python -m bench.run` (see bench/README.md)."""
