"""`python -m work_ledger.cli`: the `work-ledger` command (the benchmark runs it so)."""

from work_ledger.cli import main

main()
