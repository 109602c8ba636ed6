"""The tool that asks a human: ask (block on a question, wait for the answer)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import Field

from work_ledger.mcp.holding import UnitRef
from work_ledger.mcp.session import Refusal, session_of, tool


@tool
async def ask(
    ctx: Context,
    question: Annotated[
        str | None, Field(description="The question; omit to keep waiting.")
    ] = None,
    unit: UnitRef = None,
    wait_seconds: Annotated[int, Field(ge=0, le=600, description="How long to wait.")] = 50,
) -> str:
    """Block the unit on a question only a human can answer, and wait for the answer.
    The lease pauses meanwhile. If no answer comes in time, call ask again without
    a question to keep waiting."""
    work = await session_of(ctx).work_for(unit)
    if question is not None:
        open_question = await work.block(question)
    else:
        found = (await work.refresh()).open_question
        if found is None:
            raise Refusal(
                f"no_open_question: unit {work.unit.external_ref} has no open question; "
                "pass `question` to ask one"
            )
        open_question = found
    got = await work.wait_for_answer(open_question.id, timeout=wait_seconds)
    if got.status == "answered":
        return f"Answer: {got.answer}\nUnit {work.unit.external_ref} is in_progress again."
    if got.status == "cancelled":
        return (
            f"The question was withdrawn without an answer; unit "
            f"{work.unit.external_ref} is in_progress again. Go on, or release it."
        )
    return (
        f"No answer yet (question {got.id} is open; unit {work.unit.external_ref} stays "
        "blocked). Call ask again without a question to keep waiting, or dispose DEFERRED."
    )


TOOLS = (ask,)
