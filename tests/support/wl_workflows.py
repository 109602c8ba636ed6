"""The workflows of the Temporal tests: one per way a run can end. Deterministic, no I/O."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

EVIDENCE = "https://ci.example/runs/temporal"


@workflow.defn(name="Migrate")
class Migrate:
    """`mode` says how the run ends: complete (with evidence), plain (without), fail,
    wait (until the `proceed` signal, a cancel, a terminate or its execution timeout),
    continue (continues as new once, then completes)."""

    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def proceed(self) -> None:
        self.go = True

    @workflow.run
    async def run(self, mode: str) -> Any:
        if mode == "wait":
            await workflow.wait_condition(lambda: self.go)
            return {"evidence_url": EVIDENCE}
        if mode == "complete":
            return {"evidence_url": EVIDENCE}
        if mode == "plain":
            return "done"
        if mode == "fail":
            raise ApplicationError("the migration broke", non_retryable=True)
        if mode == "continue":
            workflow.continue_as_new("complete")
        raise ApplicationError(f"unknown mode {mode!r}", non_retryable=True)
